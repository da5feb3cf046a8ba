"""botocore's session and client for an S3 address: credentials, profiles, endpoints.

Credentials resolve exactly as the AWS tools do (environment, ``~/.aws/config`` and
``credentials`` profiles including SSO and assume-role, ``AWS_ENDPOINT_URL`` and a profile's
``endpoint_url``): we hand botocore a plain session and only add what a saved site says (its
``endpoint_url``, ``region``, ``addressing``, ``profile`` and ``access_key_id`` options, the
secret key from the keychain; see :mod:`ferry.backends.s3.settings`).

Where nothing but the environment can decide the keys, region, endpoint and CA bundle,
:func:`environment_only` reads them from the settings instead, and botocore is not imported
until a request needs it (see docs/s3.md, "Start-up").
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ferry.backends.s3.errors import map_error
from ferry.backends.s3.settings import S3Settings
from ferry.core.errors import AuthError, UsageError


def is_aws(endpoint: str | None) -> bool:
    """Whether ``endpoint`` is AWS itself (no endpoint at all is AWS too)."""
    host = urlsplit(endpoint or "").hostname or ""
    return host.endswith((".amazonaws.com", ".amazonaws.com.cn")) or not host


class EnvCredentials:
    """Keys from the environment, in the shape the lean client reads (botocore's frozen
    credentials: ``access_key``, ``secret_key``, ``token``). The secret never appears in repr."""

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
    """The endpoint, region, keys and CA bundle botocore would resolve, read from the environment
    the settings were made from, or None whenever anything else could take part (a profile, a
    config or credentials file, a site's key, expiring credentials): then botocore's session
    resolves it.

    Why: importing botocore's session and resolving through it is ~0.08 s of single-threaded CPU
    before the first byte moves, and a download made of lean requests needs nothing else from
    botocore. With no profile named and no config file, botocore's answer is exactly this: its
    credential chain starts with the environment's keys, and region, endpoint and CA bundle come
    from these variables only."""
    aws = settings.aws
    if settings.profile or settings.access_key_id or aws.profile or aws.credential_expiration:
        return None
    for path in (aws.config_file, aws.shared_credentials_file):
        if not _holds_nothing(os.path.expanduser(path)):
            return None
    if not aws.access_key_id or not aws.secret_access_key:
        return None
    return EnvOnly(
        endpoint_url=settings.endpoint_url if settings.endpoint_url is not None else aws.endpoint_url,
        region=settings.region or aws.region,
        credentials=EnvCredentials(aws.access_key_id, aws.secret_access_key, aws.session_token),
        ca_bundle=aws.ca_bundle,
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
        name = settings.profile or settings.aws.profile
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
            retries={"mode": "standard", "max_attempts": settings.max_attempts},
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
            read_timeout=settings.read_timeout,
            tcp_keepalive=True,
            s3=s3cfg or None,  # type: ignore[arg-type]
        )
        client = session.create_client("s3", endpoint_url=settings.endpoint_url, config=cfg)
        _cache_user_agent(client)
        return client

    try:
        addressing = settings.addressing
        if addressing is None:
            configured = settings.endpoint_url or configured_endpoint(session)
            if configured and not is_aws(configured):
                addressing = "path"  # known before building: one client built, not two (~50 ms)
        client = build(addressing)
        if addressing is None and not is_aws(client.meta.endpoint_url):
            # A custom store (MinIO, Ceph, rclone, moto) on an IP or plain host name: virtual-hosted
            # names like bucket.127.0.0.1 do not resolve, so path-style is the only safe default.
            client = build("path")
    except Exception as exc:
        raise map_error(exc, "connecting to S3", read_timeout=settings.read_timeout) from exc
    return client


def configured_endpoint(session: Any) -> str | None:
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


def lean_where(client: Any) -> tuple[str, str | None] | None:
    """(endpoint, region) of a botocore client the lean client may stand in for: addressed
    path-style and with no proxy in its config (botocore's proxy handling, and its exceptions,
    stay in charge); else None."""
    try:
        s3cfg = client.meta.config.s3 or {}
        region = client.meta.region_name
    except Exception:
        return None
    if s3cfg.get("addressing_style") != "path" or getattr(client.meta.config, "proxies", None):
        return None
    return str(client.meta.endpoint_url), region
