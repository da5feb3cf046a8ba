"""Multipart uploads beyond what one writer does: part sizes, the multipart ETag, server-side
copies in parts (above CopyObject's 5 GiB), the parts an upload holds (ListParts), and unfinished
uploads listed and aborted (``ferry s3 cleanup``)."""

from __future__ import annotations

import binascii
import hashlib
from typing import Any

from ferry.backends.s3.connection import S3Connection, key_of
from ferry.backends.s3.errors import error_code
from ferry.backends.s3.settings import DEFAULT_PART, MAX_PARTS, MAX_SINGLE_COPY, MIN_PART

COPY_PART = 512 << 20  # the part size a multipart copy starts from


def choose_part_size(size: int | None, configured: int | None) -> int:
    """At least the configured size (16 MiB by default), and large enough that the object fits in
    10,000 parts; a size unknown up front is planned for the 5 TiB maximum."""
    base = configured or DEFAULT_PART
    total = size if size is not None else 5 << 40
    needed = -(-total // MAX_PARTS)
    needed = -(-needed // (1 << 20)) * (1 << 20)  # whole MiB
    return max(MIN_PART, base, needed)


def multipart_etag(md5_hexes: list[str]) -> str:
    """The ETag S3 gives a multipart object: MD5 of the parts' binary MD5s, dash, part count."""
    joined = b"".join(binascii.unhexlify(h) for h in md5_hexes)
    return f"{hashlib.md5(joined).hexdigest()}-{len(md5_hexes)}"


def copy_object(conn: S3Connection, src_key: str, dst_key: str, size: int) -> None:
    """Server-side copy; above 5 GiB (CopyObject's limit) as a multipart copy."""
    source = {"Bucket": conn.bucket, "Key": src_key}
    what = f"copying {conn.display(src_key)} to {conn.display(dst_key)}"
    if size <= MAX_SINGLE_COPY:
        conn.call(what, conn.client.copy_object, Key=dst_key, CopySource=source)
        return
    part = choose_part_size(size, COPY_PART)
    up = conn.call(what, conn.client.create_multipart_upload, Key=dst_key)
    upload_id = up["UploadId"]
    try:
        ranges = [(n + 1, lo, min(lo + part, size)) for n, lo in enumerate(range(0, size, part))]

        def one(n: int, lo: int, hi: int) -> dict[str, Any]:
            r = conn.call(
                what,
                conn.client.upload_part_copy,
                Key=dst_key,
                UploadId=upload_id,
                PartNumber=n,
                CopySource=source,
                CopySourceRange=f"bytes={lo}-{hi - 1}",
            )
            return {"PartNumber": n, "ETag": r["CopyPartResult"]["ETag"]}

        parts = list(conn.executor.map(lambda t: one(*t), ranges))
        conn.call(
            what,
            conn.client.complete_multipart_upload,
            Key=dst_key,
            UploadId=upload_id,
            MultipartUpload={"Parts": parts},
        )
    except BaseException:
        conn.client.abort_multipart_upload(Bucket=conn.bucket, Key=dst_key, UploadId=upload_id)
        raise


def list_parts(conn: S3Connection, key: str, upload_id: str) -> dict[int, tuple[str, int, str]]:
    """The parts the server holds for an upload: number -> (ETag, size, base64 SHA-256 checksum or "")."""
    parts: dict[int, tuple[str, int, str]] = {}
    try:
        for page in conn.client.get_paginator("list_parts").paginate(Bucket=conn.bucket, Key=key, UploadId=upload_id):
            for p in page.get("Parts") or ():
                parts[int(p["PartNumber"])] = (
                    str(p["ETag"]).strip('"'),
                    int(p["Size"]),
                    str(p.get("ChecksumSHA256") or ""),
                )
    except Exception as exc:
        raise conn.err(exc, conn.display(key)) from exc
    return parts


def unfinished_uploads(conn: S3Connection, prefix: str) -> list[dict[str, Any]]:
    """The multipart uploads under the path ``prefix`` never completed nor aborted (stored and billed)."""
    uploads: list[dict[str, Any]] = []
    try:
        pages = conn.client.get_paginator("list_multipart_uploads").paginate(Bucket=conn.bucket, Prefix=key_of(prefix))
        for page in pages:
            uploads.extend(page.get("Uploads") or ())
    except Exception as exc:
        if error_code(exc) == "NoSuchUpload":
            return []  # rclone serve s3's answer when there are none
        raise conn.err(exc, f"listing unfinished uploads in {conn.display(prefix)}") from exc
    return uploads


def abort_upload(conn: S3Connection, key: str, upload_id: str) -> None:
    what = f"aborting the upload of {conn.display(key)}"
    conn.call(what, conn.client.abort_multipart_upload, Key=key, UploadId=upload_id)
