"""Nothing changes silently (issue 18), local disk to local disk, through the real ``ferry`` command:
permission bits (setgid folders included) kept by default and masked by the umask on request,
modification times to the nanosecond, sparse files, hard links, extended attributes and ACLs."""

from __future__ import annotations

import os
import stat
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.transfers.options import JobOptions
from ferry.transfers.store import Store
from helpers import Ferry, file_events

# Not a whole microsecond: a time cut to microseconds (a float or a datetime on the way) differs.
T_NS = 1_600_000_000_123_456_789


@pytest.fixture
def umask_027() -> Iterator[None]:
    """The umask ``ferry`` (a child process) inherits."""
    old = os.umask(0o027)
    yield
    os.umask(old)


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def _tree(src: Path) -> None:
    (src / "shared").mkdir(parents=True)
    (src / "private").mkdir()
    (src / "private.key").write_bytes(b"secret\n")
    (src / "run.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    (src / "shared" / "notes.txt").write_bytes(b"notes\n")
    (src / "setuid-tool").write_bytes(b"tool\n")
    os.chmod(src / "private.key", 0o600)
    os.chmod(src / "run.sh", 0o755)
    os.chmod(src / "setuid-tool", 0o4750)
    os.chmod(src / "shared" / "notes.txt", 0o664)
    os.chmod(src / "shared", 0o2775)  # setgid: new files take the folder's group
    os.chmod(src / "private", 0o700)


def test_permission_bits_are_kept_by_default(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src)
    ferry.ok("cp", "-r", src, dst)
    assert _mode(dst / "private.key") == 0o600
    assert _mode(dst / "run.sh") == 0o755
    assert _mode(dst / "setuid-tool") == 0o4750
    assert _mode(dst / "shared" / "notes.txt") == 0o664
    assert _mode(dst / "shared") == 0o2775
    assert _mode(dst / "private") == 0o700


def test_no_preserve_permissions_masks_the_source_bits_by_the_umask(
    ferry: Ferry, tmp_path: Path, umask_027: None
) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src)
    ferry.ok("cp", "-r", "--no-preserve-permissions", src, dst)
    assert _mode(dst / "private.key") == 0o600
    assert _mode(dst / "run.sh") == 0o750  # execute bits kept, as cp without -p; the umask applied
    assert _mode(dst / "setuid-tool") == 0o750  # no setuid
    assert _mode(dst / "shared" / "notes.txt") == 0o640


def test_a_folder_without_owner_write_is_reported(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "ro").mkdir(parents=True)
    (src / "ro" / "f").write_bytes(b"f")
    os.chmod(src / "ro", 0o555)
    try:
        res = ferry.ok("cp", "-r", "--json", src, dst)
    finally:
        os.chmod(src / "ro", 0o755)
    assert _mode(dst / "ro") == 0o755
    assert (dst / "ro" / "f").read_bytes() == b"f"
    assert "0555 kept as 0755" in res.stdout


