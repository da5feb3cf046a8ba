"""SSH hosts over SFTP (``sftp://``), through paramiko."""

from __future__ import annotations

from ferry.backends.sftp.backend import SFTPBackend, close_all

__all__ = ["SFTPBackend", "close_all"]
