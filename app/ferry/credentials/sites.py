"""Saved sites: short names for base addresses, kept in ``sites.toml`` in Ferry's config folder.

::

    version = 1

    [sites.hpc]
    address = "sftp://alice@login.hpc.example.org/scratch/alice"
    description = "Cluster scratch"

    [sites.hpc.options]
    identity_file = "~/.ssh/id_ed25519"

``hpc:results/run1`` then means ``sftp://alice@login.hpc.example.org/scratch/alice/results/run1``.
An SSH or S3 site may name the Globus collection that serves the same storage (options
``globus_collection`` and ``globus_path``, see :class:`GlobusLink`): a job between two such sites
can then go as one Globus task.
Options are free-form strings for the backend (``endpoint_url``, ``region``, ``identity_file``)
and are never secrets: those live in the keychain (:mod:`ferry.credentials.keychain`), and option
names that look like secrets are refused so a password cannot end up in this file by accident.

The file is rewritten atomically (temporary file, fsync, ``os.replace``) with mode 0600 under a
lock, so two ``ferry sites add`` at once cannot lose an entry and a crash never leaves half a file.
"""

from __future__ import annotations

import contextlib
import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import tomli_w

from ferry.core import dirs
from ferry.core.address import _SITE_RE, Address, SiteResolver, parse_address
from ferry.core.errors import FerryError, UsageError, from_oserror

FILE_NAME = "sites.toml"
FORMAT_VERSION = 1

# Same alphabet as the NAME in core.address's NAME:path form, at least two characters (one letter
# before a colon is a Windows drive), bounded so a name fits in a keychain entry and a table column.
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{1,63}")
_OPTION_RE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
_SECRET_WORDS = ("password", "passwd", "secret", "token", "passphrase", "credential")
_HEADER = (
    "# Ferry's saved sites, written by 'ferry sites' (hand edits are fine).\n"
    "# Passwords and keys are never kept here: they live in the system keychain.\n\n"
)


@dataclass(frozen=True)
class Site:
    """A saved site. ``address`` is the base address as text, in a form that does not depend on
    the current folder (relative local paths are made absolute when the site is added)."""

    name: str
    address: str
    description: str = ""
    options: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def base_address(self) -> Address:
        """The parsed base address, tagged with this site's name."""
        from dataclasses import replace

        return replace(_parse_base(self.address), site=self.name)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "address": self.address,
            "description": self.description,
            "options": dict(self.options),
        }


def validate_name(name: str) -> str:
    if not _NAME_RE.fullmatch(name):
        raise UsageError(
            f"Invalid site name {name!r}: use 2-64 letters, digits, '_', '.', '@' or '-', "
            "starting with a letter or digit"
        )
    return name


def _parse_base(text: str) -> Address:
    """Parse a site's base address: every form except another ``NAME:path``."""
    if "://" not in text:
        m = _SITE_RE.match(text)
        if m and len(m.group("name")) > 1 and os.sep not in m.group("name"):
            raise UsageError(
                f"A site's address cannot be another site or alias ({text!r}); give a path or URL "
                f"(write ./{text} for a local name with a colon)"
            )
    # No resolver: a site is never defined in terms of another one.
    return parse_address(text, sites=None)


def normalize_address(text: str) -> str:
    """The text to save for a base address: URLs as typed, local paths absolute (cwd-independent)."""
    text = text.strip()
    address = _parse_base(text)
    if address.is_local:
        return address.path
    return text


