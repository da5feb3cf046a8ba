"""Addresses: the one place where user-typed locations become structured values.

Forms understood (the URL forms later backends use are parsed here already):

* local paths: ``/data/run42``, ``~/data``, ``./a:b`` (``./`` disambiguates a colon), ``file:///x``
* ``sftp://[user@]host[:port]/path`` (never ``user:password@``: refused, see :data:`PASSWORD_IN_URL`)
* ``s3://bucket/key`` (``s3://`` alone means "all buckets")
* ``globus://COLLECTION/path``
* ``memory://NAME/path`` (the in-memory test backend)
* ``NAME:path`` for a saved site (or, once the SFTP backend lands, an ssh_config alias)

Paths inside remote URLs are taken literally (no percent-decoding), as ``aws`` and ``rclone`` do,
so a key with ``%`` in it means what it says.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from urllib.parse import unquote, urlsplit

from ferry.core.errors import UsageError

REMOTE_SCHEMES = ("sftp", "s3", "globus", "memory")
_SITE_RE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9_.@-]*):(?P<path>.*)$", re.DOTALL)
_BUCKET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")
_HOST_RE = re.compile(r"^[A-Za-z0-9_.:%\[\]-]+$")

# A password typed into an address would be kept in the queue, in shell history and in every
# message that names the address: such addresses are refused, without repeating them.
PASSWORD_IN_URL = "Passwords are not accepted in addresses (they would be stored in the queue and shown): {hint}"
_PASSWORD_HINTS = {
    "sftp": "save the host once with 'ferry sites add NAME sftp://user@host --password' (the password goes to "
    "the system keychain; see 'ferry sites') and write NAME:path, or log in with an SSH key or agent",
    "s3": "save the bucket once with 'ferry sites add NAME s3://BUCKET --option access_key_id=KEY --password' "
    "(the secret goes to the system keychain; see 'ferry sites') and write NAME:path, or use an AWS profile",
}


def _password_refused(scheme: str) -> UsageError:
    hint = _PASSWORD_HINTS.get(scheme, "keep secrets in the system keychain through a saved site (see 'ferry sites')")
    return UsageError(PASSWORD_IN_URL.format(hint=hint))


@dataclass(frozen=True)
class Address:
    """A parsed location.

    ``scheme`` is ``local`` or one of :data:`REMOTE_SCHEMES`. ``host`` holds the SSH host, the S3
    bucket, the Globus collection or the memory store name. ``path`` is a native absolute path
    for ``local`` and a POSIX path for remote schemes (``""`` means the login folder on SSH and
    the bucket root on S3). ``site`` names the saved site the address came from, if any.
    """

    scheme: str
    path: str
    host: str = ""
    user: str | None = None
    port: int | None = None
    site: str | None = None
    trailing_slash: bool = False

    @property
    def is_local(self) -> bool:
        return self.scheme == "local"

    @property
    def endpoint(self) -> str:
        """Key for per-endpoint connection budgets and for "same account" decisions."""
        if self.is_local:
            return "local"
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"{self.scheme}://{user}{self._host}{port}"

    @property
    def _host(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    def join(self, *parts: str) -> Address:
        if self.is_local:
            return replace(self, path=os.path.join(self.path, *parts), trailing_slash=False)
        base = self.path or ""
        joined = posixpath.join(base, *parts) if base else posixpath.join(*parts)
        return replace(self, path=joined, trailing_slash=False)

    @property
    def name(self) -> str:
        p = self.path.rstrip("/" if not self.is_local else os.sep) or self.path
        return os.path.basename(p) if self.is_local else posixpath.basename(p)

    def parent(self) -> Address:
        if self.is_local:
            return replace(self, path=os.path.dirname(self.path.rstrip(os.sep)) or os.sep)
        return replace(self, path=posixpath.dirname(self.path.rstrip("/")) or "/")

    def __str__(self) -> str:
        if self.is_local:
            return self.path + (os.sep if self.trailing_slash and not self.path.endswith(os.sep) else "")
        if self.site:
            return f"{self.site}:{self.path}"
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        # A path relative to the login folder is written sftp://host/~/path (as sftp URLs do).
        sep = "" if self.path.startswith("/") or not self.path else ("/~/" if self.scheme == "sftp" else "/")
        return f"{self.scheme}://{user}{self._host}{port}{sep}{self.path}"


SiteResolver = Callable[[str], "Address | None"]
"""Given a site name, return its base address, or None if there is no such site."""

_extra_resolvers: list[SiteResolver] = []


def register_alias_resolver(resolver: SiteResolver) -> None:
    """Let a backend resolve ``NAME:path`` forms (the SFTP backend resolves ssh_config aliases)."""
    _extra_resolvers.append(resolver)


def parse_address(text: str, sites: SiteResolver | None = None) -> Address:
    """Parse what the user typed; raise :class:`UsageError` with a one-line reason if malformed."""
    if not text:
        raise UsageError("Empty address")
    if "\x00" in text:
        raise UsageError("Address contains a NUL character")
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", text):  # not "./a://b", a local name with "://"
        return _parse_url(text)
    m = _SITE_RE.match(text)
    # A one-letter "site" is a Windows drive ("C:\\data"), and anything with a slash before the
    # colon is a path ("./a:b", "/x/y:z").
    if m and len(m.group("name")) > 1 and os.sep not in m.group("name"):
        name, rest = m.group("name"), m.group("path")
        for resolve in ([sites] if sites else []) + _extra_resolvers:
            base = resolve(name)
            if base is not None:
                return _under_site(base, name, rest)
        if re.match(r"[^/]*@[^/]*:", rest):  # user:PASSWORD@host:path, as scp would never take it
            raise _password_refused("sftp")
        raise UsageError(
            f"Unknown site '{name}' (see 'ferry sites list'; write ./{text} for a local file name with a colon)"
        )
    return _local(text)


def _local(text: str) -> Address:
    trailing = text.endswith(("/", os.sep)) and len(text) > 1
    path = os.path.abspath(os.path.expanduser(text))
    return Address("local", path, trailing_slash=trailing)


def _under_site(base: Address, name: str, rest: str) -> Address:
    trailing = rest.endswith("/") and len(rest) > 1
    if base.is_local:
        path = os.path.expanduser(rest) if rest.startswith("~") else rest
        full = path if os.path.isabs(path) else os.path.join(base.path, path)
        return replace(base, path=os.path.normpath(full), site=name, trailing_slash=trailing)
    if rest.startswith("/"):
        path = posixpath.normpath(rest)
    elif rest:
        path = posixpath.normpath(posixpath.join(base.path, rest)) if base.path else posixpath.normpath(rest)
    else:
        path = base.path
    return replace(base, path=path, site=name, trailing_slash=trailing)


def _parse_url(text: str) -> Address:
    scheme, _, rest = text.partition("://")
    scheme = scheme.lower()
    if scheme == "file":
        return _file_url(text)
    if scheme not in REMOTE_SCHEMES:
        known = ", ".join(f"{s}://" for s in ("file", *REMOTE_SCHEMES))
        raise UsageError(f"Unsupported address scheme '{scheme}://' (known: {known})")
    netloc, slash, path = rest.partition("/")
    path = slash + path
    trailing = path.endswith("/") and len(path) > 1
    if ":" in netloc.rpartition("@")[0]:
        raise _password_refused(scheme)
    if any(ord(c) < 32 for c in netloc):
        raise UsageError(f"Malformed address (control character in host): {text!r}")
    if scheme == "sftp":
        return _sftp_url(netloc, path, trailing, text)
    if "@" in netloc:
        raise UsageError(f"A user name is not part of {scheme}:// addresses: {text!r}")
    if scheme == "s3":
        return _s3_url(netloc, path, trailing, text)
    if not netloc:
        what = "collection" if scheme == "globus" else "store name"
        raise UsageError(f"Missing {what} in {text!r} (expected {scheme}://{what.upper()}/path)")
    return Address(scheme, path or "/", host=netloc, trailing_slash=trailing)


def _file_url(text: str) -> Address:
    parts = urlsplit(text.replace("?", "%3F").replace("#", "%23"))  # both are legal in file names
    if parts.netloc not in ("", "localhost"):
        raise UsageError(f"file:// URLs must be on this computer: {text}")
    return _local(unquote(parts.path) or "/")


def _sftp_url(netloc: str, path: str, trailing: bool, text: str) -> Address:
    user, host, port = _split_netloc(netloc, text)
    if not host:
        raise UsageError(f"Missing host in {text!r} (expected sftp://[user@]host[:port]/path)")
    if path == "/~" or path.startswith("/~/"):
        path = path[3:]  # relative to the login folder
    return Address("sftp", path or "", host=host, user=user, port=port, trailing_slash=trailing)


def _s3_url(netloc: str, path: str, trailing: bool, text: str) -> Address:
    if netloc and not _BUCKET_RE.match(netloc):
        raise UsageError(f"Malformed bucket name {netloc!r} in {text!r}")
    key = path.lstrip("/")
    return Address("s3", key, host=netloc, trailing_slash=trailing or (not key and bool(netloc)))


def _split_netloc(netloc: str, text: str) -> tuple[str | None, str, int | None]:
    user: str | None = None
    if "@" in netloc:
        user, _, netloc = netloc.rpartition("@")
        if not user:
            raise UsageError(f"Empty user name in {text!r}")
    port: int | None = None
    host = netloc
    if netloc.startswith("["):  # [ipv6]:port
        end = netloc.find("]")
        if end < 0:
            raise UsageError(f"Malformed IPv6 address in {text!r}")
        host, tail = netloc[1:end], netloc[end + 1 :]
        if tail.startswith(":"):
            port = _port(tail[1:], text)
        elif tail:
            raise UsageError(f"Malformed address {text!r}")
    elif ":" in netloc:
        host, _, p = netloc.rpartition(":")
        if ":" in host:
            raise UsageError(f"IPv6 hosts need brackets: sftp://[address]:port/path (got {text!r})")
        port = _port(p, text)
    if host and not _HOST_RE.match(host):
        raise UsageError(f"Malformed host name {host!r} in {text!r}")
    return user, host, port


def _port(text: str, whole: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise UsageError(f"Malformed port {text!r} in {whole!r} (expected 1-65535)")
    return int(text)
