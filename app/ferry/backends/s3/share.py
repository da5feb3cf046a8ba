"""Pre-signed links (SigV4): a GET to download one object, a PUT or a size-limited POST policy to
upload one. Signed by botocore's client (``signature_version="s3v4"``: its default for us-east-1
with a custom endpoint would sign SigV2, which stores refuse), never by the lean client."""

from __future__ import annotations

import posixpath
from datetime import UTC, datetime, timedelta

from ferry.backends.s3.connection import S3Connection
from ferry.core.errors import FerryError, UsageError
from ferry.sharing.types import Link, ShareRequest

MAX_PRESIGN = timedelta(days=7)  # SigV4's limit on X-Amz-Expires
DEFAULT_PRESIGN = timedelta(hours=1)
REVOKE_NOTE = (
    "S3 pre-signed links cannot be revoked early: they stop working when they expire, or when the "
    "access key that signed them is deactivated or rotated"
)


def temporary_credentials(conn: S3Connection) -> bool:
    """Whether the credentials expire (SSO, an assumed role, a session token)."""
    session = conn.session
    creds = session.get_credentials() if session is not None else None
    return bool(creds is not None and getattr(creds, "token", None))


def _expiry(request: ShareRequest) -> int:
    expires = request.expires if request.expires is not None else DEFAULT_PRESIGN
    seconds = int(expires.total_seconds())
    if seconds <= 0:
        raise UsageError("A link's expiry must be in the future (e.g. --expires 2h)")
    if expires > MAX_PRESIGN:
        raise UsageError(
            "S3 pre-signed links last at most 7 days: the signature (SigV4) carries its own expiry and "
            "S3 refuses longer ones. Use --expires 7d or less."
        )
    return seconds


def presign(conn: S3Connection, key: str, request: ShareRequest) -> Link:
    """A link for ``key`` as ``request`` asks: download, upload, or upload up to a size."""
    seconds = _expiry(request)
    if not key or key.endswith("/"):
        raise UsageError(f"Share one object, not a folder: {conn.display(key)} (give its key)")
    target = conn.display(key)
    warnings: list[str] = []
    if temporary_credentials(conn):
        warnings.append(
            "these credentials are temporary (SSO or an assumed role): the link stops working when "
            "they expire, which may be before the expiry asked for"
        )
    try:
        kind, url, extra = _sign(conn, key, request, seconds)
    except FerryError:
        raise
    except Exception as exc:
        raise conn.err(exc, f"signing a link for {target}") from exc
    return Link(
        kind=kind,
        target=target,
        url=url,
        scheme="s3",
        expires=datetime.now(UTC) + timedelta(seconds=seconds),
        revocable=False,
        revoke_note=REVOKE_NOTE,
        warnings=tuple(warnings),
        extra=extra,
    )


def _sign(conn: S3Connection, key: str, request: ShareRequest, seconds: int) -> tuple[str, str, dict[str, str]]:
    """(kind, URL, extra fields: the matching curl command, a POST policy's form fields)."""
    import json  # here, not at start-up: most runs make no link
    import shlex

    name = posixpath.basename(key)
    client = conn.client
    if request.upload and request.max_size is not None:
        post = client.generate_presigned_post(
            Bucket=conn.bucket,
            Key=key,
            Conditions=[["content-length-range", 0, request.max_size]],
            ExpiresIn=seconds,
        )
        url = str(post["url"])
        fields = " ".join(f"-F {shlex.quote(f'{k}={v}')}" for k, v in post["fields"].items())
        return "upload", url, {
            "curl": f"curl -f {fields} -F file=@{shlex.quote(name)} {shlex.quote(url)}",
            "fields": json.dumps(post["fields"]),
        }
    if request.upload:
        url = client.generate_presigned_url("put_object", Params={"Bucket": conn.bucket, "Key": key}, ExpiresIn=seconds)
        return "upload", url, {"curl": f"curl -f -T {shlex.quote(name)} {shlex.quote(url)}"}
    conn.head(key)  # a link to nothing helps no one: fail now with "No such object"
    url = client.generate_presigned_url("get_object", Params={"Bucket": conn.bucket, "Key": key}, ExpiresIn=seconds)
    return "download", url, {"curl": f"curl -f -o {shlex.quote(name)} {shlex.quote(url)}"}
