"""Downloads to local disk are hashed once: each write is read back and compared, not re-hashed.

Local destinations read back what they wrote. When the copy hashes exactly the buffers it writes
(the copy loop, a tar batch's members), the read-back compares each write with what the file
then holds instead of hashing the whole file a second time (``Writer.compare_writes``); the
recorded hash, and what a file that landed wrong does, must be exactly as before.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from ferry.backends import local
from ferry.transfers.scheduler import RunConfig, Runner
from ferry.transfers.store import Store
from helpers import OsWritingWrong, mem_job


def _run(store: Store, job: int) -> None:
    Runner(store, RunConfig(parallel=2, backoff_base=0.01, job_ids=[job], max_attempts=2)).run()


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether the writer took each compare_writes() the copy asked for."""
    calls: list[bool] = []
    original = local.LocalWriter.compare_writes

    def spy(self: local.LocalWriter, hasher: object) -> bool:
        took = original(self, hasher)  # type: ignore[arg-type]
        calls.append(took)
        return took

    monkeypatch.setattr(local.LocalWriter, "compare_writes", spy)
    return calls


def test_every_file_is_hashed_once_and_compared(tmp_path: Path, store: Store, taken: list[bool]) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    files = {"a.bin": os.urandom(1 << 20), "b.bin": os.urandom(5000), "big.bin": os.urandom(3 << 20 | 7)}
    for name, data in files.items():
        (src / name).write_bytes(data)
    job = mem_job(store, [str(src)], str(dst), recursive=True)
    _run(store, job)
    for t in store.tasks(job, kinds=("file",)):
        data = files[Path(t.src).name]
        assert t.state == "done" and t.verified == "sha256 match"
        assert t.hash == hashlib.sha256(data).hexdigest()
        assert (dst / Path(t.src).name).read_bytes() == data
    assert taken == [True, True, True]


@pytest.mark.parametrize("size", [200_000, (2 << 20) + 5], ids=["one chunk", "three chunks"])
def test_a_file_that_lands_wrong_is_caught_and_copied_again(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch, taken: list[bool], size: int
) -> None:
    # The comparison must fail it as the second hash did, and the copy's one fresh try (within
    # the attempt, as for a bit flipped in transit) lands the right bytes.
    data = os.urandom(size)
    (tmp_path / "f.bin").write_bytes(data)
    wrong = OsWritingWrong()
    monkeypatch.setattr(local, "os", wrong)
    job = mem_job(store, [str(tmp_path / "f.bin")], str(tmp_path / "out.bin"))
    _run(store, job)
    monkeypatch.undo()
    (t,) = store.tasks(job, kinds=("file",))
    assert wrong.damaged and t.state == "done" and t.verified == "sha256 match", (t.state, t.error)
    assert (tmp_path / "out.bin").read_bytes() == data
    assert taken == [True, True]
