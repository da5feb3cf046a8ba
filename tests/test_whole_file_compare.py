"""A file that arrives in one chunk is checked by comparing what landed with the bytes in hand.

Local destinations read back what they wrote. When the copy holds a whole file in one buffer
(every file up to 1 MiB; a tar batch's members), the read-back compares the disk with that buffer
instead of hashing the file a second time (``Writer.expect``); the recorded hash and what a
mismatch does must be exactly as before.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from ferry.backends import local
from ferry.transfers.scheduler import RunConfig, Runner
from ferry.transfers.store import Store
from helpers import mem_job


def _run(store: Store, job: int) -> None:
    Runner(store, RunConfig(parallel=2, backoff_base=0.01, job_ids=[job], max_attempts=2)).run()


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """Each expect() call the copy makes: (size, whether the writer took it)."""
    calls: list[tuple[int, bool]] = []
    original = local.LocalWriter.expect

    def spy(self: local.LocalWriter, data: bytes | bytearray, digest: str, size: int | None = None) -> bool:
        took = original(self, data, digest, size)
        calls.append((len(data) if size is None else size, took))
        return took

    monkeypatch.setattr(local.LocalWriter, "expect", spy)
    return calls


def test_small_files_are_compared_not_hashed_twice(tmp_path: Path, store: Store, taken: list[tuple[int, bool]]) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    files = {"a.bin": os.urandom(1 << 20), "b.bin": os.urandom(5000), "big.bin": os.urandom(3 << 20)}
    for name, data in files.items():
        (src / name).write_bytes(data)
    job = mem_job(store, [str(src)], str(dst), recursive=True)
    _run(store, job)
    for t in store.tasks(job, kinds=("file",)):
        data = files[Path(t.src).name]
        assert t.state == "done" and t.verified == "sha256 match"
        assert t.hash == hashlib.sha256(data).hexdigest()
        assert (dst / Path(t.src).name).read_bytes() == data
    # The two files that fit one chunk went by comparison; the 3 MiB one was hashed as before.
    assert sorted(taken) == [(5000, True), (1 << 20, True)]


def test_a_file_that_lands_wrong_is_caught_by_the_comparison(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch, taken: list[tuple[int, bool]]
) -> None:
    # The layer below hands the disk something else than was written, once: the comparison
    # must fail it as the second hash did, and the copy's one fresh try (within the attempt, as
    # for a bit flipped in transit) lands the right bytes.
    data = os.urandom(200_000)
    (tmp_path / "f.bin").write_bytes(data)
    original_write = local.LocalWriter.write
    damaged: list[str] = []

    def faulty(self: local.LocalWriter, chunk: bytes | bytearray | memoryview) -> None:
        original_write(self, chunk)
        if not damaged:
            damaged.append(self.temp_path)
            os.pwrite(self.fd, b"\0", 1234)

    monkeypatch.setattr(local.LocalWriter, "write", faulty)
    job = mem_job(store, [str(tmp_path / "f.bin")], str(tmp_path / "out.bin"))
    _run(store, job)
    (t,) = store.tasks(job, kinds=("file",))
    assert damaged and t.state == "done" and t.verified == "sha256 match", (t.state, t.error)
    assert (tmp_path / "out.bin").read_bytes() == data
    assert taken == [(200_000, True), (200_000, True)]
