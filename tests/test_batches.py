"""The scheduler's batching seam (``ferry.transfers.batch``) on the memory backend, given the batch
methods a backend offers (SFTP's tar streams are tested against the real sshd in
``tests/sftp/test_tar_batches.py``): one result per task however tasks are grouped, folders, big
files and conflicts interleaved with batches, a bad digest sent back per file, both directions."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, cast

import pytest

from ferry.backends.base import BatchData, Entry, temp_name
from ferry.backends.memory import MemoryBackend
from ferry.transfers import batch
from ferry.transfers.scheduler import RunConfig, Runner
from ferry.transfers.store import Store
from helpers import MemSite, Recorder, file_digests, mem_job, partials

BATCHED = "batched here"


class _Batches:
    """Batch methods for MemoryBackend, as simple as the contract allows."""

    calls: ClassVar[list[int]] = []

    def batch_usable(self: Any, direction: str, algo: str | None) -> bool:
        return True

    def write_batch(
        self: Any, items: Sequence[tuple[str, BatchData, str, datetime | None]], algo: str
    ) -> list[str | BaseException]:
        _Batches.calls.append(len(items))
        out: list[str | BaseException] = []
        for path, source, token, _mtime in items:
            self.mkdir(path.rsplit("/", 1)[0], parents=True, exist_ok=True)  # as tar does
            if "grows" in path:  # written to after the stat, before the batch sends it
                with open(cast(Any, source).source.path, "ab") as f:  # the engine's item: its Entry
                    f.write(b" and more")
            data = source.read()  # the engine hands a BatchData: read when its turn comes
            assert len(data) == len(source)
            w = self.open_write(path, size=len(data), token=token)
            w.write(data)
            w.finish()  # left under its partial name, as tar leaves it
            with self.open_read(w.temp_path) as f:
                landed = f.read()
            digest = hashlib.new(algo, landed).hexdigest()
            out.append("0" * 64 if "corrupt" in path else digest)
        return out

    def commit_batch(self: Any, items: Sequence[tuple[str, str, bool, int]]) -> list[BaseException | None]:
        out: list[BaseException | None] = []
        for partial, final, overwrite, _size in items:
            try:
                if not overwrite and self.exists(final):
                    from ferry.core.errors import AlreadyExists

                    raise AlreadyExists(final)
                self.rename(partial, final, overwrite=True)
                out.append(None)
            except Exception as exc:
                out.append(exc)
        return out

    def read_batch(self: Any, paths: Sequence[str]) -> list[tuple[Entry, bytes] | BaseException]:
        _Batches.calls.append(len(paths))
        out: list[tuple[Entry, bytes] | BaseException] = []
        for p in paths:
            try:
                with self.open_read(p) as f:
                    out.append((self.stat(p), f.read()))
            except Exception as exc:
                out.append(exc)
        return out


@pytest.fixture
def batching(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    for name in ("batch_usable", "write_batch", "commit_batch", "read_batch"):
        monkeypatch.setattr(MemoryBackend, name, getattr(_Batches, name), raising=False)
    _Batches.calls = []
    return _Batches.calls


def _tree(root: Path) -> dict[str, str]:
    for i in range(150):
        p = root / f"d{i % 3}" / f"e{i % 2}" / f"f{i:03d}"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(i * 11))
    (root / "d0" / "big.bin").write_bytes(os.urandom(batch.SMALL_FILE + 1))  # never batched
    (root / "d1" / "corrupt.dat").write_bytes(b"lands wrong the first time")
    return file_digests(root)


def test_upload_batches_give_one_result_per_task(
    batching: list[int], site: MemSite, store: Store, tmp_path: Path
) -> None:
    want = _tree(tmp_path / "src")
    for rel in ("d0/e0/f000", "d2/e1/f005"):  # in the way: the skip policy keeps them
        site.put(f"/dst/src/{rel}", b"theirs")
    job = mem_job(store, [str(tmp_path / "src")], site.url("/dst/"), recursive=True, on_conflict="skip")
    listener = Recorder()
    summary = Runner(store, RunConfig(parallel=3, job_ids=[job]), listener=listener).run()
    assert summary.jobs == {job: "done"}
    assert batching and max(batching) > 1  # batches formed
    tasks = list(store.tasks(job, kinds=("file",)))
    assert len(tasks) == 152 and len({t.id for _t, _j, t, _r in listener.tasks}) == len(listener.tasks)
    reported = [t.id for _t, _j, t, _r in listener.tasks if t.kind == "file"]
    assert sorted(reported) == sorted(t.id for t in tasks)  # each file reported once
    by_rel = {t.rel.split("/", 1)[1]: t for t in tasks}
    for rel, digest in want.items():
        t = by_rel[rel]
        if rel in ("d0/e0/f000", "d2/e1/f005"):
            assert t.state == "skipped" and site.get(f"/dst/src/{rel}") == b"theirs"
            continue
        assert t.state == "done" and t.hash == digest, (rel, t)
        assert hashlib.sha256(site.get(f"/dst/src/{rel}")).hexdigest() == digest
        if rel in ("d0/big.bin", "d1/corrupt.dat"):  # too big / bad digest: per file
            assert t.verified == "sha256 match", t
        else:
            assert "tar-extracted" in (t.verified or ""), t
    assert site.partials("/dst") == []


def test_a_source_changing_before_its_turn_in_a_batch_goes_per_file(
    batching: list[int], site: MemSite, store: Store, tmp_path: Path
) -> None:
    """Sources are read only when the batch sends them (a 64 MiB batch is never held whole), so
    a file can change between its stat (the size in its tar header) and its turn: it is sent cut
    to that size, never committed, and the per-file copy moves what the file holds now."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(20):
        (src / f"f{i:02d}").write_bytes(os.urandom(1000 + i))
    (src / "grows.txt").write_bytes(b"first words")
    job = mem_job(store, [str(src)], site.url("/dst/"), recursive=True)
    assert Runner(store, RunConfig(parallel=1, job_ids=[job])).run().jobs == {job: "done"}
    assert batching and max(batching) == 21  # one batch held them all
    tasks = {t.rel.split("/", 1)[1]: t for t in store.tasks(job, kinds=("file",))}
    assert site.get("/dst/src/grows.txt") == b"first words and more"
    assert tasks["grows.txt"].verified == "sha256 match"  # per file, after the batch refused it
    assert all("tar-extracted" in (t.verified or "") for rel, t in tasks.items() if rel != "grows.txt")
    assert file_digests(src) == {rel: hashlib.sha256(site.get(f"/dst/src/{rel}")).hexdigest() for rel in tasks}
    assert site.partials("/dst") == []


