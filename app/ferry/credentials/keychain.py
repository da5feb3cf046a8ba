"""Secrets in the operating system's keychain, through ``keyring``; never on disk in plain text.

Keys are ``keyring`` user names under the service ``"ferry"``, e.g. ``site:hpc:password`` (see
:func:`site_secret_key`).

Where no usable keychain exists (a headless Linux server gets keyring's ``fail`` backend, or the
``null`` backend is configured, or the keychain breaks while we use it) secrets are kept in this
process's memory only, and :func:`keychain_description` says so in a sentence the interface shows
the person. Nothing is ever written to a file as a fallback: a password in a dotfile is exactly the
leak researchers' IT departments warn about.

Secret values never appear in messages, exception text or ``repr``: errors carry the key (a site
name), and the in-memory copies are wrapped in :class:`_Secret`, whose ``repr`` is a placeholder.

``keyring`` is imported on first use: discovering its backends scans entry points and may talk to
D-Bus, which ``ferry ls`` of a local folder has no reason to pay for.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from ferry.core.errors import UsageError

SERVICE = "ferry"

# Human names for the backends people meet; anything else shows keyring's own name.
_FRIENDLY = {
    "keyring.backends.macOS.Keyring": "the macOS Keychain",
    "keyring.backends.Windows.WinVaultKeyring": "the Windows Credential Manager",
    "keyring.backends.SecretService.Keyring": "the desktop keyring (Secret Service)",
    "keyring.backends.libsecret.Keyring": "the desktop keyring (libsecret)",
    "keyring.backends.kwallet.DBusKeyring": "KWallet",
}

# keyrings.alt backends that keep secrets in a readable file: not a keychain in Ferry's sense.
_PLAINTEXT = ("keyrings.alt.file.PlaintextKeyring",)

_NONE_FOUND = "No usable system keychain was found on this computer"
_MEMORY_ONLY = (
    "so passwords are kept in memory for this session only and you will be asked again next time; "
    "nothing is written to disk."
)


@dataclass(frozen=True)
class KeychainStatus:
    """Whether secrets outlive this process, and a sentence saying where they go."""

    available: bool
    backend: str  # keyring's class path, e.g. "keyring.backends.fail.Keyring"; "" if none loaded
    reason: str  # the bare fact, e.g. "No usable system keychain was found on this computer"
    description: str  # the fact plus what Ferry does about it, for a person

    @classmethod
    def missing(cls, backend: str, reason: str) -> KeychainStatus:
        return cls(False, backend, reason, f"{reason}, {_MEMORY_ONLY}")

    @classmethod
    def present(cls, backend: str, where: str) -> KeychainStatus:
        return cls(True, backend, f"Using {where}", f"Passwords are kept in {where}.")


class _Secret:
    """A secret value whose repr/str never shows it (debuggers, logged dicts, tracebacks)."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<secret>"

    __str__ = __repr__


_lock = threading.RLock()
_status: KeychainStatus | None = None
_memory: dict[str, _Secret] = {}


def site_secret_key(site: str, field: str = "password") -> str:
    """The keychain user name for a site's secret: ``site:NAME:FIELD``."""
    return f"site:{site}:{field}"


def _check_key(key: str) -> None:
    if not key or any(ord(c) < 32 for c in key):
        raise UsageError(f"Malformed secret name {key!r}")


def _class_path(obj: object) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _detect() -> KeychainStatus:
    try:
        import keyring
        from keyring.backends import chainer, fail, null

        kr = keyring.get_keyring()
    except Exception as exc:  # a broken keyringrc.cfg or backend plug-in must not stop Ferry
        return KeychainStatus.missing("", f"The system keychain could not be opened ({type(exc).__name__})")
    path = _class_path(kr)
    friendly = _FRIENDLY.get(path, f"the '{getattr(kr, 'name', path)}' keyring")
    if isinstance(kr, fail.Keyring | null.Keyring):
        return KeychainStatus.missing(path, _NONE_FOUND)
    if path in _PLAINTEXT:
        return KeychainStatus.missing(path, f"keyring is set to a plain-text file ({path}), which Ferry does not use")
    if isinstance(kr, chainer.ChainerBackend):
        # The chainer's own priority is negative when it wraps a single backend, yet it works.
        try:
            usable = bool(kr.backends)
        except Exception:
            usable = False
        if not usable:
            return KeychainStatus.missing(path, _NONE_FOUND)
        return KeychainStatus.present(path, "the system keychain")
    try:
        priority = float(type(kr).priority)
    except Exception:  # keyring's convention: priority raises when the backend is unsuitable here
        priority = -1.0
    if priority <= 0:
        return KeychainStatus.missing(path, _NONE_FOUND)
    return KeychainStatus.present(path, friendly)


def keychain_status() -> KeychainStatus:
    """Detect (once per process) whether a real keychain is there."""
    global _status
    with _lock:
        if _status is None:
            _status = _detect()
        return _status


def keychain_available() -> bool:
    return keychain_status().available


def keychain_reason() -> str:
    """The bare fact ("No usable system keychain was found..."), for callers that say what they do."""
    return keychain_status().reason


def keychain_description() -> str:
    """One sentence for the person: where their passwords go."""
    return keychain_status().description


def _backend() -> Any:
    import keyring

    return keyring.get_keyring()


def _downgrade(exc: BaseException) -> None:
    """The keychain failed while in use (locked, D-Bus gone): use memory for the rest of the session.

    Only the exception's type goes into the sentence; its text comes from a third-party backend
    and is not ours to vouch for.
    """
    global _status
    with _lock:
        old = _status
        backend = old.backend if old is not None else ""
        _status = KeychainStatus.missing(backend, f"The system keychain stopped working ({type(exc).__name__})")


def set_secret(key: str, value: str) -> bool:
    """Store a secret; return True if it went to the keychain, False if kept in memory only."""
    _check_key(key)
    with _lock:
        if keychain_available():
            try:
                _backend().set_password(SERVICE, key, value)
            except Exception as exc:
                # Deliberately not chained or re-raised: the backend's exception might echo the value.
                _downgrade(exc)
            else:
                _memory.pop(key, None)
                return True
        _memory[key] = _Secret(value)
        return False


def get_secret(key: str) -> str | None:
    """The stored secret, or None if there is none (or the keychain cannot be read)."""
    _check_key(key)
    with _lock:
        held = _memory.get(key)
        if held is not None:
            return held.reveal()
        if not keychain_available():
            return None
        try:
            value = _backend().get_password(SERVICE, key)
        except Exception as exc:
            _downgrade(exc)
            return None
        return value if isinstance(value, str) else None


def has_secret(key: str) -> bool:
    return get_secret(key) is not None


def delete_secret(key: str) -> bool:
    """Forget a secret wherever it is; return True if one was removed."""
    _check_key(key)
    with _lock:
        removed = _memory.pop(key, None) is not None
        if not keychain_available():
            return removed
        from keyring.errors import PasswordDeleteError

        try:
            _backend().delete_password(SERVICE, key)
        except PasswordDeleteError:  # keyring's way of saying "there was none"
            return removed
        except Exception as exc:
            _downgrade(exc)
            return removed
        return True


def reset(*, reinit_backend: bool = True) -> None:
    """Forget the detected status and the in-memory secrets (tests; a settings change in the GUI).

    With ``reinit_backend`` keyring re-reads ``PYTHON_KEYRING_BACKEND`` and its config file.
    """
    global _status
    with _lock:
        _status = None
        _memory.clear()
        if reinit_backend:
            try:
                import keyring.core

                keyring.core.init_backend()
            except Exception:
                pass  # _detect() reports the failure when next asked
