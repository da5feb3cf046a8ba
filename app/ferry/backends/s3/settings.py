"""One S3 backend's settings, read once when the backend is built and passed in from there.

:class:`S3Settings` holds where and as whom to connect (a saved site's options), the transfer
knobs (site options, ``FERRY_S3_*`` variables), and the ``AWS_*`` variables Ferry reads itself
(:class:`AwsEnvironment`: for the lean client, and to decide when botocore's session is needed
at all). botocore's session still reads the environment on its own, as every AWS tool does.

The variables, and what they mean (documented in docs/s3.md, "Knobs for tests and benchmarks"):

- ``FERRY_S3_FAST`` (``0``, ``no``, ``false``, ``off``: every request through botocore);
- ``FERRY_S3_PART_SIZE`` (at least 5 MiB) and ``FERRY_S3_PART_CONCURRENCY`` (over a site's
  ``part_size`` and ``part_concurrency``);
- ``FERRY_S3_CHECKSUMS`` (``auto``, ``on``, ``off``; over a site's ``checksums``);
- ``FERRY_S3_UPLOAD_MEMORY`` (multipart part buffers in flight across all uploads, 512 MiB);
- ``FERRY_S3_READ_TIMEOUT`` (seconds to wait for any byte of an answer, 60) and
  ``FERRY_S3_MAX_ATTEMPTS`` (botocore's attempts per request, 8);
- ``FERRY_S3_RESTORE_POLL`` and ``FERRY_S3_RESTORE_MAX_WAIT`` (seconds: how often, and how long,
  a download waits for an archived object's restore; 300 and 48 hours).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ferry.core.address import Address
from ferry.core.errors import FerryError, UsageError

# S3's own limits. botocore's floor is 5 MiB per part (except the last); tests and benchmarks
# lower our default through FERRY_S3_PART_SIZE, never below that floor.
MIN_PART = 5 << 20
DEFAULT_PART = 16 << 20
MAX_PARTS = 10_000
MAX_OBJECT = 5 << 40  # 5 TiB
MAX_SINGLE_COPY = 5 << 30  # CopyObject limit; above it, UploadPartCopy
READ_RANGE = 16 << 20  # bytes per ranged GET when downloading a large object in parallel
CHECKSUM_MODES = ("auto", "on", "off")
_OFF = ("0", "no", "false", "off")


@dataclass(frozen=True)
class AwsEnvironment:
    """The ``AWS_*`` variables Ferry reads itself, as they were when the backend was built.
    Secrets never appear in repr."""

    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)  # AWS_SESSION_TOKEN or AWS_SECURITY_TOKEN
    profile: str | None = None  # AWS_PROFILE, else AWS_DEFAULT_PROFILE
    credential_expiration: str | None = None
    config_file: str = "~/.aws/config"  # AWS_CONFIG_FILE
    shared_credentials_file: str = "~/.aws/credentials"  # AWS_SHARED_CREDENTIALS_FILE
    # AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL; None under AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true
    endpoint_url: str | None = None
    region: str | None = None  # AWS_DEFAULT_REGION
    ca_bundle: str | None = None  # AWS_CA_BUNDLE

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> AwsEnvironment:
        def get(name: str) -> str | None:
            return environ.get(name) or None

        endpoint = None
        if environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").strip().lower() != "true":
            endpoint = get("AWS_ENDPOINT_URL_S3") or get("AWS_ENDPOINT_URL")
        return cls(
            access_key_id=get("AWS_ACCESS_KEY_ID"),
            secret_access_key=get("AWS_SECRET_ACCESS_KEY"),
            session_token=get("AWS_SESSION_TOKEN") or get("AWS_SECURITY_TOKEN"),
            profile=get("AWS_PROFILE") or get("AWS_DEFAULT_PROFILE"),
            credential_expiration=get("AWS_CREDENTIAL_EXPIRATION"),
            config_file=get("AWS_CONFIG_FILE") or "~/.aws/config",
            shared_credentials_file=get("AWS_SHARED_CREDENTIALS_FILE") or "~/.aws/credentials",
            endpoint_url=endpoint,
            region=get("AWS_DEFAULT_REGION"),
            ca_bundle=get("AWS_CA_BUNDLE"),
        )


@dataclass(frozen=True)
class S3Settings:
    """Everything one S3 backend is told: built once (:meth:`from_env`, :func:`settings_for`)
    and passed to the parts that need it. ``secret_key`` never appears in repr or logs."""

    # Where and as whom: a saved site's options.
    endpoint_url: str | None = None
    region: str | None = None
    addressing: str | None = None  # "path" | "virtual" | None (auto)
    profile: str | None = None
    access_key_id: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    site: str | None = None
    # Transfers.
    part_size: int | None = None  # None: DEFAULT_PART, grown to fit 10,000 parts
    part_concurrency: int = 4  # parts or ranges in flight per file
    checksums: str | None = None  # auto | on | off: S3 additional checksums (see checksums.py)
    upload_memory: int = 512 << 20  # part buffers in flight across all uploads (writer.PartBudget)
    range_size: int = READ_RANGE  # bytes per ranged GET of a large download
    # The lean client (lean.py), and botocore's patience.
    lean: bool = True  # FERRY_S3_FAST
    read_timeout: float = 60.0
    max_attempts: int = 8
    # Archived objects: how often, and how long, a download waits for a restore (seconds).
    restore_poll: float = 300.0
    restore_max_wait: float = 48 * 3600.0
    # The environment Ferry reads itself (botocore reads its own).
    aws: AwsEnvironment = field(default_factory=AwsEnvironment)
    proxy_variables: bool = False  # any *_proxy variable set (Linux takes proxies from these only)

    @property
    def checksum_mode(self) -> str:
        mode = (self.checksums or "auto").strip().lower()
        return mode if mode in CHECKSUM_MODES else "auto"

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str],
        options: Mapping[str, str] | None = None,
        *,
        site: str | None = None,
        secret_key: str | None = None,
    ) -> S3Settings:
        """The settings from the environment and a saved site's ``options`` (``FERRY_S3_*``
        variables win over the site's options, as they always have)."""
        opts = dict(options or {})
        addressing = opts.get("addressing")
        if addressing not in (None, "path", "virtual", "auto"):
            raise UsageError(f"Site '{site or ''}': addressing must be path or virtual, not {addressing!r}")
        part = _size(environ, "FERRY_S3_PART_SIZE") or (int(opts["part_size"]) if opts.get("part_size") else None)
        conc = _size(environ, "FERRY_S3_PART_CONCURRENCY") or int(opts.get("part_concurrency", "4"))
        memory = _size(environ, "FERRY_S3_UPLOAD_MEMORY")
        return cls(
            endpoint_url=opts.get("endpoint_url"),
            region=opts.get("region"),
            addressing=None if addressing == "auto" else addressing,
            profile=opts.get("profile"),
            access_key_id=opts.get("access_key_id"),
            secret_key=secret_key,
            site=site,
            part_size=max(MIN_PART, part) if part else None,
            part_concurrency=max(1, conc),
            checksums=environ.get("FERRY_S3_CHECKSUMS") or opts.get("checksums"),
            upload_memory=max(MIN_PART, memory) if memory else 512 << 20,
            lean=environ.get("FERRY_S3_FAST", "1").strip().lower() not in _OFF,
            read_timeout=float(environ.get("FERRY_S3_READ_TIMEOUT", "60")),
            max_attempts=int(environ.get("FERRY_S3_MAX_ATTEMPTS", "8")),
            restore_poll=float(environ.get("FERRY_S3_RESTORE_POLL", "300")),
            restore_max_wait=float(environ.get("FERRY_S3_RESTORE_MAX_WAIT", str(48 * 3600))),
            aws=AwsEnvironment.from_env(environ),
            proxy_variables=any(k.lower().endswith("_proxy") for k in environ),
        )


