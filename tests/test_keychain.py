"""Secrets: the OS keychain through keyring, or process memory only when there is none."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.core.errors import UsageError
from ferry.credentials import keychain
from keyring_memory import FAIL, LOCKED, LOW_PRIORITY, MEMORY, NULL, MemoryKeyring, selected_keyring

SECRET = "correct horse battery staple"


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Anything Ferry might write lands in tmp_path, where the no-plaintext tests look for it.
    monkeypatch.setenv("FERRY_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("FERRY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


@pytest.fixture
def memory_keyring(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with selected_keyring(monkeypatch, MEMORY):
        yield


@pytest.fixture
def no_keyring(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with selected_keyring(monkeypatch, FAIL):
        yield


def _files_containing(root: Path, needle: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


# -- with a keychain --


def test_round_trip_in_keychain(memory_keyring: None) -> None:
    key = keychain.site_secret_key("hpc")
    assert key == "site:hpc:password"
    assert keychain.keychain_available()
    assert keychain.get_secret(key) is None
    assert keychain.set_secret(key, SECRET) is True
    assert MemoryKeyring.store == {("ferry", "site:hpc:password"): SECRET}
    assert keychain.get_secret(key) == SECRET
    assert keychain.has_secret(key)
    assert keychain.delete_secret(key) is True
    assert keychain.get_secret(key) is None
    assert keychain.delete_secret(key) is False  # nothing left: not an error


def test_status_names_the_keychain(memory_keyring: None) -> None:
    status = keychain.keychain_status()
    assert status.available
    assert status.backend == MEMORY
    # Unknown backends go by keyring's display name ("keyring memory MemoryKeyring" here).
    assert (
        keychain.keychain_description() == "Passwords are kept in the 'keyring memory MemoryKeyring' keyring."
    )
    assert "session only" not in status.description


def test_secret_overwrite(memory_keyring: None) -> None:
    keychain.set_secret("k1", "one")
    keychain.set_secret("k1", "two")
    assert keychain.get_secret("k1") == "two"


# -- without one --


@pytest.mark.parametrize("backend", [FAIL, NULL, LOW_PRIORITY])
def test_no_usable_keychain_detected(monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    with selected_keyring(monkeypatch, backend):
        status = keychain.keychain_status()
        assert not status.available
        assert status.backend == backend
        assert "No usable system keychain" in status.reason
        assert "memory" in status.description and "nothing is written to disk" in status.description
        assert keychain.keychain_description() == status.description


def test_empty_chainer_is_no_keychain(monkeypatch: pytest.MonkeyPatch) -> None:
    from keyring.backends import chainer

    monkeypatch.setattr(chainer.ChainerBackend, "backends", [])
    with selected_keyring(monkeypatch, "keyring.backends.chainer.ChainerBackend"):
        assert not keychain.keychain_available()


def test_chainer_with_a_backend_is_a_keychain(monkeypatch: pytest.MonkeyPatch) -> None:
    from keyring.backends import chainer

    monkeypatch.setattr(chainer.ChainerBackend, "backends", [MemoryKeyring()])  # type: ignore[no-untyped-call]
    with selected_keyring(monkeypatch, "keyring.backends.chainer.ChainerBackend"):
        # A chainer over one backend has a negative priority of its own, yet works.
        assert keychain.keychain_available()


def test_plaintext_file_keyring_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keychain, "_PLAINTEXT", (MEMORY,))
    with selected_keyring(monkeypatch, MEMORY):
        assert not keychain.keychain_available()
        assert keychain.set_secret("k", SECRET) is False
        assert MemoryKeyring.store == {}
        assert "plain-text" in keychain.keychain_reason()


def test_memory_only_without_keychain(no_keyring: None, tmp_path: Path) -> None:
    key = keychain.site_secret_key("hpc")
    assert keychain.set_secret(key, SECRET) is False  # not persisted
    assert keychain.get_secret(key) == SECRET  # but usable for this session
    assert keychain.has_secret(key)
    assert _files_containing(tmp_path, SECRET) == []
    assert keychain.delete_secret(key) is True
    assert keychain.get_secret(key) is None
    assert keychain.delete_secret(key) is False


def test_memory_secrets_do_not_survive_the_process(no_keyring: None, tmp_path: Path) -> None:
    run = [sys.executable, "-c"]
    first = "from ferry.credentials import keychain as k; k.set_secret('site:x:password', 'p1x'); " + (
        "print(k.keychain_available(), k.get_secret('site:x:password'))"
    )
    out = subprocess.run([*run, first], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "p1x"]
    second = "from ferry.credentials import keychain as k; print(k.get_secret('site:x:password'))"
    out = subprocess.run([*run, second], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "None"
    assert _files_containing(tmp_path, "p1x") == []


def test_keychain_failing_in_use_falls_back_to_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    with selected_keyring(monkeypatch, LOCKED):
        assert keychain.keychain_available()  # looks fine until used
        assert keychain.set_secret("site:a:password", SECRET) is False
        status = keychain.keychain_status()
        assert not status.available
        assert "stopped working" in status.reason and "KeyringLocked" in status.reason
        # The backend's error text echoed the password; none of it may reach Ferry's messages.
        assert SECRET not in status.reason and SECRET not in status.description
        assert keychain.get_secret("site:a:password") == SECRET


def test_failed_read_is_none_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with selected_keyring(monkeypatch, LOCKED):
        assert keychain.get_secret("site:a:password") is None
        assert not keychain.keychain_available()


def test_secrets_never_in_reprs(no_keyring: None) -> None:
    keychain.set_secret("site:a:password", SECRET)
    assert SECRET not in repr(keychain._memory)
    assert SECRET not in str(keychain._memory)
    assert SECRET not in repr(keychain.keychain_status())


@pytest.mark.parametrize("key", ["", "a\nb", "x\x00"])
def test_malformed_keys(no_keyring: None, key: str) -> None:
    with pytest.raises(UsageError) as info:
        keychain.set_secret(key, SECRET)
    assert SECRET not in str(info.value)


def test_keyring_is_imported_lazily(tmp_path: Path) -> None:
    # Parsing addresses and building the CLI must not pay for keyring's backend discovery.
    code = (
        "import sys\n"
        "import ferry.credentials, ferry.credentials.sites as s\n"
        "import ferry.cli.cmd_ls, ferry.cli.cmd_hash, ferry.cli.cmd_sites\n"
        f"s.resolve_address({str(tmp_path)!r})\n"
        "print('keyring' in sys.modules)\n"
    )
    env = dict(os.environ, FERRY_CONFIG_DIR=str(tmp_path / "cfg"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "False"
