"""Fixtures for the Globus tests: the local fake of the services, and Ferry pointed at it.

``globus_fake`` starts :mod:`globus.fake_globus` on 127.0.0.1 for one test. ``gferry`` is the real
``ferry`` command (a subprocess) reaching it through ``GLOBUS_SDK_SERVICE_URL_*`` with a client
credential, as a server or overnight runner would. ``in_process`` points this process at the fake
(environment, a fresh login manager, a test keychain) for engine-level tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from globus.fake_globus import FakeGlobus, FakeGlobusServer
from helpers import Ferry


@pytest.fixture
def globus_server() -> Iterator[FakeGlobusServer]:
    with FakeGlobusServer() as server:
        yield server


@pytest.fixture
def globus_fake(globus_server: FakeGlobusServer) -> FakeGlobus:
    return globus_server.fake


@pytest.fixture
def gferry(tmp_path: Path, globus_server: FakeGlobusServer) -> Ferry:
    """``ferry`` as a service account (GLOBUS_CLIENT_ID/SECRET) against the fake."""
    return Ferry(home=tmp_path, cwd=tmp_path, extra_env=globus_server.env())


@pytest.fixture
def in_process(
    tmp_path: Path, globus_server: FakeGlobusServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeGlobusServer]:
    """This process talks to the fake as a logged-in *person* (keychain: the tests' memory keyring)."""
    from ferry.credentials import globus_auth
    from keyring_memory import MEMORY, selected_keyring

    for k, v in globus_server.env(client=False).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("GLOBUS_CLIENT_ID", raising=False)
    monkeypatch.delenv("GLOBUS_CLIENT_SECRET", raising=False)
    monkeypatch.setenv("FERRY_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("FERRY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("FERRY_GLOBUS_NO_BROWSER", "1")
    globus_auth.reset_shared_auth()
    with selected_keyring(monkeypatch, MEMORY):
        yield globus_server
    globus_auth.reset_shared_auth()


@pytest.fixture
def client_fake(
    globus_server: FakeGlobusServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeGlobus]:
    """This process talks to the fake as a service account (GLOBUS_CLIENT_ID/SECRET)."""
    from ferry.credentials import globus_auth

    for k, v in globus_server.env(client=True).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("FERRY_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("FERRY_DATA_DIR", str(tmp_path / "data"))
    globus_auth.reset_shared_auth()
    yield globus_server.fake
    globus_auth.reset_shared_auth()
