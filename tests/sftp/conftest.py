"""Fixtures for tests against real OpenSSH servers (see ``tests/sshd.py``).

``sshd`` is one server for the whole run (give each test its own folder: ``sshd.mkdir()``);
``sshd_factory`` starts extra servers with their own settings, stopped after the test. When a test
fails, what the servers logged during it is added to the report.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest

from sshd import SshServer, require_sshd

_live: list[SshServer] = []
_log_offsets = pytest.StashKey[dict[int, int]]()


@pytest.fixture(scope="session")
def sshd() -> Iterator[SshServer]:
    require_sshd()
    with SshServer() as server:
        _live.append(server)
        yield server
        _live.remove(server)


@pytest.fixture
def sshd_factory() -> Iterator[Callable[..., SshServer]]:
    """``sshd_factory(max_sessions=2, ...)``: a started server, with :class:`SshServer`'s options."""
    require_sshd()
    started: list[SshServer] = []

    def start(**options: Any) -> SshServer:
        server = SshServer(**options)
        started.append(server)
        server.start()
        _live.append(server)
        return server

    yield start
    for server in started:
        if server in _live:
            _live.remove(server)
        server.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    item.stash[_log_offsets] = {id(s): s.log.stat().st_size for s in _live if s.log.exists()}
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if report.when == "call" and report.failed:
        offsets = item.stash.get(_log_offsets, {})
        for server in _live:
            report.sections.append((f"sshd log (port {server.port})", server.log_text(offsets.get(id(server), 0))))
    return report
