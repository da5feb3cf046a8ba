"""Uploads to a real OpenSSH sshd never write through a symbolic link inside the remote
destination (issue 18, QA finding F1): a link on the server where a folder of the copy must go
is a conflict for the policy, as on a local disk. Kept (skip, rename, ask): its files are skipped
and counted, nothing lands where it points. Replaced (overwrite, newer, different, resume): the
link itself goes and a real folder takes its place; what it pointed to is never touched. The
same through tar batches (many small files) and for ``ferry mv``, which keeps a source whose
copy was skipped. A sentinel folder outside the destination, writable by the SSH user, must stay
exactly as it was."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.backends.base import temp_name
from ferry.core.outcomes import SkipReason
from ferry.transfers.store import Task
from helpers import describe, file_events, partials
from sftp.conformance_site import sftp_backend
from sftp.test_cli_sftp import ferry_as, url, user_home
from sshd import SshServer
from test_hostile_trees import queue_tasks, tree_state

POLICIES = ["skip", "rename", "newer", "ask", "overwrite", "different", "resume"]
REPLACING = {"overwrite", "newer", "different", "resume"}  # decide to replace a link where a folder must be
UP = "remote sha256 of the tar-extracted file"  # a file's record after a tar batch up


@pytest.fixture
def outside(sshd: SshServer) -> Iterator[Path]:
    """A folder on the server, outside the destination, that the SSH user may write: the test
    fails if anything in it changed."""
    root = sshd.mkdir("outside-")
    (root / "sub").mkdir()
    (root / "f.txt").write_bytes(b"precious, outside the destination\n")
    (root / "sub" / "deep.txt").write_bytes(b"also precious\n")
    os.utime(root / "f.txt", ns=(10**18, 10**18))
    sshd.chown(root)
    before = tree_state(root)
    yield root
    assert tree_state(root) == before, "something outside the destination changed"


def planted(sshd: SshServer, outside: Path) -> Path:
    """The QA repro's server side: ``dst/d/link -> outside``."""
    dst = sshd.mkdir("dst-")
    (dst / "d").mkdir()
    os.symlink(outside, dst / "d" / "link")
    os.utime(dst / "d" / "link", (1e9, 1e9), follow_symlinks=False)  # older than the source: newer replaces it
    sshd.chown(dst)
    return dst


def local_tree(root: Path, small: int = 0) -> Path:
    """The local side: ``d/link`` is a real folder (with names that also exist outside)."""
    (root / "d" / "link" / "sub").mkdir(parents=True)
    (root / "d" / "link" / "new.txt").write_bytes(b"new\n")
    (root / "d" / "link" / "f.txt").write_bytes(b"from the source\n")
    (root / "d" / "link" / "sub" / "deep.txt").write_bytes(b"deep from the source\n")
    for i in range(small):
        (root / "d" / "link" / f"s{i:03d}.txt").write_bytes(b"small %d\n" % i)
        (root / "d" / "real").mkdir(exist_ok=True)
        (root / "d" / "real" / f"r{i:03d}.txt").write_bytes(b"real %d\n" % i)
    return root / "d"


def check_policy(policy: str, res_code: int, dst: Path, outside: Path, tasks: dict[str, Task], stdout: str) -> None:
    inner = {rel: t for rel, t in tasks.items() if rel.startswith("d/link/")}
    assert "d/link/new.txt" in inner and "d/link/sub/deep.txt" in inner, tasks
    link = dst / "d" / "link"
    if policy in REPLACING:
        # The link itself was replaced by a real folder, and the copy went into it.
        assert res_code == 0
        assert link.is_dir() and not link.is_symlink()
        assert (link / "new.txt").read_bytes() == b"new\n"
        assert (link / "f.txt").read_bytes() == b"from the source\n"
        assert (link / "sub" / "deep.txt").read_bytes() == b"deep from the source\n"
        assert all(t.state == "done" for t in inner.values()), inner
    else:
        assert os.readlink(link) == str(outside)
        folder = tasks["d/link"]
        if policy == "ask":  # no terminal to ask: fails as any conflict does
            assert res_code != 0
            assert folder.state == "failed" and folder.error_kind == "conflict", folder
            assert {t.state for t in inner.values()} <= {"failed"}, inner
        else:
            assert res_code == 0
            assert folder.state == "skipped" and folder.skip_reason is SkipReason.POLICY
            assert "symbolic link" in (folder.verified or ""), folder
            for t in inner.values():
                assert t.state == "skipped" and t.skip_reason is SkipReason.POLICY, t
        for e in file_events(stdout).values():
            assert e["state"] != "done" or not e["path"].startswith("d/link/"), e
    assert partials(dst) == [] and partials(outside) == []