def test_modification_times_keep_nanoseconds(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    (src / "folder").mkdir()
    (src / "folder" / "inside.txt").write_bytes(b"in")
    for name in ("a.bin", "b.bin"):
        (src / name).write_bytes(os.urandom(1000))
        os.utime(src / name, ns=(T_NS, T_NS))
    os.utime(src / "folder", ns=(T_NS, T_NS))
    ferry.ok("cp", "-r", src, dst)
    assert os.stat(dst / "folder").st_mtime_ns == T_NS
    ferry.ok("cp", "--verify", "none", src / "a.bin", tmp_path / "kernel-copied.bin")  # copy_file_range
    for p in (dst / "a.bin", dst / "b.bin", tmp_path / "kernel-copied.bin"):
        assert os.stat(p).st_mtime_ns == T_NS, p
    # A second run finds them identical (no rewrite because of a rounding difference).
    res = ferry.ok("cp", "--json", src / "a.bin", dst / "a.bin")
    assert file_events(res.stdout)["a.bin"]["skip_reason"] == "identical"


def _allocated(p: Path) -> int:
    return os.stat(p).st_blocks * 512


@pytest.mark.parametrize("verify", ["sha256", "none"])
def test_sparse_files_stay_sparse(ferry: Ferry, tmp_path: Path, verify: str) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    size = 64 << 20
    sparse = src / "disk.img"
    with open(sparse, "wb") as f:
        f.truncate(size)
        for at in (0, 5_000_000, 40 << 20, size - 10):
            f.seek(at)
            f.write(b"data!")
    before = sparse.read_bytes()
    assert _allocated(sparse) < (1 << 20), "the file system here makes no holes"
    ferry.ok("cp", "-r", "--verify", verify, src, dst)
    assert os.path.getsize(dst / "disk.img") == size
    assert (dst / "disk.img").read_bytes() == before
    assert _allocated(dst / "disk.img") < (1 << 20)


def test_a_file_ending_in_a_hole_keeps_its_size(ferry: Ferry, tmp_path: Path) -> None:
    src = tmp_path / "tail.img"
    with open(src, "wb") as f:
        f.write(b"head")
        f.truncate(10 << 20)
    ferry.ok("cp", src, tmp_path / "copy.img")
    assert os.path.getsize(tmp_path / "copy.img") == 10 << 20
    assert (tmp_path / "copy.img").read_bytes() == src.read_bytes()
    assert _allocated(tmp_path / "copy.img") < (1 << 20)


def test_hard_links_inside_one_job_stay_links(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "a" / "b").mkdir(parents=True)
    (src / "one.dat").write_bytes(os.urandom(200_000))
    os.link(src / "one.dat", src / "a" / "one-again.dat")
    os.link(src / "one.dat", src / "a" / "b" / "one-thrice.dat")
    (src / "two.txt").write_bytes(b"two")
    os.link(src / "two.txt", src / "two-again.txt")
    (src / "single.txt").write_bytes(b"single")
    res = ferry.ok("cp", "-r", "--json", "--parallel", "4", src, dst)
    one = os.stat(dst / "one.dat")
    assert one.st_nlink == 3
    assert os.stat(dst / "a" / "one-again.dat").st_ino == one.st_ino
    assert os.stat(dst / "a" / "b" / "one-thrice.dat").st_ino == one.st_ino
    assert os.stat(dst / "two-again.txt").st_ino == os.stat(dst / "two.txt").st_ino
    assert os.stat(dst / "single.txt").st_nlink == 1
    assert (dst / "a" / "b" / "one-thrice.dat").read_bytes() == (src / "one.dat").read_bytes()
    events = file_events(res.stdout)
    linked = [p for p, e in events.items() if "hard link to" in e["verified"]]
    assert len(linked) == 3, events
    assert all(e["state"] == "done" for e in events.values())


def test_a_hard_link_copied_in_a_later_run_of_the_job_is_still_a_link(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    (src / "a.dat").write_bytes(os.urandom(50_000))
    os.link(src / "a.dat", src / "b.dat")
    (dst / "src").mkdir(parents=True)
    (dst / "src" / "b.dat").write_bytes(b"in the way")  # differs, and no one to ask: b fails this run
    ferry.ok("queue", "add", "-r", src, f"{dst}/")
    res = ferry("queue", "run", "--json")
    assert res.returncode == 1, res
    assert os.stat(dst / "src" / "a.dat").st_nlink == 1
    (dst / "src" / "b.dat").unlink()
    ferry.ok("queue", "retry", "1")
    res = ferry.ok("queue", "run", "--json")
    assert os.stat(dst / "src" / "b.dat").st_ino == os.stat(dst / "src" / "a.dat").st_ino
    assert "hard link to" in file_events(res.stdout)["src/b.dat"]["verified"]


def _acl(*entries: tuple[int, int, int]) -> bytes:
    """A POSIX ACL as the kernel's ``system.posix_acl_access`` xattr holds it."""
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, who) for tag, perm, who in entries)


_ANY = 0xFFFFFFFF
# user::rw- user:1234:rw- group::r-- mask::rw- other::r--
ACL = _acl((0x01, 6, _ANY), (0x02, 6, 1234), (0x04, 4, _ANY), (0x10, 6, _ANY), (0x20, 4, _ANY))


