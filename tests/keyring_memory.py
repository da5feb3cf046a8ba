"""Keyring backends for tests, selected with ``PYTHON_KEYRING_BACKEND=keyring_memory.CLASS``.

``tests/`` must be importable (pytest puts it on ``sys.path``; subprocesses get it through
``PYTHONPATH``). Nothing here touches the real keychain of the machine running the tests.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import ClassVar

import pytest
from keyring.backend import KeyringBackend
from keyring.compat import properties
from keyring.errors import KeyringLocked, PasswordDeleteError


def _selected(cls: object) -> bool:
    """``cls`` is the class (keyring's classproperty hands it over, typed as an instance)."""
    name = f"{getattr(cls, '__module__', '')}.{getattr(cls, '__qualname__', '')}"
    return os.environ.get("PYTHON_KEYRING_BACKEND") == name


class MemoryKeyring(KeyringBackend):
    """A working keychain that lives in a class-level dict, so tests can look inside it."""

    store: ClassVar[dict[tuple[str, str], str]] = {}
    level: ClassVar[float] = 1.0

    @properties.classproperty
    def priority(cls) -> float:
        # Importing this module registers these classes with keyring's auto-detection; being
        # viable only when named explicitly keeps them out of any test that did not ask.
        if not _selected(cls):
            raise RuntimeError("test keyring: only used when PYTHON_KEYRING_BACKEND names it")
        return cls.level

    def get_password(self, service: str, username: str) -> str | None:
        return self.store.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.store[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        try:
            del self.store[(service, username)]
        except KeyError:
            raise PasswordDeleteError("not found") from None


class LockedKeyring(MemoryKeyring):
    """Looks usable, then fails in use (a locked keychain, a dropped D-Bus connection).

    The error echoes the password, as a careless backend might: Ferry must not pass it on.
    """

    def set_password(self, service: str, username: str, password: str) -> None:
        raise KeyringLocked(f"cannot store {password!r} for {username}: collection is locked")

    def get_password(self, service: str, username: str) -> str | None:
        raise KeyringLocked("collection is locked")


class LowPriorityKeyring(MemoryKeyring):
    """Works, but declares itself unsuitable (priority <= 0), as keyring's own stand-ins do."""

    level = -0.5


MEMORY = f"{__name__}.MemoryKeyring"
LOCKED = f"{__name__}.LockedKeyring"
LOW_PRIORITY = f"{__name__}.LowPriorityKeyring"
FAIL = "keyring.backends.fail.Keyring"  # what a headless Linux server gets
NULL = "keyring.backends.null.Keyring"


@contextlib.contextmanager
def selected_keyring(monkeypatch: pytest.MonkeyPatch, backend: str) -> Iterator[None]:
    """Make ``backend`` keyring's (and Ferry's) keychain for the block, then put things back.

    Subprocesses inherit the choice through the environment; ``tests/`` goes on PYTHONPATH so they
    can import this module.
    """
    import keyring.core

    from ferry.credentials import keychain

    here = os.path.dirname(os.path.abspath(__file__))
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", backend)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p))
    previous = keyring.core._keyring_backend
    MemoryKeyring.store.clear()
    keychain.reset()
    try:
        yield
    finally:
        keychain.reset(reinit_backend=False)
        keyring.core._keyring_backend = previous
        MemoryKeyring.store.clear()
