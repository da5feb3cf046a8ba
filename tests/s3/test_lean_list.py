"""ListObjectsV2 on the lean path (ferry.backends.s3.lean): every page must say what botocore's
says for the same request (keys decoded the same way, sizes, ETags, times, folders, continuation),
and a recursive download's listing must not need botocore's client at all."""

from __future__ import annotations

import os
from typing import Any

import pytest

from ferry.backends.s3 import S3Backend
from ferry.core.address import Address
from ferry.core.errors import AlreadyExists
from s3.servers import S3Server, aws_env
from s3.test_fast import AWKWARD

KEYS = [k for k in AWKWARD if "?" not in k] + [
    "ctl\x01char.txt",  # travels URL-encoded: XML 1.0 cannot carry it
    "sub/a.bin",
    "sub/deeper/b.bin",
    "other/c.bin",
]


def _fields(page: Any) -> dict[str, Any]:
    return {
        "keys": [(o["Key"], o["Size"], o["ETag"], o["LastModified"]) for o in page.get("Contents") or ()],
        "prefixes": [p["Prefix"] for p in page.get("CommonPrefixes") or ()],
        "truncated": page["IsTruncated"],
        "count": page.get("KeyCount"),
    }


@pytest.mark.parametrize("delimiter", ["/", None])
def test_lean_pages_say_what_botocore_says(server: S3Server, backend: S3Backend, delimiter: str | None) -> None:
    c = server.client()
    for i, key in enumerate(KEYS):
        c.put_object(Bucket=backend.bucket, Key=key, Body=os.urandom(10 + i))
    assert backend.conn.lean is not None
    lean_pages, boto_pages = [], []
    token = None
    while True:  # three keys a page: several pages, each continued by the server's token
        page = backend.conn.lean.list_objects_v2(backend.bucket, "", delimiter, 3, token)
        kw: dict[str, Any] = {"Delimiter": delimiter} if delimiter else {}
        if token:
            kw["ContinuationToken"] = token
        lean_pages.append(_fields(page))
        boto_pages.append(_fields(c.list_objects_v2(Bucket=backend.bucket, Prefix="", MaxKeys=3, **kw)))
        token = page.get("NextContinuationToken")
        if not page["IsTruncated"]:
            break
    assert len(lean_pages) > 2
    assert lean_pages == boto_pages
    listed = [k for p in lean_pages for k, *_ in p["keys"]] + [x for p in lean_pages for x in p["prefixes"]]
    folders = {k.split("/", 1)[0] + "/" for k in KEYS if "/" in k}
    expected = KEYS if delimiter is None else [k for k in KEYS if "/" not in k] + sorted(folders)
    assert sorted(listed) == sorted(expected)


def test_a_folder_lists_and_walks_without_botocores_client(server: S3Server, bucket: str) -> None:
    c = server.client()
    for key in KEYS:
        c.put_object(Bucket=bucket, Key=f"run/{key}", Body=b"x")
    with aws_env(server):
        backend = S3Backend(Address("s3", "", host=bucket))
        try:
            assert backend.stat("run").is_dir  # the GET finds no object, the one-key listing a folder
            names = sorted(e.name for e in backend.list("run"))
            assert "sub" in names and "other" in names and "plain.txt" in names
            assert "ctl\u2401char.txt" in names  # mapped reversibly, as from botocore's listing
            assert sorted(e.name for e in backend.list("run/sub")) == ["a.bin", "deeper"]
            assert not backend.conn.has_client()  # botocore's S3 model was never loaded
        finally:
            backend.close()


def test_uploads_into_a_new_folder_never_load_botocores_client(server: S3Server, bucket: str) -> None:
    """The folder-marker probe, the If-None-Match probe and the commit's HEAD (rclone) go lean too."""
    with aws_env(server):
        backend = S3Backend(Address("s3", "", host=bucket))
        try:
            backend.mkdir("new/folder")
            for i in range(3):
                w = backend.open_write(f"new/folder/f{i}.txt", size=5, token=str(i), readback="sha256")
                w.write(b"hello")
                w.finish()
                w.commit(overwrite=False)  # the store's If-None-Match, or a HEAD just before
            assert backend.conditional_writes() == (server.kind == "moto")
            assert backend.object_exists("new/folder/f1.txt") and not backend.object_exists("new/folder/nope")
            w = backend.open_write("new/folder/f1.txt", size=5, token="9", readback="sha256")
            w.write(b"again")
            w.finish()
            with pytest.raises(AlreadyExists):
                w.commit(overwrite=False)
            w.abort()
            assert not backend.conn.has_client()
        finally:
            backend.close()
    c = server.client()
    assert c.get_object(Bucket=bucket, Key="new/folder/f1.txt")["Body"].read() == b"hello"
    keys = [o["Key"] for o in c.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert not [k for k in keys if ".ferry-" in k]  # every probe object was deleted


def test_lean_answers_read_last_modified_as_botocore_does(server: S3Server, backend: S3Backend) -> None:
    """Ferry reads the HTTP date itself (the email package's import is start-up time): an object
    stored by another tool (no Ferry mtime metadata) gets the server's Last-Modified, to the second."""
    c = server.client()
    c.put_object(Bucket=backend.bucket, Key="theirs.bin", Body=b"x" * 10)
    expected = c.head_object(Bucket=backend.bucket, Key="theirs.bin")["LastModified"]
    assert backend.conn.lean is not None
    lean = backend.conn.lean.head_object(backend.bucket, "theirs.bin")
    assert lean["LastModified"] == expected and lean["LastModified"].utcoffset() is not None
    assert backend.stat("theirs.bin").mtime == expected.replace(microsecond=0)
