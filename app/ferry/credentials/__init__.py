"""Credentials: saved sites (plain settings in ``sites.toml``) and secrets (OS keychain only).

The split is deliberate: ``sites.toml`` may be copied, shared or backed up freely because it never
holds a password; secrets live in the system keychain through :mod:`ferry.credentials.keychain`, or,
where there is none, in this process's memory for the session and nowhere else.
"""

from __future__ import annotations

from ferry.credentials.keychain import (
    KeychainStatus,
    delete_secret,
    get_secret,
    has_secret,
    keychain_available,
    keychain_description,
    keychain_reason,
    keychain_status,
    set_secret,
    site_secret_key,
)

__all__ = [
    "KeychainStatus",
    "delete_secret",
    "get_secret",
    "has_secret",
    "keychain_available",
    "keychain_description",
    "keychain_reason",
    "keychain_status",
    "set_secret",
    "site_secret_key",
]
