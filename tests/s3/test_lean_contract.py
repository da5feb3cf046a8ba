"""The lean client's contract with botocore (ferry/backends/s3/lean.py, the one adapter module).

The lean client signs and sends a few S3 requests itself instead of through botocore. It is only
right while it sends what botocore would send and signs it the way botocore signs it. So, with no
server at all:

* every request the lean client makes is compared with the request botocore's own client builds
  for the same operation and parameters (captured at ``before-send``, never sent): the path and
  its encoding, the query, and every header that carries meaning;
* botocore's request is signed again with the lean client's :class:`SigV4`, from the same
  headers, payload hash and time: the ``Authorization`` header must come out identical, for
  signed and unsigned payloads, with and without a session token, on several endpoints;
* the botocore and boto3 versions allowed by pyproject.toml are the ones this was checked with
  (``lean.CHECKED_WITH``), up to the next minor release, and the installed ones are among them.

A botocore upgrade that signs or builds these requests differently, or a bug in the lean client,
fails here; then review lean.py against the new botocore before moving the pins.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.metadata
import re
import secrets
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from ferry.backends.s3.lean import CHECKED_WITH, UNSIGNED, LeanClient, SigV4, object_path

ROOT = Path(__file__).resolve().parents[2]
# Made per run: both signers get the same made-up credentials, so any pair will do.
ACCESS, SECRET = "AKID" + secrets.token_hex(8).upper(), secrets.token_urlsafe(30)
BUCKET = "ferry-contract"
ENDPOINTS = ["http://127.0.0.1:9000", "http://127.0.0.1:9000/store/base", "https://s3.example.org"]
KEYS = [
    "plain.txt",
    "with space/and+plus.txt",
    "percent%41~tilde-dash_.txt",
    "équipe/données ünï.txt",
    "a=b&c=d;e,f?g#h.txt",
    "ctl\x01name.txt",
    "deep/er/path/x.bin",
]
# What botocore sends that the lean client does not (SDK bookkeeping, transport), or that the
# signature covers in its own way (compared through the Authorization header instead).
BOTOCORE_ONLY = {
    "user-agent",
    "amz-sdk-invocation-id",
    "amz-sdk-request",
    "content-length",
    "expect",
    "authorization",
    "x-amz-date",
    "x-amz-content-sha256",
    "x-amz-security-token",
}
BODY = b"the bytes of a small object\n" * 3
SHA_B64 = base64.b64encode(hashlib.sha256(BODY).digest()).decode("ascii")
MD5_B64 = base64.b64encode(hashlib.md5(BODY).digest()).decode("ascii")


class _Stop(Exception):
    pass


class _Credentials:
    def __init__(self, token: str | None) -> None:
        self.access_key, self.secret_key, self.token = ACCESS, SECRET, token

    def get_frozen_credentials(self) -> _Credentials:
        return self


class _Capture(LeanClient):
    """The lean client, its requests recorded instead of sent."""

    recorded: tuple[str, str, str, dict[str, str], str, str]

    def _request(
        self,
        method: str,
        bucket: str,
        key: str,
        headers: dict[str, str],
        body: bytes,
        payload: str,
        query: str = "",
        into: memoryview | None = None,
    ) -> Any:
        self.recorded = (method, bucket, key, dict(headers), payload, query)
        raise _Stop


@functools.cache
def _botocore(endpoint: str, region: str, token: str | None, *, sign_payload: bool = True) -> Any:
    """A botocore client whose requests stop at ``before-send`` (made once: ~0.2 s each)."""
    import botocore.session
    from botocore.config import Config

    session = botocore.session.Session()
    session.set_credentials(ACCESS, SECRET, token)
    s3: dict[str, Any] = {"addressing_style": "path"}
    if not sign_payload:
        s3["payload_signing_enabled"] = False
    client = session.create_client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        config=Config(
            signature_version="s3v4",
            s3=s3,  # type: ignore[arg-type]
            retries={"mode": "standard", "max_attempts": 1},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )

    def stop(request: Any, **_: Any) -> None:
        _CAPTURED[client] = request
        raise _Stop

    client.meta.events.register("before-send.s3", stop)
    return client


_CAPTURED: dict[Any, Any] = {}  # client -> the request it stopped at last


def _captured(client: Any, call: Callable[[Any], Any]) -> Any:
    with pytest.raises(_Stop):
        call(client)
    return _CAPTURED.pop(client)


def _lean(endpoint: str, region: str, token: str | None) -> _Capture:
    parts = urlsplit(endpoint)
    return _Capture(parts.scheme, parts.netloc, parts.path.rstrip("/"), region, _Credentials(token), timeout=1)


def _lean_sent(lean: _Capture, call: Callable[[LeanClient], Any]) -> tuple[str, str, str, dict[str, str], str, str]:
    with pytest.raises(_Stop):
        call(lean)
    return lean.recorded


def _swap(call: Callable[[Any, str], Any]) -> Callable[[str, Any], Any]:
    """``call(client, key)`` as ``f(key, client)``, to bind the key of a loop with partial()."""
    return lambda key, client: call(client, key)


def _text(value: str | bytes) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _headers(request: Any) -> dict[str, str]:
    return {k.lower(): _text(v) for k, v in request.headers.items()}


def _canonical(query: str) -> str:
    """A URL's query as SigV4 orders it (what botocore signs): pairs sorted, not re-encoded."""
    return "&".join(sorted(q for q in query.split("&") if q)) if query else ""


