"""Pre-signed links (SigV4): a GET to download one object, a PUT or a size-limited POST policy to
upload one. Signed by botocore's client (``signature_version="s3v4"``: its default for us-east-1
with a custom endpoint would sign SigV2, which stores refuse), never by the lean client."""

from __future__ import annotations

import base64
import posixpath
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from ferry.backends.base import SignedRequest, StoreChecks, StoredObject
from ferry.backends.s3.connection import S3Connection, key_of
from ferry.core.errors import FerryError, NotFound, UsageError
from ferry.sharing.types import Link, ShareRequest

MAX_PRESIGN = timedelta(days=7)  # SigV4's limit on X-Amz-Expires
DEFAULT_PRESIGN = timedelta(hours=1)
# Why a link cannot be revoked, as a clause (callers say "cannot be revoked early: ..."), and
# the whole sentence for an error.
REVOKE_REASON = "it stops working when it expires, or when the access key that signed it is deactivated or rotated"
REVOKE_NOTE = (
    "S3 pre-signed links cannot be revoked early: they stop working when they expire, or when the access key "
    "that signed them is deactivated or rotated"
)


def b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode("ascii")


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
        revoke_note=REVOKE_REASON,
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


# -- site to site: URLs another site's host sends (backends.base.UrlSigner) --


class DirectUrls:
    """:class:`~ferry.backends.base.UrlSigner` for :class:`~ferry.backends.s3.S3Backend`: short
    pre-signed requests for one object each, which an SSH host runs with its own ``curl``
    (``backends/sftp/direct.py``). Signed here by botocore; the host never sees a credential."""

    conn: S3Connection

    def sign_put(
        self,
        path: str,
        seconds: int,
        *,
        sha256: str | None,
        md5: str | None,
        mtime_ns: int | None = None,
        send_checksum: bool = True,
    ) -> SignedRequest:
        params: dict[str, object] = {"Bucket": self.conn.bucket, "Key": key_of(path)}
        headers: dict[str, str] = {}
        if sha256 and send_checksum:
            params["ChecksumSHA256"] = headers["x-amz-checksum-sha256"] = b64(bytes.fromhex(sha256))
        if md5:
            params["ContentMD5"] = headers["Content-MD5"] = b64(bytes.fromhex(md5))
        meta = _metadata(sha256, mtime_ns)
        if meta:
            params["Metadata"] = meta
            headers.update({f"x-amz-meta-{k}": v for k, v in meta.items()})
        url = self._signed("put_object", params, seconds, path)
        return SignedRequest("PUT", url, headers)

    def sign_get(self, path: str, seconds: int) -> SignedRequest:
        url = self._signed("get_object", {"Bucket": self.conn.bucket, "Key": key_of(path)}, seconds, path)
        return SignedRequest("GET", url)

    def sign_probe(self, seconds: int) -> SignedRequest:
        return SignedRequest("HEAD", self._signed("head_bucket", {"Bucket": self.conn.bucket}, seconds, ""))

    def sign_list(self, path: str, seconds: int) -> SignedRequest:
        params = {"Bucket": self.conn.bucket, "Prefix": key_of(path), "MaxKeys": 1}
        return SignedRequest("GET", self._signed("list_objects_v2", params, seconds, path))

    def _signed(self, operation: str, params: Mapping[str, object], seconds: int, path: str) -> str:
        try:
            return str(self.conn.client.generate_presigned_url(operation, Params=params, ExpiresIn=seconds))
        except Exception as exc:
            raise self.conn.err(exc, f"signing a request for {self.conn.display(key_of(path))}") from exc

    def stored_object(self, path: str) -> StoredObject | None:
        from ferry.backends.s3.evidence import Facts

        key = key_of(path)
        try:
            head = self.conn.call(self.conn.display(key), self.conn.client.head_object, Key=key, ChecksumMode="ENABLED")
        except NotFound:
            return None
        size = int(head.get("ContentLength") or 0)
        facts = Facts.from_head(head, size)
        sha = facts.checksums.get("SHA256", "")
        whole = sha and facts.checksum_type != "COMPOSITE" and "-" not in sha
        md5 = facts.etag if facts.etag_is_md5 and facts.parts == 0 and len(facts.etag) == 32 else ""
        return StoredObject(
            size=size,
            sha256=base64.b64decode(sha).hex() if whole else "",
            md5=md5.lower(),
            ferry_sha256=facts.ferry_sha256.lower(),
            etag=facts.etag.lower(),
            parts=self._part_layout(key, size, facts.parts) if facts.etag_is_md5 and facts.parts else (),
        )

    def _part_layout(self, key: str, size: int, count: int) -> tuple[int, ...]:
        """The part sizes of a multipart object, from its first part's size (one HEAD), assuming the
        rest alike but the last; empty where the store does not say."""
        from ferry.backends.s3.evidence import uniform_layout

        try:
            first = int(self.conn.head_object(key, part_number=1).get("ContentLength") or 0)
        except Exception:
            return ()
        return tuple(uniform_layout(size, count, first) or ())

    def store_checks(self, path: str) -> StoreChecks:
        from ferry.backends.s3.checksums import support

        found = support(self.conn, key_of(path))
        return StoreChecks(found.send_sha256, found.checks_sha256, found.checks_md5)

    def start_upload(self, path: str, sha256: str | None, mtime_ns: int | None = None) -> str:
        key = key_of(path)
        meta = _metadata(sha256, mtime_ns)
        resp = self.conn.call(self.conn.display(key), self.conn.client.create_multipart_upload, Key=key, Metadata=meta)
        return str(resp["UploadId"])

    def sign_part(self, path: str, upload_id: str, number: int, seconds: int, *, md5: str) -> SignedRequest:
        digest = b64(bytes.fromhex(md5))
        params = {
            "Bucket": self.conn.bucket,
            "Key": key_of(path),
            "UploadId": upload_id,
            "PartNumber": number,
            "ContentMD5": digest,
        }
        return SignedRequest("PUT", self._signed("upload_part", params, seconds, path), {"Content-MD5": digest})

    def uploaded_parts(self, path: str, upload_id: str) -> dict[int, tuple[str, int]]:
        from ferry.backends.s3.multipart import list_parts

        held = list_parts(self.conn, key_of(path), upload_id)
        return {number: (etag.lower(), size) for number, (etag, size, _sha) in held.items()}

    def complete_upload(self, path: str, upload_id: str, md5s: Sequence[str]) -> None:
        key = key_of(path)
        parts = [{"ETag": f'"{m}"', "PartNumber": i} for i, m in enumerate(md5s, 1)]
        self.conn.call(
            self.conn.display(key),
            self.conn.client.complete_multipart_upload,
            Key=key,
            UploadId=upload_id,
            MultipartUpload={"Parts": parts},
        )

    def abort_upload(self, path: str, upload_id: str) -> None:
        key = key_of(path)
        self.conn.call(self.conn.display(key), self.conn.client.abort_multipart_upload, Key=key, UploadId=upload_id)


def _metadata(sha256: str | None, mtime_ns: int | None) -> dict[str, str]:
    """What Ferry stores with an object another host uploads: the host's SHA-256 of the file
    (``ferry-sha256``, as a relayed upload stores its stream's) and its time (``mtime``)."""
    from ferry.backends.s3.entries import attribute_metadata

    meta = attribute_metadata(None, mtime_ns, None)
    if sha256:
        meta["ferry-sha256"] = sha256
    return meta