def _validate_options(options: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in options.items():
        if not isinstance(key, str) or not _OPTION_RE.fullmatch(key):
            raise UsageError(f"Invalid option name {key!r}: use letters, digits, '_' or '-', starting with a letter")
        if any(word in key.lower() for word in _SECRET_WORDS):
            raise UsageError(
                f"Option '{key}' looks like a secret, and options are saved in plain text; "
                "store passwords in the keychain instead (ferry sites add NAME ADDRESS --password)"
            )
        if not isinstance(value, str):
            raise UsageError(f"Option '{key}' must be text, not {type(value).__name__}")
        out[key] = value
    return out


class SiteStore:
    """The saved sites in one ``sites.toml`` (by default the one in Ferry's config folder).

    The default path is looked up on every use, so ``FERRY_CONFIG_DIR`` set later still applies.
    """

    def __init__(self, path: Path | str | None = None) -> None:
        self._path = Path(path) if path is not None else None

    @property
    def path(self) -> Path:
        return self._path if self._path is not None else dirs.config_dir() / FILE_NAME

    # -- reading --
    def load(self) -> dict[str, Site]:
        """All sites by name; an absent file means none. Malformed files raise UsageError."""
        path = self.path
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise from_oserror(exc, str(path)) from exc
        return _parse_file(raw, path)

    def list(self) -> list[Site]:
        return sorted(self.load().values(), key=lambda s: (s.name.lower(), s.name))

    def get(self, name: str) -> Site | None:
        """The named site, or None if there is no such site."""
        return self.load().get(name)

    def resolver(self) -> SiteResolver:
        """A ``name -> Address | None`` function for :func:`ferry.core.address.parse_address`.

        The file is read on the first lookup only, so commands that never name a site do not
        fail on a broken ``sites.toml``, and a command that names many reads it once.
        """
        cache: dict[str, Site] | None = None

        def resolve(name: str) -> Address | None:
            nonlocal cache
            if cache is None:
                cache = self.load()
            site = cache.get(name)
            return site.base_address() if site is not None else None

        return resolve

    # -- changing --
    def add(
        self,
        name: str,
        address: str,
        options: Mapping[str, str] | None = None,
        replace: bool = False,
        description: str = "",
    ) -> Site:
        """Save a site; a taken name is an error unless ``replace``."""
        site = Site(
            name=validate_name(name),
            address=normalize_address(address),
            description=description,
            options=MappingProxyType(_validate_options(options or {})),
        )
        globus_link(site)  # a malformed collection or path mapping is refused before saving
        with self._locked():
            sites = self.load()
            if name in sites and not replace:
                raise UsageError(
                    f"A site named '{name}' already exists ({sites[name].address}); "
                    "use --replace to change it, or choose another name"
                )
            sites[name] = site
            self._save(sites)
        return site

    def remove(self, name: str) -> Site:
        """Forget a site; an unknown name is an error that lists the known ones."""
        with self._locked():
            sites = self.load()
            if name not in sites:
                known = ", ".join(sorted(sites)) if sites else "none saved yet"
                raise UsageError(f"No site named '{name}' (known sites: {known})")
            site = sites.pop(name)
            self._save(sites)
        return site

    def _save(self, sites: Mapping[str, Site]) -> None:
        doc: dict[str, Any] = {"version": FORMAT_VERSION, "sites": {}}
        for name in sorted(sites):
            site = sites[name]
            table: dict[str, Any] = {"address": site.address}
            if site.description:
                table["description"] = site.description
            if site.options:
                table["options"] = dict(sorted(site.options.items()))
            doc["sites"][name] = table
        data = (_HEADER + tomli_w.dumps(doc)).encode("utf-8")
        path = self.path
        dirs.ensure_private_dir(path.parent)
        _atomic_write(path, data)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialize read-modify-write between processes (POSIX advisory lock on a side file)."""
        try:
            import fcntl
        except ImportError:  # Windows: last writer wins, still never a torn file
            yield
            return
        path = self.path
        dirs.ensure_private_dir(path.parent)
        lock_path = path.with_name(path.name + ".lock")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise from_oserror(exc, str(lock_path)) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            if hasattr(os, "fchmod"):
                os.fchmod(fd, 0o600)  # exact, whatever the umask
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise from_oserror(exc, str(path)) from exc
    # Make the rename itself durable (POSIX; directories cannot be opened on Windows).
    with contextlib.suppress(OSError, AttributeError):
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


_LINE_RE = re.compile(r"\(at line (\d+), column (\d+)\)")


def _parse_file(raw: bytes, path: Path) -> dict[str, Site]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise UsageError(f"{path}, line {line}: not valid UTF-8 text") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # Python 3.11's TOMLDecodeError has no lineno attribute; its message ends "(at line L, column C)".
        msg = str(exc)
        m = _LINE_RE.search(msg)
        reason = _LINE_RE.sub("", msg).strip()
        where = f"{path}, line {m.group(1)}" if m else str(path)
        raise UsageError(f"{where}: malformed TOML ({reason})") from None

    def fail(reason: str, site: str | None = None) -> FerryError:
        line = _line_of_site(text, site) if site is not None else None
        where = f"{path}, line {line}" if line else str(path)
        return UsageError(f"{where}: {reason}")

    version = doc.get("version", FORMAT_VERSION)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise fail(f"unsupported version {version!r} (this Ferry understands {FORMAT_VERSION})")
    table = doc.get("sites", {})
    if not isinstance(table, dict):
        raise fail("'sites' must be a table of [sites.NAME] sections")
    out: dict[str, Site] = {}
    for name, entry in table.items():
        if not _NAME_RE.fullmatch(name):
            raise fail(f"invalid site name {name!r}", name)
        if not isinstance(entry, dict):
            raise fail(f"site '{name}' must be a [sites.{name}] table", name)
        address = entry.get("address")
        if not isinstance(address, str) or not address:
            raise fail(f"site '{name}' has no address = \"...\"", name)
        description = entry.get("description", "")
        if not isinstance(description, str):
            raise fail(f"site '{name}': description must be text", name)
        options = entry.get("options", {})
        if not isinstance(options, dict):
            raise fail(f"site '{name}': options must be a table of text values", name)
        unknown = set(entry) - {"address", "description", "options"}
        if unknown:
            raise fail(f"site '{name}': unknown setting(s) {', '.join(sorted(unknown))}", name)
        try:
            _parse_base(address)
            opts = _validate_options(options)
            site = Site(name, address, description, MappingProxyType(opts))
            globus_link(site)
        except UsageError as exc:
            raise fail(f"site '{name}': {exc.message}", name) from None
        out[name] = site
    return out


def _line_of_site(text: str, name: str) -> int | None:
    """The line of the ``[sites.NAME]`` header (or first ``[sites.NAME.*]``), for error messages.

    Each header line is itself a valid TOML document, so tomllib does the key unquoting for us.
    """
    for i, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped.startswith("["):
            continue
        try:
            doc = tomllib.loads(stripped)
        except tomllib.TOMLDecodeError:
            continue
        sites = doc.get("sites")
        if isinstance(sites, dict) and name in sites:
            return i
    return None


def _endpoint_of(site: Site) -> str:
    """A saved S3 site's server, as compared between sites ("" for AWS or the profile's own)."""
    return (site.options.get("endpoint_url") or "").strip().rstrip("/").lower()


def s3_site_for_bucket(sites: list[Site], bucket: str, endpoint: str | None) -> Site | None:
    """The saved site an ``s3://bucket`` address without a site name uses (a queued job records
    no site name): the S3 site on that bucket, and never a silent pick.

    * ``endpoint`` (``AWS_ENDPOINT_URL``/``AWS_ENDPOINT_URL_S3``, given for this command) wins: a
      site on that bucket at another server is not used; one at the same server lends its options.
    * Otherwise sites on one bucket name at different servers are an error naming them: the same
      bucket name on two servers is two different buckets.
    """
    candidates = [s for s in sites if s.address.startswith("s3://") and s.base_address().host == bucket]
    if endpoint:
        wanted = endpoint.strip().rstrip("/").lower()
        return next((s for s in candidates if _endpoint_of(s) == wanted), None)
    servers = {_endpoint_of(s) for s in candidates}
    if len(servers) > 1:
        named = ", ".join(f"'{s.name}' ({s.options.get('endpoint_url') or 'AWS'})" for s in candidates)
        raise UsageError(
            f"Saved sites on s3://{bucket} point at different servers: {named}. Name the site "
            f"(SITE:path), or set AWS_ENDPOINT_URL for this command"
        )
    return candidates[0] if candidates else None


def resolve_address(text: str) -> Address:
    """Parse what the user typed, resolving ``NAME:path`` through the saved sites, then through
    ssh_config host aliases (``cluster:/scratch/me``, as scp and rsync understand it)."""
    saved = SiteStore().resolver()

    def resolver(name: str) -> Address | None:
        found = saved(name)
        if found is None:
            from ferry.credentials.ssh_config import is_alias

            if is_alias(name):
                return Address("sftp", "", host=name)
        return found

    return parse_address(text, sites=resolver)


# ---- the Globus collection serving a saved SSH or S3 site's storage ----

GLOBUS_COLLECTION = "globus_collection"  # option: the collection's UUID
GLOBUS_PATH = "globus_path"  # option: SITE_PATH=COLLECTION_PATH (default: see GlobusLink)
_UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


@dataclass(frozen=True)
class GlobusLink:
    """A saved SSH or S3 site's Globus collection and how the site's paths map onto it.

    ``pairs`` are (site prefix, collection prefix). Site paths are compared in a normal form: on
    SSH an absolute path as it is, a path relative to the login folder as ``~/path``; on S3 a key
    as ``/key``. Without ``globus_path`` an SSH site maps every path to itself (``/`` to ``/``,
    the login folder ``~`` to the collection's ``/~/``) and an S3 site maps key ``k`` of bucket
    ``b`` to ``/b/k`` (how a Globus S3 collection shows its buckets). A path outside every pair,
    or with a ``..`` in it, has no collection path (None)."""

    site: str
    scheme: str
    collection: str
    pairs: tuple[tuple[str, str], ...]

    def to_collection(self, path: str) -> str | None:
        """The collection path of a site path (as a job records it), or None outside the mapping."""
        norm = self._site_form(path)
        if norm is None:
            return None
        best = max((sp for sp, _cp in self.pairs if _under(norm, sp)), key=len, default=None)
        if best is None:
            return None
        return _join(dict(self.pairs)[best], _rest(norm, best))

    def covers(self, path: str) -> int | None:
        """How specific the mapping of ``path`` is (the matching site prefix's length), None if
        outside: of two sites on one host the longer prefix serves a path."""
        norm = self._site_form(path)
        if norm is None:
            return None
        return max((len(sp) for sp, _cp in self.pairs if _under(norm, sp)), default=None)

    def from_collection(self, path: str) -> str | None:
        """The site path (as a job records it) of a collection path, or None outside the mapping."""
        for sp, cp in sorted(self.pairs, key=lambda p: -len(p[1])):
            if _under(path, cp.rstrip("/") or "/"):
                site = _join(sp, _rest(path, cp.rstrip("/") or "/"))
                if self.scheme == "s3":
                    return site.lstrip("/")
                if site == "~" or site.startswith("~/"):
                    return site[2:]
                return site
        return None

    def _site_form(self, path: str) -> str | None:
        if ".." in path.split("/"):
            return None
        if self.scheme == "s3":
            return "/" + path.lstrip("/")
        if path.startswith("/"):
            return path.rstrip("/") or "/"
        clean = path.strip("/")
        return "~/" + clean if clean and clean != "." else "~"


def _under(path: str, prefix: str) -> bool:
    if prefix == "/":
        return path.startswith("/")
    return path == prefix or path.startswith(prefix + "/")


def _rest(path: str, prefix: str) -> str:
    return path[len(prefix) :].strip("/") if prefix != "/" else path.strip("/")


def _join(prefix: str, rest: str) -> str:
    base = prefix.rstrip("/") or "/"
    if not rest:
        return "/~/" if base == "/~" else base
    return f"{base}/{rest}" if base != "/" else f"/{rest}"


def globus_link(site: Site) -> GlobusLink | None:
    """The site's Globus collection and path mapping, None when it names none; UsageError (one
    line) for a malformed one."""
    opts = site.options
    collection = opts.get(GLOBUS_COLLECTION, "").strip()
    mapping = opts.get(GLOBUS_PATH, "").strip()
    if not collection:
        if mapping:
            raise UsageError(f"{GLOBUS_PATH} needs {GLOBUS_COLLECTION} (the collection's UUID)")
        return None
    if not _UUID_RE.fullmatch(collection):
        raise UsageError(f"{GLOBUS_COLLECTION} {collection!r} is not a Globus collection UUID")
    base = _parse_base(site.address)
    if base.scheme not in ("sftp", "s3"):
        raise UsageError(f"only SSH (sftp://) and S3 sites name a Globus collection, not {base.scheme} sites")
    if not mapping:
        default = (("/", "/"), ("~", "/~")) if base.scheme == "sftp" else (("/", f"/{base.host}"),)
        return GlobusLink(site.name, base.scheme, collection.lower(), default)
    site_side, eq, coll_side = mapping.partition("=")
    site_side, coll_side = site_side.strip(), coll_side.strip()
    ok_site = site_side.startswith("/") or (base.scheme == "sftp" and (site_side == "~" or site_side.startswith("~/")))
    if not eq or not ok_site or not coll_side.startswith("/") or ".." in (site_side + "/" + coll_side).split("/"):
        raise UsageError(
            f"{GLOBUS_PATH} {mapping!r} is not SITE_PATH=COLLECTION_PATH with both absolute "
            "(e.g. /home/me=/~/ or ~=/~/; on S3 a key prefix such as /=/bucket)"
        )
    pair = (site_side.rstrip("/") or "/", coll_side.rstrip("/") or "/")
    return GlobusLink(site.name, base.scheme, collection.lower(), (pair,))
