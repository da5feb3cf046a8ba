"""What an SSH host costs a ``ferry`` run before any byte moves: paramiko is imported without
``invoke`` (only ssh_config's ``Match exec`` needs it), unless the config asks for it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = (
    "import sys\n"
    "from ferry.backends.sftp import SFTPBackend\n"
    "from ferry.core.address import Address\n"
    "try:\n"
    "    SFTPBackend(Address('sftp', '/', host='example.invalid'))\n"
    "except Exception as exc:\n"
    "    print('error', type(exc).__name__)\n"
    "import paramiko\n"
    "print('invoke' in sys.modules, paramiko.SSHConfig is not None)\n"
)


@pytest.mark.parametrize(
    ("config", "invoke"),
    [
        ("Host x\n  HostName 127.0.0.1\n", False),
        ('Match exec "test -e /nonexistent"\n  User nobody\nHost x\n  HostName 127.0.0.1\n', True),
    ],
)
def test_paramiko_is_imported_without_invoke_unless_match_exec(tmp_path: Path, config: str, invoke: bool) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text(config)
    env = {**os.environ, "FERRY_SSH_CONFIG": str(cfg), "FERRY_CONFIG_DIR": str(tmp_path / "c")}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == f"{invoke} True", out.stdout + out.stderr
