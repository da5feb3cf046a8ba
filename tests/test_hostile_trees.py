"""Hostile trees on the local disk: nothing is ever written, created, renamed or deleted through a
symbolic link inside the destination, and names the destination cannot hold are reported.

Each end-to-end case runs the real ``ferry`` command against real links in ``tmp_path`` and
hashes a sentinel tree *outside* the destination before and after: it must not change at all.
"""

from __future__ import annotations

import hashlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ferry.backends.base import Kind
from ferry.backends.local import ConfinedLocal, LocalBackend
from ferry.core.errors import AlreadyExists, LinkInTheWay, UnsafeName
from ferry.core.outcomes import SkipReason
from ferry.transfers.store import Store, Task
from helpers import Ferry, MemSite, describe, file_events, mem_job, partials, stop, wait_until

MiB = 1 << 20
POLICIES = ["skip", "overwrite", "newer", "different", "rename", "resume", "ask"]
REPLACING = {"overwrite", "newer", "different", "resume"}  # decide to replace a link where a folder must be


def tree_state(root: Path) -> dict[str, tuple[str, int, str]]:
    """Everything under ``root`` (links not followed): kind, mode and content hash or link target."""
    out: dict[str, tuple[str, int, str]] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            p = Path(dirpath, name)
            st = p.lstat()
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = ("link", st.st_mode, os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir", st.st_mode, "")
            else:
                out[rel] = ("file", st.st_mode, hashlib.sha256(p.read_bytes()).hexdigest() + f"@{st.st_mtime_ns}")
    return out


@pytest.fixture
def outside(tmp_path: Path) -> Iterator[Path]:
    """A sentinel tree beside the destination; the test fails if anything in it changed."""
    root = tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    (root / "f.txt").write_bytes(b"precious, outside the destination\n")
    (root / "sub" / "deep.txt").write_bytes(b"also precious\n")
    os.utime(root / "f.txt", ns=(10**18, 10**18))
    before = tree_state(root)
    yield root
    assert tree_state(root) == before, "something outside the destination changed"


def queue_tasks(ferry: Ferry) -> dict[str, Task]:
    store = Store(ferry.home / "data" / "queue.db")
    try:
        job = store.jobs()[-1]
        return {t.rel: t for t in store.tasks(job.id)}
    finally:
        store.close()


# ---- the reported bug, end to end: a folder replaced by a link between two runs ----


@pytest.mark.parametrize("policy", POLICIES)
def test_remote_link_then_real_folder_never_writes_outside(
    ferry: Ferry, tmp_path: Path, outside: Path, policy: str
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "top.txt").write_bytes(b"top\n")
    os.symlink(outside, src / "d")  # run 1 copies this link as a link
    dst = tmp_path / "dst"
    ferry.ok("cp", "-r", src, f"{dst}/")
    assert os.readlink(dst / "src" / "d") == str(outside)

    # On the source, the link becomes a real folder holding names that exist outside.
    (src / "d").unlink()
    (src / "d" / "sub").mkdir(parents=True)
    (src / "d" / "f.txt").write_bytes(b"from the source\n")
    (src / "d" / "new.txt").write_bytes(b"new file\n")
    (src / "d" / "sub" / "deep.txt").write_bytes(b"deep from the source\n")

    res = ferry("cp", "-r", "--json", "--on-conflict", policy, src, f"{dst}/")
    tasks = queue_tasks(ferry)
    inner = {rel: t for rel, t in tasks.items() if rel.startswith("src/d/")}
    assert set(inner) == {"src/d/f.txt", "src/d/new.txt", "src/d/sub", "src/d/sub/deep.txt"}, tasks
    if policy in REPLACING:
        # The link itself was replaced by a real folder, and the copy went into it.
        assert res.returncode == 0, describe(res)
        assert not (dst / "src" / "d").is_symlink()
        assert (dst / "src" / "d" / "f.txt").read_bytes() == b"from the source\n"
        assert (dst / "src" / "d" / "sub" / "deep.txt").read_bytes() == b"deep from the source\n"
        assert all(t.state == "done" for t in inner.values()), inner
    else:
        # The link is kept, and nothing goes through it: every file below is reported.
        assert os.readlink(dst / "src" / "d") == str(outside)
        folder = tasks["src/d"]
        if policy == "ask":  # no one to ask: fails as any conflict does, and says how to choose
            assert res.returncode != 0 and folder.state == "failed" and folder.error_kind == "conflict", folder
            assert {t.state for t in inner.values()} <= {"failed"}, inner
        else:
            assert res.returncode == 0, describe(res)
            assert folder.state == "skipped" and folder.skip_reason is SkipReason.POLICY, folder
            assert "symbolic link" in (folder.verified or ""), folder
            for t in inner.values():
                assert t.state == "skipped" and t.skip_reason is SkipReason.POLICY, t
        for e in file_events(res.stdout).values():
            assert e["state"] != "done" or not e["path"].startswith("src/d/"), e
    assert partials(dst) == [] and partials(outside) == []


def test_link_in_the_middle_of_a_destination_path(ferry: Ferry, tmp_path: Path, outside: Path) -> None:
    src = tmp_path / "src"
    (src / "a" / "b" / "c").mkdir(parents=True)
    (src / "a" / "b" / "c" / "deep.txt").write_bytes(b"deep\n")
    (src / "a" / "b" / "f.txt").write_bytes(b"f\n")
    (src / "a" / "ok.txt").write_bytes(b"ok\n")
    # The destination already holds the tree, with a link planted half-way down.
    dst = tmp_path / "dst"
    (dst / "src" / "a").mkdir(parents=True)
    os.symlink(outside, dst / "src" / "a" / "b")
    os.symlink(outside / "sub", outside / "c")  # a second hop, outside, that must not matter either

    res = ferry("cp", "-r", "--json", "--on-conflict", "skip", src, f"{dst}/")
    assert res.returncode == 0, describe(res)
    assert (dst / "src" / "a" / "ok.txt").read_bytes() == b"ok\n"
    assert os.readlink(dst / "src" / "a" / "b") == str(outside)
    tasks = queue_tasks(ferry)
    for rel in ("src/a/b", "src/a/b/c", "src/a/b/f.txt", "src/a/b/c/deep.txt"):
        assert tasks[rel].state == "skipped" and tasks[rel].skip_reason is SkipReason.POLICY, tasks[rel]
    assert str(dst / "src" / "a" / "b") in (tasks["src/a/b/c/deep.txt"].verified or "")
    os.unlink(outside / "c")  # the fixture's sentinel did not have it

    # With overwrite the link itself is replaced by a folder; still nothing outside changes.
    os.symlink(outside / "sub", outside / "c")
    res = ferry("cp", "-r", "--json", "--on-conflict", "overwrite", src, f"{dst}/")
    assert res.returncode == 0, describe(res)
    assert (dst / "src" / "a" / "b").is_dir() and not (dst / "src" / "a" / "b").is_symlink()
    assert (dst / "src" / "a" / "b" / "c" / "deep.txt").read_bytes() == b"deep\n"
    os.unlink(outside / "c")


def test_a_link_the_user_named_is_followed(ferry: Ferry, tmp_path: Path) -> None:
    """Links at or above the destination root are the user's choice: /scratch -> /lustre/scratch."""
    real = tmp_path / "lustre" / "scratch"
    real.mkdir(parents=True)
    os.symlink(real, tmp_path / "scratch")
    src = tmp_path / "src"
    (src / "x").mkdir(parents=True)
    (src / "x" / "a.txt").write_bytes(b"a\n")
    ferry.ok("cp", "-r", src, f"{tmp_path / 'scratch' / 'run1'}/")
    assert (real / "run1" / "src" / "x" / "a.txt").read_bytes() == b"a\n"
    ferry.ok("cp", "-r", src, tmp_path / "scratch")  # the named destination is itself a link
    assert (real / "src" / "x" / "a.txt").read_bytes() == b"a\n"


def test_file_replaced_by_a_link_is_replaced_itself_never_its_target(
    ferry: Ferry, tmp_path: Path, outside: Path
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "f.txt").write_bytes(b"from the source\n")
    dst = tmp_path / "dst"
    (dst / "src").mkdir(parents=True)
    os.symlink(outside / "f.txt", dst / "src" / "f.txt")
    res = ferry("cp", "-r", "--json", "--on-conflict", "skip", src, f"{dst}/")
    assert res.returncode == 0, describe(res)
    assert queue_tasks(ferry)["src/f.txt"].skip_reason is SkipReason.POLICY
    assert (dst / "src" / "f.txt").is_symlink()
    for policy in ("different", "overwrite"):
        res = ferry("cp", "-r", "--json", "--on-conflict", policy, src, f"{dst}/")
        assert res.returncode == 0, describe(res)
        assert not (dst / "src" / "f.txt").is_symlink(), policy
        assert (dst / "src" / "f.txt").read_bytes() == b"from the source\n"
        os.unlink(dst / "src" / "f.txt")
        os.symlink(outside / "f.txt", dst / "src" / "f.txt")


# ---- a partial file whose folder became a link before the resume ----


@pytest.mark.parametrize("policy", ["ask", "overwrite"])
def test_resume_after_the_partials_folder_became_a_link(
    ferry: Ferry, tmp_path: Path, outside: Path, policy: str
) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    data = os.urandom(8 * MiB)
    (src / "sub" / "big.bin").write_bytes(data)
    dst = tmp_path / "dst"
    ferry.ok("queue", "add", "-r", "--on-conflict", policy, src, f"{dst}/")
    proc = ferry.popen("queue", "run", "--bwlimit", "2M")
    try:
        wait_until(lambda: any(p.stat().st_size >= MiB for p in partials(dst) if p.exists()), 60, 0.01, "a partial")
    finally:
        stop(proc, signal.SIGKILL)
    (part,) = partials(dst)
    # The partial's folder moves outside, and a link to it takes its place.
    moved = outside / "moved"
    os.rename(dst / "src" / "sub", moved)
    os.symlink(moved, dst / "src" / "sub")
    before = tree_state(outside)
    # A link planted where the partial was, too: continuing it must not write through.
    res = ferry("queue", "run", "--json")
    assert tree_state(outside) == before, "the resume wrote outside the destination"
    task = queue_tasks(ferry)["src/sub/big.bin"]
    if policy == "overwrite":
        assert res.returncode == 0, describe(res)
        assert task.state == "done", task
        assert (dst / "src" / "sub" / "big.bin").read_bytes() == data
        assert not (dst / "src" / "sub").is_symlink()
    else:
        assert (dst / "src" / "sub").is_symlink()
        assert task.state == "failed" and task.error_kind == "conflict", task  # ask, no one to ask
    assert partials(dst) == []
    assert (moved / part.name).exists()  # the old partial, now outside, was left alone
    for p in moved.iterdir():  # it is not ours to clean up any more
        p.unlink()
    moved.rmdir()


# ---- names the destination cannot hold ----


def test_remote_name_longer_than_the_destination_allows(site: MemSite, store: Store, tmp_path: Path) -> None:
    from ferry.transfers.scheduler import RunConfig, Runner

    long_name = "n" * 252 + ".bin"  # 256 bytes: one more than ext4, xfs, btrfs and tmpfs hold
    ok_name = "k" * 251 + ".bin"  # 255 bytes: fits
    site.put(f"/src/{long_name}", b"too long")
    site.put(f"/src/{ok_name}", b"fits")
    wide = "ü" * 120 + ".txt"  # 124 characters, 244 bytes: fits
    site.put(f"/src/{wide}", b"multibyte")
    dst = tmp_path / "dst"
    job = mem_job(store, [site.url("/src")], f"{dst}/", recursive=True)
    Runner(store, RunConfig(parallel=2, job_ids=[job])).run()
    tasks = {t.rel: t for t in store.tasks(job)}
    refused = tasks[f"src/{long_name}"]
    assert refused.state == "skipped" and refused.skip_reason is SkipReason.UNREPRESENTABLE, refused
    assert "256 bytes" in (refused.error or "")
    assert tasks[f"src/{ok_name}"].state == "done"
    assert (dst / "src" / ok_name).read_bytes() == b"fits"
    assert sorted(p.name for p in (dst / "src").iterdir()) == sorted([ok_name, wide])
    assert store.job(job).state == "done"


HOSTILE_NAMES = ["..", ".", "", "../escape.txt", "/etc/passwd", "a/../../x", "nul\x00name"]


def test_hostile_remote_names_are_reported_never_joined(site: MemSite, tmp_path: Path) -> None:
    """Names no POSIX listing gives, as a hostile server may send them: each is its own skipped
    task with a typed reason, and none becomes a path at the destination."""
    from ferry.backends.base import Entry
    from ferry.backends.memory import MemoryBackend
    from ferry.transfers.planner import Root, expand

    class Hostile(MemoryBackend):
        def list(self, path: str, cancel: Any = None) -> Iterator[Entry]:
            yield from super().list(path, cancel)
            if path.rstrip("/") == "/src":
                for name in HOSTILE_NAMES:
                    yield Entry(path=f"/src/{name}", name=name, kind=Kind.FILE, size=4)

    site.put("/src/fine.txt", b"fine")
    src = Hostile(site.backend.address)
    dst = str(tmp_path / "dst" / "src")
    tasks = list(expand([Root(src, src.stat("/src"), LocalBackend(), dst, "src")]))
    skipped = {t.src: t for t in tasks if t.state == "skipped"}
    assert set(skipped) == {f"/src/{n}" for n in HOSTILE_NAMES}
    for t in skipped.values():
        assert t.skip_reason is SkipReason.UNSAFE_NAME and t.error, t
        assert t.dst == dst  # the folder it would have gone to, never a path built from the name
    (fine,) = [t for t in tasks if t.state == "queued" and t.kind == "file"]
    assert fine.dst == os.path.join(dst, "fine.txt")


def test_case_collisions_on_a_case_insensitive_destination(tmp_path: Path) -> None:
    from dataclasses import replace

    from ferry.backends.base import Entry
    from ferry.transfers.planner import Root, expand

    src = tmp_path / "src"
    src.mkdir()
    for name in ("README", "readme", "Readme.md", "Ünï", "ünï", "other"):
        (src / name).write_bytes(name.encode())
    local = LocalBackend()
    insensitive = LocalBackend()
    insensitive.capabilities = replace(LocalBackend.capabilities, case_insensitive=True)
    entry: Entry = local.stat(str(src))
    for dst_backend, expect in ((local, set()), (insensitive, {"src/readme", "src/ünï"})):
        root = Root(local, entry, dst_backend, str(tmp_path / "dst" / "src"), "src")
        tasks = list(expand([root]))
        refused = {t.rel for t in tasks if t.state == "skipped"}
        assert refused == expect
        for t in tasks:
            if t.rel in expect:
                assert t.skip_reason is SkipReason.UNREPRESENTABLE and "case" in (t.error or "")


# ---- the confined view itself ----


@pytest.fixture(params=["openat2", "walk"])
def confined(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, outside: Path
) -> tuple[ConfinedLocal, Path]:
    """The view, resolving folders with Linux's openat2 where it has it, and folder by folder
    with O_NOFOLLOW as on older kernels and macOS."""
    from ferry.backends import local

    if request.param == "walk":
        monkeypatch.setattr(local, "_openat2", None)
    elif local._openat2 is None:
        pytest.skip("no openat2 on this system")
    root = tmp_path / "dst"
    (root / "real").mkdir(parents=True)
    os.symlink(outside, root / "lnk")  # a link below the root, pointing outside
    view = LocalBackend().confined([str(root)])
    assert isinstance(view, ConfinedLocal)
    return view, root


def _link_refused(call: Any, link: Path) -> None:
    with pytest.raises(LinkInTheWay) as info:
        call()
    assert info.value.link == str(link)


def test_confined_view_refuses_every_write_through_a_link(confined: tuple[ConfinedLocal, Path]) -> None:
    view, root = confined
    lnk = root / "lnk"
    _link_refused(lambda: view.open_write(str(lnk / "f.txt"), size=1, token="1"), lnk)
    _link_refused(lambda: view.open_write(str(lnk / "sub" / "deep.txt"), size=1, token="1"), lnk)
    _link_refused(lambda: view.mkdir(str(lnk / "new" / "deeper")), lnk)
    _link_refused(lambda: view.mkdir(str(lnk)), lnk)
    _link_refused(lambda: view.symlink("/etc/passwd", str(lnk / "l")), lnk)
    _link_refused(lambda: view.remove(str(lnk / "f.txt")), lnk)
    _link_refused(lambda: view.rename(str(lnk / "f.txt"), str(root / "real" / "g.txt")), lnk)
    _link_refused(lambda: view.rename(str(root / "real"), str(lnk / "real")), lnk)
    when = view.stat(str(root)).mtime
    assert when is not None
    _link_refused(lambda: view.set_mtime(str(lnk / "f.txt"), when), lnk)
    _link_refused(lambda: view.stat(str(lnk / "f.txt")), lnk)
    _link_refused(lambda: view.open_read(str(lnk / "f.txt")), lnk)
    # Nothing is there, as far as the destination goes: the write that follows says why.
    assert view.stat_or_none(str(lnk / "f.txt")) is None
    assert view.stat_or_none(str(lnk / "sub" / "deep.txt")) is None
    (root / "real" / "here.txt").write_bytes(b"here")
    found = view.stat_or_none(str(root / "real" / "here.txt"))
    assert found is not None and found.kind is Kind.FILE and found.size == 4
    assert view.stat_or_none(str(root / "real" / "missing.txt")) is None
    # The link itself is an entry like any other, and removing it removes the link only.
    e = view.stat(str(lnk))
    assert e.kind is Kind.LINK and e.link_target == str(root.parent / "outside")
    view.remove(str(lnk))
    assert not lnk.exists() and (root.parent / "outside" / "f.txt").exists()


def test_confined_writer_commits_and_resumes_only_inside(confined: tuple[ConfinedLocal, Path]) -> None:
    view, root = confined
    outside = root.parent / "outside"
    final = root / "real" / "f.txt"
    # A link planted under the partial's name is removed, not written through.
    os.symlink(outside / "f.txt", root / "real" / ".f.txt.7.ferry-part")
    w = view.open_write(str(final), size=5, token="7", resume=True)
    assert w.offset == 0
    w.write(b"hello")
    w.finish()
    # A link at the final name is replaced itself under overwrite; kept (AlreadyExists) otherwise.
    os.symlink(outside / "f.txt", final)
    with pytest.raises(AlreadyExists):
        w.commit(overwrite=False)
    w.commit(overwrite=True)
    assert not final.is_symlink() and final.read_bytes() == b"hello"
    # A hard link planted as a partial is not continued either.
    os.link(outside / "sub" / "deep.txt", root / "real" / ".g.txt.8.ferry-part")
    w = view.open_write(str(root / "real" / "g.txt"), size=3, token="8", resume=True)
    assert w.offset == 0
    w.abort()
    assert not (root / "real" / ".g.txt.8.ferry-part").exists()
    # Folders are made below the root without following anything; the root's own path is used.
    view.mkdir(str(root / "real" / "a" / "b"))
    w = view.open_write(str(root / "real" / "a" / "b" / "c.txt"), size=1, token="9")
    w.write(b"c")
    w.commit(overwrite=False)
    assert (root / "real" / "a" / "b" / "c.txt").read_bytes() == b"c"
    with pytest.raises(UnsafeName):
        view.open_write(str(root / "real" / ".." / ".." / "outside" / "x"), size=1, token="1")


def test_other_backends_are_their_own_view(site: MemSite) -> None:
    backend = site.backend
    assert backend.confined(["/dst"]) is backend


# ---- downloads in batches (SFTP's tar streams) write through the same confined view ----


@pytest.fixture
def batching(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    from ferry.backends.memory import MemoryBackend
    from test_batches import _Batches

    for name in ("batch_usable", "write_batch", "commit_batch", "read_batch"):
        monkeypatch.setattr(MemoryBackend, name, getattr(_Batches, name), raising=False)
    _Batches.calls = []
    return _Batches.calls


@pytest.mark.parametrize("policy", ["skip", "overwrite"])
def test_batched_downloads_never_write_through_a_link(
    batching: list[int], site: MemSite, store: Store, tmp_path: Path, outside: Path, policy: str
) -> None:
    from ferry.transfers.scheduler import RunConfig, Runner

    for i in range(40):
        site.put(f"/src/d/f{i:02d}.txt", f"file {i}\n".encode())
    site.put("/src/d/f.txt", b"would replace the sentinel\n")
    site.put("/src/top.txt", b"top\n")
    dst = tmp_path / "dst"
    (dst / "src").mkdir(parents=True)
    os.symlink(outside, dst / "src" / "d")
    job = mem_job(store, [site.url("/src")], f"{dst}/", recursive=True, on_conflict=policy)
    assert Runner(store, RunConfig(parallel=2, job_ids=[job])).run().jobs == {job: "done"}
    assert batching and max(batching) > 1  # the files went in batches
    tasks = {t.rel: t for t in store.tasks(job, kinds=("file",))}
    inner = [t for rel, t in tasks.items() if rel.startswith("src/d/")]
    assert len(inner) == 41 and tasks["src/top.txt"].state == "done"
    if policy == "skip":
        assert os.readlink(dst / "src" / "d") == str(outside)
        assert all(t.state == "skipped" and t.skip_reason is SkipReason.POLICY for t in inner), inner
    else:
        assert not (dst / "src" / "d").is_symlink()
        assert all(t.state == "done" for t in inner), inner
        assert (dst / "src" / "d" / "f.txt").read_bytes() == b"would replace the sentinel\n"
    assert partials(dst) == []
