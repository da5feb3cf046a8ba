"""``--parallel auto``, the default, on a long link: 50 ms between Ferry and the S3 server (the
WAN bench's link emulator in front of moto). Each small object waits a round trip or two, so 4
at once is far too few there; the tuner must find more by itself and say so in ``queue show``."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import Ferry
from s3.servers import S3Server

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import linkemu  # type: ignore[import-not-found]


@pytest.fixture
def far_endpoint(moto: S3Server) -> Iterator[str]:
    emu = linkemu.LinkEmulator(0.050, 1e9, 6 << 20).start()
    try:
        port = emu.add_route(("127.0.0.1", moto.port))
        yield f"http://127.0.0.1:{port}"
    finally:
        emu.close()


def small_tree(root: Path, count: int) -> Path:
    src = root / "run42"
    src.mkdir()
    for i in range(count):
        (src / f"f{i:04d}.dat").write_bytes(i.to_bytes(4, "big") * 1024)
    return src


def show(ferry: Ferry) -> dict[str, object]:
    out = ferry("queue", "show", "1", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    return dict(data.get("job", data))


def test_default_parallel_grows_on_a_long_link_and_says_why(tmp_path: Path, moto: S3Server, far_endpoint: str) -> None:
    src = small_tree(tmp_path, 400)
    bucket = moto.new_bucket()
    ferry = Ferry(home=tmp_path / "home", cwd=tmp_path, extra_env=moto.env(far_endpoint))
    out = ferry("cp", "-r", src, f"s3://{bucket}/in/", timeout=300)
    assert out.returncode == 0, out.stderr
    listed = moto.client().list_objects_v2(Bucket=bucket, Prefix="in/run42/")
    assert sum(o["Key"].endswith(".dat") for o in listed["Contents"]) == 400
    job = show(ferry)
    parallel = job["parallel"]
    assert isinstance(parallel, dict)
    # It grew past the old fixed default of 4 by itself (4 -> 8 -> 16 ... while throughput rose).
    assert parallel["files"] > 4, parallel
    assert parallel["why"] in ("rose", "plateau", "fell", "ceiling"), parallel
    assert "files at once" in str(parallel["text"])
    text = ferry("queue", "show", "1")
    assert "  parallel: auto: " in text.stdout, text.stdout


def test_a_fixed_parallel_is_left_alone(tmp_path: Path, moto: S3Server) -> None:
    src = small_tree(tmp_path, 20)
    bucket = moto.new_bucket()
    ferry = Ferry(home=tmp_path / "home", cwd=tmp_path, extra_env=moto.env())
    out = ferry("cp", "-r", "--parallel", "4", src, f"s3://{bucket}/in/")
    assert out.returncode == 0, out.stderr
    assert "parallel" not in show(ferry)
    assert "  parallel:" not in ferry("queue", "show", "1").stdout
