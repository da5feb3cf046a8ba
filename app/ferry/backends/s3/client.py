"""Building the boto3 client for an S3 address, and mapping botocore's errors to Ferry's.

Credentials resolve exactly as the AWS tools do (environment, ``~/.aws/config`` and
``credentials`` profiles including SSO and assume-role, ``AWS_ENDPOINT_URL`` and a profile's
``endpoint_url``): we hand boto3 a plain :class:`boto3.session.Session` and only add what a saved
site says. A saved S3 site may hold ``endpoint_url``, ``region``, ``addressing`` (path|virtual),
``profile`` and ``access_key_id`` options; the secret key lives in the keychain under the site's
password entry. A job records ``s3://bucket/key`` without the site name, so a backend for a
bucket without a site name looks for a saved S3 site on that bucket (that is what makes
``ferry queue run`` reach the same custom endpoint the ``ferry cp`` did).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ferry.core.address import Address
from ferry.core.errors import (
    AuthError,
    FerryError,
    NotFound,
    PermissionDenied,
    Transient,
    UsageError,
)

# botocore's own floor is 5 MiB per part (except the last); tests and benchmarks lower our default
# through FERRY_S3_PART_SIZE, never below that floor.
MIN_PART = 5 << 20
DEFAULT_PART = 16 << 20
MAX_PARTS = 10_000
MAX_OBJECT = 5 << 40  # 5 TiB
MAX_SINGLE_COPY = 5 << 30  # CopyObject limit; above it, UploadPartCopy
# What S3 and the S3-compatible stores answer for a body that does not match its checksum
# (AWS, Ceph RGW, rclone: BadDigest; MinIO: XAmzContentChecksumMismatch).
DIGEST_REFUSALS = (
    "BadDigest",
    "InvalidDigest",
    "XAmzContentChecksumMismatch",
    "InvalidChecksum",
    "XAmzContentSHA256Mismatch",
)


class Archived(FerryError):
    """An archived object (GLACIER, DEEP_ARCHIVE) that has not been restored yet."""

    kind = "archived"


class NoSuchBucket(NotFound):
    """The bucket itself does not exist (S3's ``NoSuchBucket``), as opposed to a key in it: callers
    decide by this type, never by the words of a message (a key or bucket may well be named
    "bucket")."""


@dataclass(frozen=True)
class S3Settings:
    """Where and as whom to connect. ``secret_key`` never appears in repr or logs."""

    endpoint_url: str | None = None
    region: str | None = None
    addressing: str | None = None  # "path" | "virtual" | None (auto)
    profile: str | None = None
    access_key_id: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    site: str | None = None
    part_size: int | None = None
    part_concurrency: int = 4
    checksums: str | None = None  # auto | on | off: S3 additional checksums (see s3_checksums)


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name)
    if not raw:
        return None
    from ferry.core.units import parse_size

    return parse_size(raw)


def settings_for(address: Address) -> S3Settings:
    """The settings for ``address``: its saved site (or a saved site on the same bucket), else none."""
    from ferry.credentials.sites import SiteStore

    site = None
    try:
        store = SiteStore()
        if address.site:
            site = store.get(address.site)
        elif address.host:
            candidates = [
                s for s in store.list() if s.address.startswith("s3://") and s.base_address().host == address.host
            ]
            site = candidates[0] if candidates else None
    except FerryError:
        site = None  # a broken sites.toml must not stop plain environment-configured access
    opts: dict[str, str] = dict(site.options) if site is not None else {}
    secret = None
    if site is not None and opts.get("access_key_id"):
        from ferry.credentials import keychain

        secret = keychain.get_secret(keychain.site_secret_key(site.name))
    addressing = opts.get("addressing")
    if addressing not in (None, "path", "virtual", "auto"):
        raise UsageError(f"Site '{site.name if site else ''}': addressing must be path or virtual, not {addressing!r}")
    part = _env_int("FERRY_S3_PART_SIZE") or (int(opts["part_size"]) if opts.get("part_size") else None)
    conc = _env_int("FERRY_S3_PART_CONCURRENCY") or int(opts.get("part_concurrency", "4"))
    return S3Settings(
        endpoint_url=opts.get("endpoint_url"),
        region=opts.get("region"),
        addressing=None if addressing == "auto" else addressing,
        profile=opts.get("profile"),
        access_key_id=opts.get("access_key_id"),
        secret_key=secret,
        site=site.name if site is not None else None,
        part_size=max(MIN_PART, part) if part else None,
        part_concurrency=max(1, conc),
        checksums=opts.get("checksums"),
    )


def read_timeout() -> float:
    """Seconds to wait for any byte of an answer (60 s, as the AWS CLI; FERRY_S3_READ_TIMEOUT)."""
    return float(os.environ.get("FERRY_S3_READ_TIMEOUT", "60"))


def _is_aws(endpoint: str | None) -> bool:
    host = urlsplit(endpoint or "").hostname or ""
    return host.endswith((".amazonaws.com", ".amazonaws.com.cn")) or not host


class EnvCredentials:
    """Keys from the environment, in the shape the lean path reads (botocore's frozen credentials:
    ``access_key``, ``secret_key``, ``token``). The secret never appears in repr."""

    __slots__ = ("access_key", "secret_key", "token")

    def __init__(self, access_key: str, secret_key: str, token: str | None) -> None:
        self.access_key, self.secret_key, self.token = access_key, secret_key, token

    def get_frozen_credentials(self) -> EnvCredentials:
        return self

    def __repr__(self) -> str:
        return f"EnvCredentials({self.access_key!r}, secret hidden)"


@dataclass(frozen=True)
class EnvOnly:
    """Where botocore would connect, and as whom, when the environment alone decides it."""

    endpoint_url: str | None
    region: str | None
    credentials: EnvCredentials = field(repr=False)
    ca_bundle: str | None


def environment_only(settings: S3Settings) -> EnvOnly | None:
    """The endpoint, region, keys and CA bundle botocore would resolve, read straight from the
    environment, or None whenever anything else could take part (a profile, a config or
    credentials file, a site's key, expiring credentials): then botocore's session resolves it.

    Why: importing botocore's session and resolving through it is ~0.08 s of single-threaded CPU
    before the first byte moves, and a download made of lean requests needs nothing else from
    botocore. With no profile named and no config file, botocore's answer is exactly this: its
    credential chain starts with the environment's keys, and region, endpoint and CA bundle come
    from these variables only."""
    env = os.environ
    if settings.profile or settings.access_key_id:
        return None
    if any(env.get(v) for v in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_CREDENTIAL_EXPIRATION")):
        return None
    for var, default in (("AWS_CONFIG_FILE", "~/.aws/config"), ("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials")):
        if not _holds_nothing(os.path.expanduser(env.get(var) or default)):
            return None
    key, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
    if not key or not secret:
        return None
    token = env.get("AWS_SESSION_TOKEN") or env.get("AWS_SECURITY_TOKEN") or None
    endpoint = settings.endpoint_url
    if endpoint is None and env.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").strip().lower() != "true":
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None
    return EnvOnly(
        endpoint_url=endpoint,
        region=settings.region or env.get("AWS_DEFAULT_REGION") or None,
        credentials=EnvCredentials(key, secret, token),
        ca_bundle=env.get("AWS_CA_BUNDLE") or None,
    )


def _holds_nothing(path: str) -> bool:
    """No file there, an empty one, or /dev/null (what the tests and benchmarks point at)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return st.st_size == 0 and (stat.S_ISREG(st.st_mode) or path == os.devnull)


def make_session(settings: S3Settings) -> Any:
    """A botocore session: credentials and profiles resolve exactly as with boto3's (which wraps
    this same object), without importing boto3 and s3transfer, a good part of every S3 command's
    start-up; Ferry uses neither boto3's resources nor its transfer manager."""
    import botocore.exceptions
    import botocore.session

    try:
        if settings.access_key_id:
            if not settings.secret_key:
                raise AuthError(
                    f"Site '{settings.site}' names access key {settings.access_key_id} but the keychain holds "
                    "no secret key for it (ferry sites add ... --password stores it)"
                )
            session = botocore.session.Session()
            session.set_credentials(settings.access_key_id, settings.secret_key)
        else:
            session = botocore.session.Session(profile=settings.profile)
            if settings.profile is not None and settings.profile not in session.available_profiles:
                raise botocore.exceptions.ProfileNotFound(profile=settings.profile)
        if settings.region is not None:
            session.set_config_variable("region", settings.region)
        _ = session.get_scoped_config()  # a broken or missing profile fails here, as boto3's did
        return session
    except botocore.exceptions.ProfileNotFound:
        name = settings.profile or os.environ.get("AWS_PROFILE") or os.environ.get("AWS_DEFAULT_PROFILE")
        raise UsageError(f"AWS profile '{name}' is not in ~/.aws/config or ~/.aws/credentials") from None


def make_client(session: Any, settings: S3Settings, pool_size: int) -> Any:
    """A thread-safe client with SigV4 (pre-signed links need it), standard retries with backoff
    (503 SlowDown, dropped connections) and a connection pool sized to our concurrency."""
    from botocore.config import Config

    def build(addressing: str | None) -> Any:
        s3cfg: dict[str, Any] = {}
        if addressing:
            s3cfg["addressing_style"] = addressing
        cfg = Config(
            signature_version="s3v4",
            retries={"mode": "standard", "max_attempts": int(os.environ.get("FERRY_S3_MAX_ATTEMPTS", "8"))},
            max_pool_connections=pool_size,
            connect_timeout=10,
            # We send Content-MD5 (and SHA-256 where it is the stream hash) ourselves: botocore's
            # default CRC32 on every body would be a third hash over the same bytes.
            request_checksum_calculation="when_required",
            # Our requests are built by this package, always the same shapes: validating each one
            # against the service model cost ~0.3 ms of CPU per request (a fifth of botocore's
            # time on a small object), under the GIL every worker shares.
            parameter_validation=False,
            response_checksum_validation="when_required",
            # A server that accepts a request and never answers must cost a bounded wait, then a
            # retry on a fresh connection (botocore retries ReadTimeoutError), never a hang.
            read_timeout=read_timeout(),
            tcp_keepalive=True,
            s3=s3cfg or None,  # type: ignore[arg-type]
        )
        client = session.create_client("s3", endpoint_url=settings.endpoint_url, config=cfg)
        _cache_user_agent(client)
        return client

    try:
        addressing = settings.addressing
        if addressing is None:
            configured = settings.endpoint_url or _configured_endpoint(session)
            if configured and not _is_aws(configured):
                addressing = "path"  # known before building: one client built, not two (~50 ms)
        client = build(addressing)
        if addressing is None and not _is_aws(client.meta.endpoint_url):
            # A custom store (MinIO, Ceph, rclone, moto) on an IP or plain host name: virtual-hosted
            # names like bucket.127.0.0.1 do not resolve, so path-style is the only safe default.
            client = build("path")
    except Exception as exc:
        raise map_error(exc, "connecting to S3") from exc
    return client


def _configured_endpoint(session: Any) -> str | None:
    """The endpoint botocore will use for S3 from the environment or the profile
    (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, a profile's endpoint_url), or None when it cannot
    tell: then the client is built and asked, as before."""
    try:
        from botocore.configprovider import ConfiguredEndpointProvider

        provider = ConfiguredEndpointProvider(
            full_config=session.full_config, scoped_config=session.get_scoped_config(), client_name="s3"
        )
        found = provider.provide()
    except Exception:
        return None
    return str(found) if found else None


def _cache_user_agent(client: Any) -> None:
    """botocore rebuilds its User-Agent string twice for every request (once for the request,
    once more in a request-created hook), sanitising each component: ~0.15 ms of CPU per request,
    about a tenth of botocore's time on a small object, under the GIL all workers share. The string
    is informational and the same for every request a client makes, so it is built once."""
    creator = getattr(client, "_user_agent_creator", None)
    to_string = getattr(creator, "to_string", None)
    if creator is None or to_string is None:
        return  # another botocore: leave it as it is
    try:
        ua = str(to_string())
    except Exception:
        return
    creator.to_string = lambda: ua


def _code(exc: Any) -> tuple[str, int, dict[str, str]]:
    resp = getattr(exc, "response", None) or {}
    err = resp.get("Error", {}) or {}
    meta = resp.get("ResponseMetadata", {}) or {}
    return str(err.get("Code", "")), int(meta.get("HTTPStatusCode") or 0), dict(meta.get("HTTPHeaders") or {})


def map_error(exc: BaseException, what: str, *, bucket: str = "") -> FerryError:
    """One place where botocore's exceptions become Ferry's, each with a sentence for a person.

    ``what`` names the thing in the user's words (``s3://bucket/key``); no secret ever goes in.
    """
    if isinstance(exc, FerryError):
        return exc
    detail = f"{type(exc).__name__}: {exc}"
    # An error answer (botocore's ClientError, the lean path's FastError) before botocore is
    # imported: a download's "no such key" must not load botocore just to be worded (~0.03 s).
    if isinstance(getattr(exc, "response", None), dict):
        code, status, headers = _code(exc)
        return _client_error(code, status, headers, what, bucket, detail)
    import botocore.exceptions as bx

    if isinstance(exc, bx.ClientError):
        code, status, headers = _code(exc)
        return _client_error(code, status, headers, what, bucket, detail)
    if isinstance(exc, (bx.UnauthorizedSSOTokenError, bx.SSOTokenLoadError, bx.TokenRetrievalError)):
        return AuthError(
            "The AWS SSO session has expired or was never started: run 'aws sso login' (with --profile "
            "if you use one) and try again",
            detail,
        )
    if isinstance(exc, bx.NoCredentialsError):
        return AuthError(
            "No S3 credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, choose a profile with "
            "AWS_PROFILE, or save a site with an access key (ferry sites add NAME s3://BUCKET --option "
            "access_key_id=... --password)",
            detail,
        )
    if isinstance(exc, bx.PartialCredentialsError):
        return AuthError(f"Incomplete S3 credentials: {exc}", detail)
    if isinstance(exc, bx.NoRegionError):
        return UsageError("No AWS region configured: set AWS_DEFAULT_REGION or a site's region option", detail)
    if isinstance(exc, bx.ProfileNotFound):
        return UsageError(str(exc), detail)
    if isinstance(exc, (bx.EndpointConnectionError, bx.ConnectTimeoutError)):
        return Transient(f"Cannot reach the S3 service while {what}: is the endpoint right and up?", detail)
    if isinstance(exc, bx.ReadTimeoutError):
        return Transient(
            f"The S3 server did not answer within {read_timeout():g} s while {what}, on any attempt; "
            "it may be overloaded or stuck (FERRY_S3_READ_TIMEOUT sets the wait)",
            detail,
        )
    if isinstance(exc, (bx.ConnectionClosedError, bx.ResponseStreamingError, bx.HTTPClientError)):
        return Transient(f"The S3 connection dropped while {what}", detail)
    if isinstance(exc, bx.ParamValidationError):
        return UsageError(f"Invalid S3 request while {what}: {exc}", detail)
    if isinstance(exc, bx.BotoCoreError):
        return Transient(f"S3 failure while {what}: {exc}", detail)
    if isinstance(exc, OSError):
        return Transient(f"Network failure while {what}: {exc.strerror or exc}", detail)
    return FerryError(f"S3 failure while {what}: {type(exc).__name__}", detail)


def _client_error(code: str, status: int, headers: dict[str, str], what: str, bucket: str, detail: str) -> FerryError:
    b = f"s3://{bucket}" if bucket else "the bucket"
    if code == "NoSuchBucket":
        return NoSuchBucket(f"No such bucket: {b} (check the name, or create it with 'ferry s3 mb {b}')", detail)
    if code in ("NoSuchKey", "NotFound", "404") or (status == 404 and code != "NoSuchUpload"):
        return NotFound(f"No such object: {what}", detail)
    if code == "NoSuchUpload":
        return NotFound(f"The multipart upload for {what} no longer exists (aborted or cleaned up)", detail)
    if code == "InvalidObjectState":
        return Archived(
            f"{what} is archived (Glacier/Deep Archive) and not restored: request a restore with "
            f"'ferry s3 restore {what}', then the queue waits for it",
            detail,
        )
    if code == "InvalidAccessKeyId":
        return AuthError(
            "The S3 access key is not known to this service: check AWS_ACCESS_KEY_ID, the profile or the "
            "site's access_key_id",
            detail,
        )
    if code == "SignatureDoesNotMatch":
        return AuthError(
            "The S3 secret key does not match the access key (the request signature was refused): check "
            "AWS_SECRET_ACCESS_KEY, the profile or the secret stored for the site",
            detail,
        )
    if code in ("RequestTimeTooSkewed", "RequestExpired"):
        return AuthError(
            "This computer's clock is too far from the S3 server's (requests are refused as expired or "
            "from the future): set the clock right (NTP) and try again",
            detail,
        )
    if code in ("ExpiredToken", "TokenRefreshRequired", "InvalidToken", "ExpiredTokenException"):
        return AuthError(
            "The temporary AWS credentials (SSO or assumed role) have expired: log in again (aws sso login) and retry",
            detail,
        )
    region = headers.get("x-amz-bucket-region")
    if code in ("PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException") or (
        status == 301
    ):
        where = f"region {region}" if region else "another region"
        return UsageError(
            f"{b} is in {where}, not the one configured: set AWS_DEFAULT_REGION"
            f"{'=' + region if region else ''} or the site's region option",
            detail,
        )
    if code in ("AccessDenied", "AllAccessDisabled", "Forbidden", "403") or status == 403:
        return PermissionDenied(f"Permission denied by S3 while {what}", detail)
    if code in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
        from ferry.core.errors import AlreadyExists

        return AlreadyExists(f"Bucket {b} already exists", detail)
    if code in ("PreconditionFailed", "ConditionalRequestConflict") or status == 412:
        from ferry.core.errors import AlreadyExists

        return AlreadyExists(f"Already exists: {what}", detail)
    if code in DIGEST_REFUSALS:
        from ferry.core.errors import ChecksumMismatch

        return ChecksumMismatch(f"S3 refused {what}: the bytes it received do not match their checksum", detail)
    if code in ("EntityTooLarge",):
        return UsageError(f"Too large for S3: {what}", detail)
    if code in ("QuotaExceeded", "XMinioStorageFull", "StorageFull"):
        from ferry.core.errors import NoSpace

        return NoSpace(f"The S3 store is full or over quota while {what}", detail)
    if code in ("SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling") or status >= 500:
        return Transient(f"S3 is busy or failing ({code or status}) while {what}; will retry", detail)
    return FerryError(f"S3 error {code or status} while {what}", detail)