# (name, the lean client's call, botocore's call for the same operation and parameters)
Case = tuple[str, Callable[[LeanClient, str], Any], Callable[[Any, str], Any]]
CASES: list[Case] = [
    ("put", lambda c, k: c.put_object(BUCKET, k, BODY, {}), lambda b, k: b.put_object(Bucket=BUCKET, Key=k, Body=BODY)),
    (
        "put md5 metadata if-none-match",
        lambda c, k: c.put_object(
            BUCKET,
            k,
            BODY,
            {"ContentMD5": MD5_B64, "IfNoneMatch": "*", "Metadata": {"ferry-sha256": "ab" * 32, "mtime": "1.5"}},
        ),
        lambda b, k: b.put_object(
            Bucket=BUCKET,
            Key=k,
            Body=BODY,
            ContentMD5=MD5_B64,
            IfNoneMatch="*",
            Metadata={"ferry-sha256": "ab" * 32, "mtime": "1.5"},
        ),
    ),
    (
        "put sha256",
        lambda c, k: c.put_object(BUCKET, k, BODY, {"ChecksumSHA256": SHA_B64}),
        lambda b, k: b.put_object(Bucket=BUCKET, Key=k, Body=BODY, ChecksumSHA256=SHA_B64),
    ),
    (
        "put metadata with spaces",
        lambda c, k: c.put_object(BUCKET, k, BODY, {"Metadata": {"note": "two  spaces, then  two more"}}),
        lambda b, k: b.put_object(Bucket=BUCKET, Key=k, Body=BODY, Metadata={"note": "two  spaces, then  two more"}),
    ),
    (
        "upload part md5",
        lambda c, k: c.upload_part(BUCKET, k, "up/load+id=", 7, BODY, MD5_B64),
        lambda b, k: b.upload_part(
            Bucket=BUCKET, Key=k, UploadId="up/load+id=", PartNumber=7, Body=BODY, ContentMD5=MD5_B64
        ),
    ),
    (
        "upload part sha256",
        lambda c, k: c.upload_part(BUCKET, k, "id", 12, BODY, None, hashlib.sha256(BODY).digest()),
        lambda b, k: b.upload_part(
            Bucket=BUCKET, Key=k, UploadId="id", PartNumber=12, Body=BODY, ChecksumSHA256=SHA_B64
        ),
    ),
    (
        "get",
        lambda c, k: c.get_object(BUCKET, k, None),
        lambda b, k: b.get_object(Bucket=BUCKET, Key=k),
    ),
    (
        "get range checksums",
        lambda c, k: c.get_object(BUCKET, k, "bytes=0-262143", checksum_mode=True),
        lambda b, k: b.get_object(Bucket=BUCKET, Key=k, Range="bytes=0-262143", ChecksumMode="ENABLED"),
    ),
    (
        "get range into, if-match",
        lambda c, k: c.get_range_into(BUCKET, k, 100, memoryview(bytearray(50)), '"0123abcd"'),
        lambda b, k: b.get_object(Bucket=BUCKET, Key=k, Range="bytes=100-149", IfMatch='"0123abcd"'),
    ),
    ("head", lambda c, k: c.head_object(BUCKET, k), lambda b, k: b.head_object(Bucket=BUCKET, Key=k)),
    (
        "head part checksums",
        lambda c, k: c.head_object(BUCKET, k, checksum_mode=True, part_number=3),
        lambda b, k: b.head_object(Bucket=BUCKET, Key=k, ChecksumMode="ENABLED", PartNumber=3),
    ),
    ("delete", lambda c, k: c.delete_object(BUCKET, k), lambda b, k: b.delete_object(Bucket=BUCKET, Key=k)),
    (
        "list",
        lambda c, k: c.list_objects_v2(BUCKET, k, None, 1000, None),
        lambda b, k: b.list_objects_v2(Bucket=BUCKET, Prefix=k, MaxKeys=1000, EncodingType="url"),
    ),
    (
        "list folder page",
        lambda c, k: c.list_objects_v2(BUCKET, k, "/", 3, "next+page/token="),
        lambda b, k: b.list_objects_v2(
            Bucket=BUCKET, Prefix=k, Delimiter="/", MaxKeys=3, ContinuationToken="next+page/token=", EncodingType="url"
        ),
    ),
]


