"""Every ``ferry`` run pays only for what it uses: building the parser and reading plain addresses
load no SDK, no watcher, no sharing code, no saved-sites/keychain module and not the engine
(each costs start-up time on every run), and the constants repeated to keep them out stay
equal to the originals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import json, sys
from ferry.cli.main import build_parser
from ferry.cli.transfer_common import resolve
build_parser()
a = resolve(sys.argv[1])
b = resolve(sys.argv[2])
print(json.dumps({"modules": sorted(sys.modules), "a": [a.scheme, a.path], "b": [b.scheme, b.host, b.path]}))
"""

NOT_AT_START = (
    "paramiko",
    "boto3",
    "botocore",
    "globus_sdk",
    "keyring",
    "ferry.backends.sftp",
    "ferry.backends.s3",
    "ferry.backends.globus",
    "ferry.transfers.watch",
    "ferry.sharing.types",
    "ferry.backends.sharing",
    "ferry.credentials.sites",
    "ferry.credentials.keychain",
    "ctypes.util",
    # The engine loads when a command runs a job ('ferry ls' and '--help' need none of it).
    "sqlite3",
    "ferry.transfers.store",
    "ferry.transfers.scheduler",
    "ferry.transfers.copy",
    "ferry.transfers.planner",
)


def test_parser_and_plain_addresses_load_no_heavy_module(tmp_path: Path) -> None:
    env = dict(os.environ, FERRY_CONFIG_DIR=str(tmp_path / "config"), FERRY_DATA_DIR=str(tmp_path / "data"))
    res = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "a:b"), "sftp://u@example.org:2222/x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    loaded = set(out["modules"])
    heavy = sorted(m for m in loaded if m.split(".")[0] in NOT_AT_START or m in NOT_AT_START)
    assert heavy == []
    assert out["a"] == ["local", str(tmp_path / "a:b")]
    assert out["b"] == ["sftp", "example.org", "/x"]


def test_site_addresses_still_resolve_through_saved_sites(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from ferry.cli.transfer_common import resolve
    from ferry.credentials.sites import SiteStore, resolve_address

    monkeypatch.setenv("FERRY_CONFIG_DIR", str(tmp_path / "config"))
    SiteStore().add("archive", "sftp://me@archive.example.org/data")
    addr = resolve("archive:run42")
    assert addr == resolve_address("archive:run42")
    assert (addr.scheme, addr.host) == ("sftp", "archive.example.org")


def test_watch_default_settle_matches_the_watcher() -> None:
    from ferry.cli import cmd_watch
    from ferry.transfers import watch

    assert cmd_watch.DEFAULT_SETTLE == watch.DEFAULT_SETTLE