@pytest.mark.parametrize("policy", POLICIES)
def test_upload_never_writes_through_a_remote_link(sshd: SshServer, tmp_path: Path, outside: Path, policy: str) -> None:
    ferry = ferry_as(tmp_path, user_home(sshd, tmp_path))
    dst = planted(sshd, outside)
    src = local_tree(tmp_path / "src")
    args = ["--on-conflict", policy] if policy != "ask" else []
    res = ferry("cp", "-r", "--json", *args, src, url(sshd, f"{dst}/"))
    check_policy(policy, res.returncode, dst, outside, queue_tasks(ferry), res.stdout)
    if policy not in REPLACING:
        assert res.returncode == (1 if policy == "ask" else 0), describe(res)


@pytest.mark.parametrize("policy", ["skip", "overwrite"])
def test_tar_batches_never_extract_through_a_remote_link(
    sshd: SshServer, tmp_path: Path, outside: Path, policy: str
) -> None:
    ferry = ferry_as(tmp_path, user_home(sshd, tmp_path))
    dst = planted(sshd, outside)
    src = local_tree(tmp_path / "src", small=60)
    res = ferry("cp", "-r", "--json", "--on-conflict", policy, src, url(sshd, f"{dst}/"))
    assert res.returncode == 0, describe(res)
    tasks = queue_tasks(ferry)
    check_policy(policy, res.returncode, dst, outside, tasks, res.stdout)
    # The real folder's small files did go in tar batches (so the link's would have too).
    real = [t for rel, t in tasks.items() if rel.startswith("d/real/")]
    assert len(real) == 60 and all(t.state == "done" for t in real), real
    assert sum(UP in (t.verified or "") for t in real) >= 30, [t.verified for t in real]
    if policy == "overwrite":
        assert (dst / "d" / "link" / "s059.txt").read_bytes() == b"small 59\n"


def test_mv_keeps_the_source_whose_copy_was_skipped_at_a_remote_link(
    sshd: SshServer, tmp_path: Path, outside: Path
) -> None:
    ferry = ferry_as(tmp_path, user_home(sshd, tmp_path))
    dst = planted(sshd, outside)
    src = local_tree(tmp_path / "src")
    (src / "top.txt").write_bytes(b"top\n")
    res = ferry("mv", "-r", "--on-conflict", "skip", src, url(sshd, f"{dst}/"))
    # Not a whole move: the exit code says so, and the summary says what was kept.
    assert res.returncode == 1, describe(res)
    assert "moved 1 file(s); kept 3 source file(s): 3 not copied" in res.stderr, describe(res)
    assert os.readlink(dst / "d" / "link") == str(outside)
    # Only the file that was copied is gone from the source; the skipped ones are all kept.
    assert (dst / "d" / "top.txt").read_bytes() == b"top\n" and not (src / "top.txt").exists()
    assert (src / "link" / "new.txt").read_bytes() == b"new\n"
    assert (src / "link" / "sub" / "deep.txt").read_bytes() == b"deep from the source\n"


@pytest.mark.parametrize("policy", POLICIES)
def test_a_remote_link_in_place_of_a_file_is_replaced_itself_never_its_target(
    sshd: SshServer, tmp_path: Path, outside: Path, policy: str
) -> None:
    ferry = ferry_as(tmp_path, user_home(sshd, tmp_path))
    dst = sshd.mkdir("dst-")
    (dst / "src").mkdir()
    os.symlink(outside / "f.txt", dst / "src" / "f.txt")
    os.utime(dst / "src" / "f.txt", (1e9, 1e9), follow_symlinks=False)
    sshd.chown(dst)
    src = tmp_path / "src"
    src.mkdir()
    (src / "f.txt").write_bytes(b"from the source, longer than what is outside the destination\n")
    args = ["--on-conflict", policy] if policy != "ask" else []
    res = ferry("cp", "-r", "--json", *args, src, url(sshd, f"{dst}/"))
    task = queue_tasks(ferry)["src/f.txt"]
    link = dst / "src" / "f.txt"
    if policy in REPLACING:
        assert res.returncode == 0, describe(res)
        assert not link.is_symlink() and link.read_bytes() == (src / "f.txt").read_bytes()
    elif policy == "rename":  # the copy goes beside it
        assert res.returncode == 0, describe(res)
        assert os.readlink(link) == str(outside / "f.txt") and task.state == "done"
    else:
        assert os.readlink(link) == str(outside / "f.txt")
        assert res.returncode == (1 if policy == "ask" else 0), describe(res)
        assert task.state == ("failed" if policy == "ask" else "skipped"), task
    assert partials(dst) == [] and partials(outside) == []