def _cases() -> Iterator[Any]:
    for endpoint in ENDPOINTS:
        for name, lean_call, boto_call in CASES:
            yield pytest.param(endpoint, lean_call, boto_call, id=f"{endpoint} {name}")


@pytest.mark.parametrize(("endpoint", "lean_call", "boto_call"), list(_cases()))
def test_the_lean_client_sends_the_request_botocore_would(
    endpoint: str, lean_call: Callable[[LeanClient, str], Any], boto_call: Callable[[Any, str], Any]
) -> None:
    region = "eu-west-2"
    lean = _lean(endpoint, region, None)
    for key in KEYS:
        theirs = _captured(_botocore(endpoint, region, None), functools.partial(_swap(boto_call), key))
        method, bucket, lean_key, headers, payload, query = _lean_sent(lean, functools.partial(_swap(lean_call), key))
        url = urlsplit(theirs.url)
        assert method == theirs.method
        assert object_path(urlsplit(endpoint).path.rstrip("/"), bucket, lean_key) == url.path, key
        assert query == _canonical(url.query), key
        ours = {k.lower(): v for k, v in headers.items()}
        meaningful = {k: v for k, v in _headers(theirs).items() if k not in BOTOCORE_ONLY}
        assert ours == meaningful, key
        if payload != UNSIGNED:  # some bodies go unsigned on purpose (a signed Content-MD5 covers them)
            assert payload == _headers(theirs)["x-amz-content-sha256"], key


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("region", ["us-east-1", "eu-west-2"])
@pytest.mark.parametrize("token", [None, "FwoGZXIvYXdzE//session+token=="], ids=["keys", "session token"])
@pytest.mark.parametrize("sign_payload", [True, False], ids=["signed payload", "unsigned payload"])
def test_the_lean_signer_signs_as_botocore_does(
    endpoint: str, region: str, token: str | None, sign_payload: bool
) -> None:
    client = _botocore(endpoint, region, token, sign_payload=sign_payload)
    signer = SigV4(region)
    host = urlsplit(endpoint).netloc.removesuffix(":443")
    for _, _, boto_call in CASES:
        for key in KEYS:
            theirs = _captured(client, functools.partial(_swap(boto_call), key))
            got = _headers(theirs)
            signed_names = re.search(r"SignedHeaders=([^,]+)", got["authorization"])
            assert signed_names is not None
            own = ("host", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token")  # the signer adds these
            given = {n: got[n] for n in signed_names.group(1).split(";") if n not in own}
            url = urlsplit(theirs.url)
            ours = signer.sign(
                theirs.method,
                host,
                url.path,
                _canonical(url.query),
                given,
                got["x-amz-content-sha256"],
                _Credentials(token),
                got["x-amz-date"],
            )
            assert ours["authorization"] == got["authorization"], f"{theirs.method} {theirs.url}"
            if not sign_payload:
                assert ours["x-amz-content-sha256"] == UNSIGNED


def _pin(name: str) -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    found = [d for d in project["dependencies"] if re.match(rf"{name}\s*[<>=!~]", d)]
    assert len(found) == 1, f"pyproject.toml should pin {name} once: {found}"
    return str(found[0]).replace(" ", "")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


@pytest.mark.parametrize("name", sorted(CHECKED_WITH))
def test_only_the_versions_checked_are_allowed(name: str) -> None:
    checked = CHECKED_WITH[name]
    major, minor, _ = _version(checked)
    assert _pin(name) == f"{name}>={checked},<{major}.{minor + 1}", (
        f"pyproject.toml must allow exactly the {name} versions lean.py was checked with (CHECKED_WITH)"
    )
    installed = _version(importlib.metadata.version(name))
    assert _version(checked) <= installed < (major, minor + 1, 0), f"{name} {installed} is not a version checked"