def _size(environ: Mapping[str, str], name: str) -> int | None:
    raw = environ.get(name)
    if not raw:
        return None
    from ferry.core.units import parse_size

    return parse_size(raw)


def settings_for(address: Address, environ: Mapping[str, str]) -> S3Settings:
    """The settings for ``address``: its saved site (or a saved site on the same bucket), else
    none, and the environment. A job records ``s3://bucket/key`` without the site name, so a
    backend for a bucket without a site name looks for a saved S3 site on that bucket (that is
    what makes ``ferry queue run`` reach the same custom endpoint the ``ferry cp`` did)."""
    from ferry.credentials.sites import Site, SiteStore, s3_site_for_bucket

    site = None
    saved: list[Site] = []
    try:
        store = SiteStore()
        if address.site:
            site = store.get(address.site)
        elif address.host:
            saved = store.list()
    except FerryError:
        site = None  # a broken sites.toml must not stop plain environment-configured access
    if saved:
        # An endpoint given for this command is never overridden by a site for the same bucket
        # name; sites on one bucket name at two servers are an error, never a silent pick.
        site = s3_site_for_bucket(saved, address.host, AwsEnvironment.from_env(environ).endpoint_url)
    opts: dict[str, str] = dict(site.options) if site is not None else {}
    secret = None
    if site is not None and opts.get("access_key_id"):
        from ferry.credentials import keychain

        secret = keychain.get_secret(keychain.site_secret_key(site.name))
    return S3Settings.from_env(environ, opts, site=site.name if site is not None else None, secret_key=secret)