def test_a_link_planted_at_a_partial_name_is_never_written_through(
    sshd: SshServer, tmp_path: Path, outside: Path
) -> None:
    """A partial file's name is predictable (``.NAME.TASK.ferry-part``): it is created with
    CREAT|EXCL, so a link standing there is removed (REMOVE never follows), not opened."""
    ferry = ferry_as(tmp_path, user_home(sshd, tmp_path))
    dst = sshd.mkdir("dst-")
    (dst / "src").mkdir()
    for name in ("small.txt", "big.bin"):
        for task in range(1, 6):
            os.symlink(outside / "f.txt", dst / "src" / f".{name}.{task}.ferry-part")
    sshd.chown(dst)
    src = tmp_path / "src"
    src.mkdir()
    (src / "small.txt").write_bytes(b"small\n")  # the small-file writer
    (src / "big.bin").write_bytes(os.urandom(300_000))  # the streaming writer
    res = ferry("cp", "-r", src, url(sshd, f"{dst}/"))
    assert res.returncode == 0, describe(res)
    for name in ("small.txt", "big.bin"):
        landed = dst / "src" / name
        assert not landed.is_symlink() and landed.read_bytes() == (src / name).read_bytes()


def test_a_resumed_partial_that_is_a_link_is_replaced_not_followed(
    sshd: SshServer, tmp_path: Path, outside: Path
) -> None:
    """Resuming opens the partial as it stands (no EXCL): the confined view removes a link at
    its name first, and the file is written anew beside the link's old place."""
    b = sftp_backend(sshd, sshd.ssh_config(tmp_path / "ssh_config", "resumelink"), "resumelink")
    dst = sshd.mkdir("dst-")
    (dst / "d").mkdir()
    partial = dst / "d" / temp_name("f.txt", "7")
    os.symlink(outside / "f.txt", partial)
    sshd.chown(dst)
    view = b.confined([str(dst)])
    data = os.urandom(300_000)  # above the small-file writer, which never resumes
    w = view.open_write(f"{dst}/d/f.txt", size=len(data), token="7", resume=True)
    assert w.offset == 0
    w.write(data)
    w.finish()
    w.commit(overwrite=False)
    assert (dst / "d" / "f.txt").read_bytes() == data and not (dst / "d" / "f.txt").is_symlink()
    assert not partial.exists() and not partial.is_symlink()


@pytest.mark.parametrize("slash", ["/", ""])
def test_a_remote_destination_the_user_named_that_is_a_link_is_followed(
    sshd: SshServer, tmp_path: Path, slash: str
) -> None:
    """Links at or above the root are the user's choice, as locally: ``sftp://host/scratch``
    with ``scratch -> real`` (relative and absolute targets) copies into ``real``."""
    ferry = ferry_as(tmp_path, user_home(sshd, tmp_path))
    base = sshd.mkdir("named-")
    (base / "real").mkdir()
    os.symlink("real", base / "scratch")  # relative
    os.symlink(base / "scratch", base / "hop")  # absolute, through a second link
    sshd.chown(base)
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.txt").write_bytes(b"a\n")
    for named in ("scratch", "hop"):
        res = ferry("cp", "-r", "--on-conflict", "overwrite", src, url(sshd, f"{base}/{named}{slash}"))
        assert res.returncode == 0, describe(res)
        assert (base / "real" / "src" / "sub" / "a.txt").read_bytes() == b"a\n"
        assert os.readlink(base / "scratch") == "real" and (base / "hop").is_symlink()
        shutil.rmtree(base / "real" / "src")


def test_a_fresh_nested_destination_is_made_below_a_named_link(sshd: SshServer, tmp_path: Path) -> None:
    """The root the user named may not exist yet (made as the backend makes it, links above it
    followed); below it every folder is made real."""
    ferry = ferry_as(tmp_path, user_home(sshd, tmp_path))
    base = sshd.mkdir("fresh-")
    (base / "real").mkdir()
    os.symlink(base / "real", base / "scratch")
    sshd.chown(base)
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "c.txt").write_bytes(b"c\n")
    res = ferry("cp", "-r", src, url(sshd, f"{base}/scratch/new/deeper/"))
    assert res.returncode == 0, describe(res)
    assert (base / "real" / "new" / "deeper" / "src" / "a" / "b" / "c.txt").read_bytes() == b"c\n"
