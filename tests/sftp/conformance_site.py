"""The SFTP backend as a conformance-suite site: one real sshd for the whole run, a folder per test.

``tests/conformance/conftest.py`` imports :func:`sftp_site` as its ``sftp`` factory. The server is
started on first use and stopped when the test process exits (sshd also dies with its parent,
see ``SshServer._spawn``).
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sshd import SshServer, require_sshd

ALIAS = "ferry-conformance"

_server: SshServer | None = None
_config: Path | None = None
_lock = threading.Lock()


def shared_server() -> tuple[SshServer, Path]:
    """The run's conformance sshd and an ssh_config naming it ``ferry-conformance``."""
    global _server, _config
    require_sshd()
    with _lock:
        if _server is None:
            server = SshServer().start()
            atexit.register(server.stop)
            _config = server.ssh_config(server.dir / "ssh_config", ALIAS)
            _server = server
        assert _config is not None
        return _server, _config


def sftp_backend(server: SshServer, config: Path, alias: str = ALIAS) -> Any:
    """An ``SFTPBackend`` for ``alias`` resolved through ``config`` (FERRY_SSH_CONFIG only while
    resolving, so other tests in the process keep their own view)."""
    from ferry.backends.sftp import SFTPBackend
    from ferry.core.address import Address

    before = os.environ.get("FERRY_SSH_CONFIG")
    os.environ["FERRY_SSH_CONFIG"] = str(config)
    try:
        return SFTPBackend(Address("sftp", "", host=alias))
    finally:
        if before is None:
            os.environ.pop("FERRY_SSH_CONFIG", None)
        else:
            os.environ["FERRY_SSH_CONFIG"] = before


def sftp_site(tmp_path: Path) -> Iterator[Any]:
    from conformance.conftest import Site

    server, config = shared_server()
    folder = server.mkdir("conf-")
    backend = sftp_backend(server, config)
    yield Site(backend, str(folder))
    backend.close()