def test_download_batches_write_through_the_local_writer(
    batching: list[int], site: MemSite, store: Store, tmp_path: Path
) -> None:
    want = _tree(tmp_path / "src")
    up = mem_job(store, [str(tmp_path / "src")], site.url("/dst/"), recursive=True)
    assert Runner(store, RunConfig(parallel=2, job_ids=[up])).run().jobs == {up: "done"}
    back = tmp_path / "back"
    (back / "src" / "d1" / "e0").mkdir(parents=True)  # the copy lands in back/src
    (back / "src" / "d1" / "e0" / "f004").write_bytes(b"mine")
    down = mem_job(store, [site.url("/dst/src")], str(back), recursive=True, on_conflict="rename")
    assert Runner(store, RunConfig(parallel=2, job_ids=[down])).run().jobs == {down: "done"}
    got = file_digests(back / "src")
    assert got.pop("d1/e0/f004 (1)") == want["d1/e0/f004"]
    assert got.pop("d1/e0/f004") == hashlib.sha256(b"mine").hexdigest()
    assert got == {k: v for k, v in want.items() if k != "d1/e0/f004"}
    tasks = {t.rel.split("/", 1)[1]: t for t in store.tasks(down, kinds=("file",))}
    assert all(t.state == "done" for t in tasks.values())
    assert sum("tar stream" in (t.verified or "") for t in tasks.values()) >= 140
    assert "tar stream" not in (tasks["d0/big.bin"].verified or "")
    assert not partials(back)


def test_nothing_batches_without_the_backend_methods(site: MemSite, store: Store, tmp_path: Path) -> None:
    _tree(tmp_path / "src")
    job = mem_job(store, [str(tmp_path / "src")], site.url("/dst/"), recursive=True)
    assert Runner(store, RunConfig(parallel=2, job_ids=[job])).run().jobs == {job: "done"}
    assert all(t.verified == "sha256 match" for t in store.tasks(job, kinds=("file",)))
    assert temp_name("x", "1") == ".x.1.ferry-part"  # the partial name both paths share