def _xattrs_usable(folder: Path) -> bool:
    probe = folder / ".probe"
    probe.write_bytes(b"")
    try:
        os.setxattr(probe, "user.ferry-probe", b"1")
        os.setxattr(probe, "system.posix_acl_access", ACL)
    except OSError:
        return False
    finally:
        probe.unlink()
    return True


def test_xattrs_copies_extended_attributes_and_acls(ferry: Ferry, tmp_path: Path) -> None:
    if not _xattrs_usable(tmp_path):
        pytest.skip("this file system keeps no user xattrs or POSIX ACLs (CI's ext4 and tmpfs do)")
    src, dst, plain = tmp_path / "src", tmp_path / "dst", tmp_path / "plain"
    (src / "folder").mkdir(parents=True)
    f = src / "folder" / "data.csv"
    f.write_bytes(b"1,2\n")
    os.setxattr(f, "user.origin", b"instrument 7")
    os.setxattr(f, "system.posix_acl_access", ACL)
    os.setxattr(src / "folder", "user.project", b"alpha")
    ferry.ok("cp", "-r", "--xattrs", src, dst)
    got = dst / "folder" / "data.csv"
    assert os.getxattr(got, "user.origin") == b"instrument 7"
    assert os.getxattr(got, "system.posix_acl_access") == os.getxattr(f, "system.posix_acl_access")
    assert os.getxattr(dst / "folder", "user.project") == b"alpha"
    # Without --xattrs nothing of the kind is copied (as cp -p).
    ferry.ok("cp", "-r", src, plain)
    assert "user.origin" not in os.listxattr(plain / "folder" / "data.csv")


def test_xattrs_refused_by_the_destination_are_reported(ferry: Ferry, tmp_path: Path) -> None:
    if not _xattrs_usable(tmp_path):
        pytest.skip("this file system keeps no user xattrs (CI's ext4 and tmpfs do)")
    if os.geteuid() != 0:
        pytest.skip("mounting a ramfs (a file system without xattrs) needs root (CI runs as root)")
    src, ram = tmp_path / "src", tmp_path / "ram"
    src.mkdir()
    ram.mkdir()
    (src / "f.txt").write_bytes(b"f")
    os.setxattr(src / "f.txt", "user.origin", b"instrument 7")
    subprocess.run(["mount", "-t", "ramfs", "ramfs", str(ram)], check=True)
    try:
        res = ferry.ok("cp", "-r", "--xattrs", "--json", src, ram / "dst")
        assert (ram / "dst" / "f.txt").read_bytes() == b"f"
    finally:
        subprocess.run(["umount", str(ram)], check=True)
    event = file_events(res.stdout)["dst/f.txt"]
    assert "extended attributes not kept" in event["verified"] and "user.origin" in event["verified"], event
    assert event["not_kept"] == ["xattrs"]
    # On a terminal (or its log) it is said as it happens, not only in the record.
    subprocess.run(["mount", "-t", "ramfs", "ramfs", str(ram)], check=True)
    try:
        res = ferry.ok("cp", "-r", "--xattrs", src, ram / "dst")
    finally:
        subprocess.run(["umount", str(ram)], check=True)
    assert "copied, not all kept: dst/f.txt: " in res.stderr and "user.origin" in res.stderr, res.stderr


def test_queue_add_and_mv_keep_the_new_options(ferry: Ferry, tmp_path: Path, store: Store) -> None:
    (tmp_path / "f.txt").write_bytes(b"f")
    ferry.ok("queue", "add", "--no-preserve-permissions", "--xattrs", tmp_path / "f.txt", tmp_path / "out")
    ferry.ok("queue", "add", tmp_path / "f.txt", tmp_path / "out2")
    jobs = store.jobs()
    options = sorted(((j.options.preserve_permissions, j.options.xattrs) for j in jobs), key=str)
    assert options == [(False, True), (True, False)]
    assert JobOptions.from_json(JobOptions(preserve_permissions=False).to_json()).preserve_permissions is False
    (tmp_path / "m.sh").write_bytes(b"#!/bin/sh\n")
    os.chmod(tmp_path / "m.sh", 0o750)
    ferry.ok("mv", tmp_path / "m.sh", tmp_path / "moved.sh")
    assert _mode(tmp_path / "moved.sh") == 0o750
    assert not (tmp_path / "m.sh").exists()
