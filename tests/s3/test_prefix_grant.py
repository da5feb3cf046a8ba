"""S3 credentials limited to a prefix, the common institutional grant (issue 18): moto with IAM
enforced, alice's policy allowing ``s3:*Object`` under ``home/alice/`` and ``s3:ListBucket`` with
an ``s3:prefix`` condition, in a versioned bucket. Every command works with those keys, no request
leaves the prefix (moto refuses what IAM does not allow; :class:`~s3.prefix_gate.PrefixGate`
records every request and refuses a listing outside the prefix, the condition moto cannot judge),
and nothing is left behind: no probe objects, no delete markers, no extra versions."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from helpers import Ferry, describe, sha256_file, write_random
from s3.prefix_gate import PrefixGate
from s3.servers import PrefixAccount, prefix_account, shared_server


@pytest.fixture
def account() -> PrefixAccount:
    try:
        return prefix_account()
    except RuntimeError as exc:
        pytest.skip(f"moto S3 server unavailable: {exc}")


@pytest.fixture
def gate(account: PrefixAccount) -> Iterator[PrefixGate]:
    g = PrefixGate(account.server.port, account.bucket, account.prefix)
    yield g
    g.close()


@pytest.fixture
def alice(account: PrefixAccount, gate: PrefixGate, tmp_path: Path) -> Ferry:
    return Ferry(home=tmp_path, cwd=tmp_path, extra_env={**account.env(gate.endpoint), "FERRY_S3_PART_SIZE": "5M"})


def _versions(account: PrefixAccount, prefix: str) -> dict[str, Any]:
    return dict(account.client().list_object_versions(Bucket=account.bucket, Prefix=prefix))


def _ok(ferry: Ferry, gate: PrefixGate, *args: str | Path) -> str:
    res = ferry(*args)
    assert res.returncode == 0, f"{args}: {describe(res)}"
    assert not gate.outside(), f"{args} asked outside the grant: {gate.outside()}"
    return res.stdout


def test_the_grant_is_enforced_outside_the_prefix(account: PrefixAccount) -> None:
    # The fixture itself must be able to fail: alice may not write or read above her prefix.
    s3 = account.client("alice")
    with pytest.raises(botocore.exceptions.ClientError) as denied:
        s3.put_object(Bucket=account.bucket, Key="home/bob/x", Body=b"x")
    assert denied.value.response["Error"]["Code"] == "AccessDenied"
    with pytest.raises(botocore.exceptions.ClientError):
        s3.list_object_versions(Bucket=account.bucket)
    s3.put_object(Bucket=account.bucket, Key=f"{account.prefix}fixture-check", Body=b"x")


def test_every_command_works_with_keys_limited_to_a_prefix(
    account: PrefixAccount, gate: PrefixGate, alice: Ferry, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    base = f"s3://{account.bucket}/{account.prefix}{run}"
    (tmp_path / "a.txt").write_bytes(b"hello")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "x.txt").write_bytes(b"x")
    (tree / "y.txt").write_bytes(b"y")
    big = write_random(tree / "big.bin", 11 * 1024 * 1024)  # a multipart upload (5 MiB parts)

    _ok(alice, gate, "cp", tmp_path / "a.txt", f"{base}/")
    _ok(alice, gate, "cp", "-r", tree, f"{base}/")
    _ok(alice, gate, "cp", tmp_path / "a.txt", f"{base}/renamed.txt")
    listed = _ok(alice, gate, "ls", f"{base}/").split()
    assert listed == ["tree/", "a.txt", "renamed.txt"], listed
    _ok(alice, gate, "ls", f"{base}/a.txt")
    _ok(alice, gate, "cp", f"{base}/a.txt", tmp_path / "back.txt")
    assert (tmp_path / "back.txt").read_bytes() == b"hello"
    _ok(alice, gate, "cp", "-r", f"{base}/tree", tmp_path / "down")
    assert sha256_file(tmp_path / "down" / "big.bin") == big
    assert (tmp_path / "down" / "sub" / "x.txt").read_bytes() == b"x"
    assert "X-Amz-Signature" in _ok(alice, gate, "share", f"{base}/a.txt")
    (tmp_path / "moved.txt").write_bytes(b"moved")
    _ok(alice, gate, "mv", tmp_path / "moved.txt", f"{base}/")
    assert not (tmp_path / "moved.txt").exists()
    _ok(alice, gate, "queue", "add", "-r", tree, f"{base}/queued/")
    _ok(alice, gate, "queue", "run")
    assert [j["state"] for j in alice.jobs()][-1] == "done", alice.jobs()

    assert gate.requests and not gate.refused and not gate.outside()
    versions = _versions(account, f"{account.prefix}{run}/")
    assert not versions.get("DeleteMarkers"), versions.get("DeleteMarkers")
    keys = [v["Key"] for v in versions.get("Versions", [])]
    assert not [k for k in keys if ".ferry-" in k], keys  # no probe objects
    assert len(keys) == len(set(keys)), keys  # one version per object: nothing written twice
    names = {k[len(account.prefix) + len(run) + 1 :] for k in keys}
    assert {"a.txt", "renamed.txt", "moved.txt", "tree/big.bin", "tree/y.txt", "tree/sub/x.txt"} <= names
    assert {"queued/tree/big.bin", "queued/tree/y.txt", "queued/tree/sub/x.txt"} <= names


def test_on_a_store_that_ignores_conditions_no_probe_is_left_in_sight(tmp_path: Path) -> None:
    # Such a store keeps the probes; where deleting their version is refused (keys with s3:*Object
    # only) they go behind a delete marker: never left as objects in the user's folder.
    try:
        moto = shared_server("moto")
    except RuntimeError as exc:
        pytest.skip(f"moto S3 server unavailable: {exc}")
    bucket = moto.new_bucket()
    moto.client().put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    gate = PrefixGate(moto.port, bucket, "home/alice/", ignore_conditions=True)
    try:
        ferry = Ferry(home=tmp_path, cwd=tmp_path, extra_env=moto.env(gate.endpoint))
        tree = tmp_path / "tree"
        (tree / "sub").mkdir(parents=True)
        (tree / "sub" / "x.txt").write_bytes(b"x")
        _ok(ferry, gate, "cp", "-r", tree, f"s3://{bucket}/home/alice/")
        assert gate.refused, "the probes' version deletes were refused"
    finally:
        gate.close()
    keys = [o["Key"] for o in moto.client().list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert "home/alice/tree/sub/x.txt" in keys
    assert not [k for k in keys if ".ferry-" in k], keys
