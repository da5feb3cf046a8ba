"""``ferry cp`` driven as a user would: a subprocess, no terminal, its own queue and config."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import blake3
import pytest

from helpers import (
    Ferry,
    describe,
    events,
    file_digests,
    file_events,
    partials,
    result_event,
    sha256_bytes,
    sha256_file,
    snapshot,
)

T_OLD = 978_340_800_123_456_000  # 2001-01-01 09:20:00.123456 UTC, in ns (whole microseconds)
T_OLDER = T_OLD - 86_400 * 10**9
T_NEW = T_OLD + 86_400 * 10**9

NEWLINE_NAME = "with\nnewline.txt"


def set_mtime(path: Path, ns: int) -> None:
    os.utime(path, ns=(ns, ns), follow_symlinks=False)


def make_tree(root: Path) -> dict[str, bytes]:
    """A small tree with nested folders, odd names and empty folders; returns file contents."""
    files = {
        "top.txt": b"top\n",
        "data/run 1/values.csv": b"1,2,3\n" * 5000,
        "data/run 1/empty.bin": b"",
        "data/naïve ünïcode — ☃ 日本.txt": "snow ☃".encode(),
        f"data/{NEWLINE_NAME}": b"a name with a newline in it",
        "data/deep/a/b/c/d.bin": os.urandom(300_000),
    }
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    (root / "data" / "empty").mkdir()
    (root / "data" / "deep" / "a" / "empty too").mkdir()
    return files


def test_cp_recursive_copies_and_verifies_every_file(ferry: Ferry, tmp_path: Path) -> None:
    src = tmp_path / "src"
    files = make_tree(src)
    res = ferry("cp", "-r", "--json", src, f"{tmp_path / 'dst'}/")
    assert res.returncode == 0, describe(res)

    evs = events(res.stdout)
    kinds = {e["event"] for e in evs}
    assert {"progress", "file", "job", "result"} <= kinds, kinds
    result = result_event(res.stdout)
    assert result["exit_code"] == 0 and result["state"] == "done"
    assert result["files_total"] == len(files) == result["files_done"]
    assert result["files_failed"] == 0
    assert result["bytes_done"] == result["bytes_total"] == sum(map(len, files.values()))
    job_states = [e["state"] for e in evs if e["event"] == "job"]
    assert job_states[0] == "running" and job_states[-1] == "done"

    fev = file_events(res.stdout)
    for rel, data in files.items():
        e = fev[f"src/{rel}"]
        assert e["state"] == "done", e
        assert e["verified"] == "sha256 match", e
        assert e["hash_algo"] == "sha256" and e["hash"] == sha256_bytes(data)
        assert (tmp_path / "dst" / "src" / rel).read_bytes() == data
    assert (tmp_path / "dst/src/data/empty").is_dir()
    assert (tmp_path / "dst/src/data/deep/a/empty too").is_dir()
    assert file_digests(tmp_path / "dst" / "src") == file_digests(src)
    assert partials(tmp_path / "dst") == []

    (job,) = ferry.jobs()
    assert job["state"] == "done" and job["files_done"] == len(files) and job["files_failed"] == 0


def test_cp_single_file_like_cp(ferry: Ferry, tmp_path: Path) -> None:
    f = tmp_path / "report.csv"
    f.write_bytes(b"a,b\n1,2\n")
    (tmp_path / "folder").mkdir()
    ferry.ok("cp", f, tmp_path / "renamed.csv")  # a new name
    ferry.ok("cp", f, tmp_path / "folder")  # into an existing folder
    ferry.ok("cp", f, f"{tmp_path / 'new-folder'}/")  # a trailing slash makes a folder
    for target in ("renamed.csv", "folder/report.csv", "new-folder/report.csv"):
        assert (tmp_path / target).read_bytes() == f.read_bytes(), target
    assert [j["state"] for j in ferry.jobs()] == ["done"] * 3


def test_folder_without_r_is_refused_and_nothing_created(ferry: Ferry, tmp_path: Path) -> None:
    make_tree(tmp_path / "src")
    res = ferry("cp", tmp_path / "src", tmp_path / "dst")
    assert res.returncode == 2, describe(res)
    assert "-r" in res.stderr and res.stderr.count("\n") == 1
    assert not (tmp_path / "dst").exists()
    assert ferry.jobs() == []


@pytest.mark.parametrize(
    ("verify", "parallel", "level"),
    [
        ("sha256", "1", "checksum"),
        ("blake3", "8", "checksum"),
        ("size", "3", "size"),
        ("none", "2", "none"),
    ],
)
def test_verify_modes_and_parallel(ferry: Ferry, tmp_path: Path, verify: str, parallel: str, level: str) -> None:
    src = tmp_path / "src"
    files = {f"f{i:02}/{i}.bin": os.urandom(1000 * i + 7) for i in range(20)}
    for rel, data in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    res = ferry("cp", "-r", "--json", "--verify", verify, "--parallel", parallel, src, f"{tmp_path / 'dst'}/")
    assert res.returncode == 0, describe(res)
    assert result_event(res.stdout)["files_done"] == len(files)
    fev = file_events(res.stdout)
    for rel, data in files.items():
        e = fev[f"src/{rel}"]
        assert e["state"] == "done" and e["level"] == level, e
        assert e["evidence"] == (["read-back"] if level == "checksum" else []), e
        if verify == "sha256":
            assert e["hash"] == sha256_bytes(data)
        elif verify == "blake3":
            assert e["hash"] == blake3.blake3(data).hexdigest()
        else:
            assert e["hash"] is None
        assert (tmp_path / "dst" / "src" / rel).read_bytes() == data


@pytest.mark.parametrize(
    "bad", [["--parallel", "0"], ["--verify", "md5"], ["--on-conflict", "clobber"], ["--bwlimit", "fast"]]
)
def test_bad_option_values_are_refused(ferry: Ferry, tmp_path: Path, bad: list[str]) -> None:
    (tmp_path / "a.txt").write_bytes(b"x")
    res = ferry("cp", *bad, tmp_path / "a.txt", tmp_path / "b.txt")
    assert res.returncode == 2, describe(res)
    assert not (tmp_path / "b.txt").exists()
    assert ferry.jobs() == []


# ---- conflicts ----


@pytest.fixture
def conflict(tmp_path: Path) -> tuple[Path, Path]:
    """src/a.txt (new content, T_OLD) and an existing dst/a.txt (other content, T_OLDER)."""
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    s, d = tmp_path / "src" / "a.txt", tmp_path / "dst" / "a.txt"
    s.write_bytes(b"source content, version 2\n")
    d.write_bytes(b"existing destination\n")
    set_mtime(s, T_OLD)
    set_mtime(d, T_OLDER)
    return s, d


def test_ask_without_terminal_fails_existing_files_clearly(
    ferry: Ferry, tmp_path: Path, conflict: tuple[Path, Path]
) -> None:
    s, d = conflict
    (tmp_path / "src" / "b.txt").write_bytes(b"new file")
    before = d.read_bytes()
    # Two files onto dst/ with the default policy (ask); one of them exists there already.
    res = ferry("cp", s, tmp_path / "src" / "b.txt", tmp_path / "dst")
    assert res.returncode == 1, describe(res)
    # One line for every file that differs, saying how to decide (not one line per file).
    assert "1 file(s) differ from what is already at the destination; choose with --on-conflict" in res.stderr
    assert not [line for line in res.stderr.splitlines() if line.startswith("failed:")], res.stderr
    assert d.read_bytes() == before  # untouched
    assert (tmp_path / "dst" / "b.txt").read_bytes() == b"new file"  # the others still copied
    assert ferry.jobs()[-1]["state"] == "failed"
    assert partials(tmp_path / "dst") == []


def test_on_conflict_skip_keeps_existing(ferry: Ferry, conflict: tuple[Path, Path]) -> None:
    s, d = conflict
    before = d.read_bytes()
    res = ferry("cp", "--json", "--on-conflict", "skip", s, d)
    assert res.returncode == 0, describe(res)
    (e,) = file_events(res.stdout).values()
    assert e["state"] == "skipped"
    assert d.read_bytes() == before
    assert d.stat().st_mtime_ns == T_OLDER


def test_on_conflict_overwrite_replaces(ferry: Ferry, conflict: tuple[Path, Path]) -> None:
    s, d = conflict
    ferry.ok("cp", "--on-conflict", "overwrite", s, d)
    assert d.read_bytes() == s.read_bytes()
    assert d.stat().st_mtime_ns == T_OLD


def test_on_conflict_rename_keeps_both(ferry: Ferry, tmp_path: Path, conflict: tuple[Path, Path]) -> None:
    s, d = conflict
    before = d.read_bytes()
    res = ferry("cp", "--json", "--on-conflict", "rename", s, d)
    assert res.returncode == 0, describe(res)
    renamed = tmp_path / "dst" / "a (1).txt"
    assert renamed.read_bytes() == s.read_bytes()
    assert d.read_bytes() == before
    (e,) = file_events(res.stdout).values()
    assert e["destination"] == str(renamed)
    ferry.ok("cp", "--on-conflict", "rename", s, d)
    assert (tmp_path / "dst" / "a (2).txt").read_bytes() == s.read_bytes()
    # A hidden file without an extension keeps its whole name as the stem.
    (tmp_path / "src" / ".profile").write_bytes(b"new")
    (tmp_path / "dst" / ".profile").write_bytes(b"old")
    ferry.ok("cp", "--on-conflict", "rename", tmp_path / "src" / ".profile", tmp_path / "dst")
    assert (tmp_path / "dst" / ".profile (1)").read_bytes() == b"new"
    assert sorted(p.name for p in (tmp_path / "dst").iterdir()) == [
        ".profile",
        ".profile (1)",
        "a (1).txt",
        "a (2).txt",
        "a.txt",
    ]


def test_on_conflict_newer(ferry: Ferry, conflict: tuple[Path, Path]) -> None:
    s, d = conflict
    before = d.read_bytes()
    set_mtime(d, T_NEW)  # existing is newer than the source: kept
    ferry.ok("cp", "--on-conflict", "newer", s, d)
    assert d.read_bytes() == before
    set_mtime(d, T_OLDER)  # existing is older: replaced
    ferry.ok("cp", "--on-conflict", "newer", s, d)
    assert d.read_bytes() == s.read_bytes()
    assert d.stat().st_mtime_ns == T_OLD


def test_on_conflict_different_compares_size_and_mtime(ferry: Ferry, conflict: tuple[Path, Path]) -> None:
    s, d = conflict
    # Same size and mtime: taken as the same file (content is not compared), so it is kept.
    same_size = b"X" * len(s.read_bytes())
    d.write_bytes(same_size)
    set_mtime(d, T_OLD)
    ferry.ok("cp", "--on-conflict", "different", s, d)
    assert d.read_bytes() == same_size
    # Same size, different mtime: replaced.
    set_mtime(d, T_NEW)
    ferry.ok("cp", "--on-conflict", "different", s, d)
    assert d.read_bytes() == s.read_bytes()
    # Same mtime, different size: replaced.
    d.write_bytes(b"short")
    set_mtime(d, T_OLD)
    ferry.ok("cp", "--on-conflict", "different", s, d)
    assert d.read_bytes() == s.read_bytes()


def test_on_conflict_resume_continues_a_shorter_file(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = tmp_path / "src.bin", tmp_path / "dst.bin"
    data = os.urandom(2 << 20)
    src.write_bytes(data)
    dst.write_bytes(data[: (7 << 20) // 4])  # 1.75 MiB already there
    inode = dst.stat().st_ino
    # At 256 KiB/s the missing 256 KiB take about a second; copying all 2 MiB again would take ~8.
    res = ferry("cp", "--json", "--on-conflict", "resume", "--bwlimit", "256K", src, dst)
    assert res.returncode == 0, describe(res)
    assert dst.read_bytes() == data
    assert dst.stat().st_ino == inode  # the existing file was continued, not replaced
    assert result_event(res.stdout)["elapsed"] < 4.0
    (e,) = file_events(res.stdout).values()
    assert e["verified"] == "sha256 match" and e["hash"] == sha256_bytes(data)
    assert partials(tmp_path) == []


def test_on_conflict_resume_verifies_the_whole_file(ferry: Ferry, tmp_path: Path) -> None:
    """A shorter existing file whose bytes are not the source's prefix must not survive."""
    src, dst = tmp_path / "src.bin", tmp_path / "dst.bin"
    data = os.urandom(600_000)
    src.write_bytes(data)
    dst.write_bytes(b"\0" * 100_000)
    res = ferry("cp", "--json", "--on-conflict", "resume", src, dst)
    assert res.returncode == 0, describe(res)
    assert dst.read_bytes() == data
    assert partials(tmp_path) == []


def test_on_conflict_resume_with_equal_or_longer_file(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = tmp_path / "src.bin", tmp_path / "dst.bin"
    src.write_bytes(b"0123456789")
    set_mtime(src, T_OLD)
    dst.write_bytes(b"abcdefghij")  # same size and time: already there, kept
    set_mtime(dst, T_OLD)
    ferry.ok("cp", "--on-conflict", "resume", src, dst)
    assert dst.read_bytes() == b"abcdefghij"
    dst.write_bytes(b"much longer than the source")  # longer: cannot be a prefix, replaced
    ferry.ok("cp", "--on-conflict", "resume", src, dst)
    assert dst.read_bytes() == b"0123456789"


# ---- bandwidth, dry run ----


def test_bwlimit_slows_the_copy(ferry: Ferry, tmp_path: Path) -> None:
    data = os.urandom(3 << 20)
    (tmp_path / "a.bin").write_bytes(data)
    res = ferry("cp", "--json", "--bwlimit", "1M", tmp_path / "a.bin", tmp_path / "b.bin")
    assert res.returncode == 0, describe(res)
    elapsed = result_event(res.stdout)["elapsed"]
    # 3 MiB at 1 MiB/s with a quarter-second burst: about 2.75 s, never much less.
    assert 2.0 <= elapsed < 15, elapsed
    assert (tmp_path / "b.bin").read_bytes() == data


def test_dry_run_prints_the_plan_and_changes_nothing(ferry: Ferry, tmp_path: Path) -> None:
    src = tmp_path / "src"
    files = make_tree(src)
    os.mkfifo(src / "pipe")
    before = snapshot(tmp_path)
    res = ferry("cp", "-r", "--dry-run", src, f"{tmp_path / 'dst'}/")
    assert res.returncode == 0, describe(res)
    out = res.stdout
    assert f"mkdir {src} -> {tmp_path / 'dst' / 'src'}" in out
    assert f"copy  {src / 'top.txt'} -> {tmp_path / 'dst' / 'src' / 'top.txt'}" in out
    assert "with\\nnewline.txt" in out  # control characters escaped: one line per entry
    assert "skip " in out and "named pipe" in out
    assert f"dry run: {len(files)} file(s)" in out and "nothing was changed" in out
    assert snapshot(tmp_path) == before
    assert not (tmp_path / "dst").exists()

    res = ferry("cp", "-r", "--dry-run", "--json", src, f"{tmp_path / 'dst'}/")
    assert res.returncode == 0, describe(res)
    plan = events(res.stdout)
    copies = {e["source"] for e in plan if e["event"] == "plan" and e["kind"] == "file"}
    assert copies == {str(src / rel) for rel in files}
    assert plan[-1] == {"event": "plan-summary", "files": len(files), "bytes": sum(map(len, files.values()))}
    assert not (tmp_path / "dst").exists()
    assert ferry.jobs() == []


# ---- the planner ----


def test_symlinks_are_copied_as_links_never_followed(ferry: Ferry, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"must not be read through the link")
    links = {
        "abs-link": str(outside),
        "dangling": "no such target",
        "rel-link": "top.txt",
        "self": "self",  # a link to itself
        "sub/loop": "..",  # a loop back up the tree: must not be walked into
        "sub/rootloop": "/",
    }
    # Several sources: links right at the top of a copied folder are the first things its
    # workers meet, together with the task that creates that folder.
    sources = [tmp_path / f"src{i}" for i in range(5)]
    for src in sources:
        (src / "sub").mkdir(parents=True)
        (src / "top.txt").write_bytes(b"top")
        for name, target in links.items():
            os.symlink(target, src / name)
    res = ferry("cp", "-r", "--json", "--parallel", "8", *sources, f"{tmp_path / 'dst'}/", timeout=60)
    fev = file_events(res.stdout)
    for src in sources:
        out = tmp_path / "dst" / src.name
        for name, target in links.items():
            e = fev[f"{src.name}/{name}"]
            assert e["kind"] == "link"
            # Fails when the link's folder is not made yet (another worker has its task): see report.
            assert e["state"] == "done", e
            assert (out / name).is_symlink(), name
            assert os.readlink(out / name) == target
        assert (out / "top.txt").read_bytes() == b"top"
        assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == sorted(
            [*links, "sub", "top.txt"]
        )  # nothing read through a link
    assert res.returncode == 0, describe(res)


def test_names_empty_folders_and_times_preserved(ferry: Ferry, tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_tree(src)
    # Distinct old times on every file and folder, deepest first so parents keep theirs.
    paths = sorted(src.rglob("*"), key=lambda p: -len(p.parts))
    for i, p in enumerate([*paths, src]):
        set_mtime(p, T_OLD + i * 1_000_000_007_000)
    res = ferry("cp", "-r", "--json", src, f"{tmp_path / 'dst'}/")
    assert res.returncode == 0, describe(res)
    out = tmp_path / "dst" / "src"
    assert file_digests(out) == file_digests(src)
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == sorted(p.relative_to(src) for p in paths)
    for p in [*paths, src]:
        rel = p.relative_to(src)
        assert (out / rel).stat().st_mtime_ns == p.stat().st_mtime_ns, rel
    fev = file_events(res.stdout)
    assert fev[f"src/data/{NEWLINE_NAME}"]["state"] == "done"
    assert fev["src/data/naïve ünïcode — ☃ 日本.txt"]["verified"] == "sha256 match"
    assert partials(out) == []


def test_times_not_preserved_when_asked(ferry: Ferry, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"a")
    set_mtime(tmp_path / "a.txt", T_OLD)
    ferry.ok("cp", "--no-preserve-times", tmp_path / "a.txt", tmp_path / "b.txt")
    assert (tmp_path / "b.txt").stat().st_mtime_ns > T_NEW


def test_special_files_are_skipped_with_a_reason(ferry: Ferry, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "data").mkdir(parents=True)
    (src / "data" / "ok.txt").write_bytes(b"ok")
    os.mkfifo(src / "data" / "fifo")
    res = ferry("cp", "-r", "--json", src, f"{tmp_path / 'dst'}/", timeout=60)
    assert res.returncode == 0, describe(res)  # a fifo never blocks the copy
    e = file_events(res.stdout)["src/data/fifo"]
    assert e["kind"] == "special" and e["state"] == "skipped"
    assert e["error"] == "named pipe: special files are not copied"
    assert not os.path.lexists(tmp_path / "dst/src/data/fifo")
    assert (tmp_path / "dst/src/data/ok.txt").read_bytes() == b"ok"


def test_skipped_special_file_is_reported_on_stderr(ferry: Ferry, tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "ok.txt").write_bytes(b"ok")
    os.mkfifo(tmp_path / "src" / "pipe")
    res = ferry("cp", "-r", tmp_path / "src", f"{tmp_path / 'dst'}/")
    assert res.returncode == 0, describe(res)
    assert "skipped: src/pipe: named pipe: special files are not copied" in res.stderr
    assert (tmp_path / "dst/src/ok.txt").read_bytes() == b"ok"
    # A special file named directly is refused up front.
    res = ferry("cp", tmp_path / "src" / "pipe", tmp_path / "elsewhere")
    assert res.returncode == 2 and "named pipe" in res.stderr
    assert not (tmp_path / "elsewhere").exists()


# ---- bad input: one line, non-zero, nothing changed ----


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["cp", "{t}/missing.txt", "{t}/out.txt"], "Source not found"),
        (["cp", "-r", "{t}/src", "{t}/src/sub/"], "is inside the source"),
        (["cp", "-r", "{t}/src", "{t}/src"], "is inside the source"),
        (["cp", "{t}/src/a.txt", "{t}/src/a.txt"], "are the same file"),
        (["cp", "sftp://host:99999/x", "{t}/out"], "Malformed port"),
        (["cp", "{t}/src/a.txt", "sftp://host:99999/x"], "Malformed port"),
        (["cp", "nosuch:path", "{t}/out"], "Unknown site 'nosuch'"),
        (["cp", "{t}/src/a.txt", "nosuch:path"], "Unknown site 'nosuch'"),
        (["queue", "add", "{t}/missing.txt", "{t}/out.txt"], "Source not found"),
        (["queue", "add", "-r", "{t}/src", "{t}/src/inner/"], "is inside the source"),
        (["queue", "add", "nosuch:path", "{t}/out"], "Unknown site"),
        (["queue", "add", "--window", "25:00-07:00", "{t}/src/a.txt", "{t}/out"], "Malformed time"),
    ],
)
def test_bad_input_one_line_error_nothing_changed(ferry: Ferry, tmp_path: Path, argv: list[str], words: str) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_bytes(b"a")
    before = snapshot(tmp_path)
    res = ferry(*(a.replace("{t}", str(tmp_path)) for a in argv))
    assert res.returncode == 2, describe(res)
    assert words in res.stderr
    lines = res.stderr.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("ferry: "), res.stderr
    assert "Traceback" not in res.stderr
    assert snapshot(tmp_path) == before  # not even the queue database was created
    assert ferry.jobs() == []


def test_destination_below_a_file_is_bad_input(ferry: Ferry, tmp_path: Path) -> None:
    """``cp a.txt a.txt/below``: bad input, so exit 2 (ferry.cli.main: "2 bad input") and one line."""
    (tmp_path / "a.txt").write_bytes(b"a")
    before = snapshot(tmp_path)
    res = ferry("cp", tmp_path / "a.txt", tmp_path / "a.txt" / "below")
    assert "not a folder" in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert snapshot(tmp_path) == before
    assert res.returncode == 2, describe(res)


def _run_as_nobody(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run ferry's CLI in a forked child that dropped root (so permission checks apply)."""
    import ferry.backends.local
    import ferry.cli.main as cli
    import ferry.credentials.sites
    import ferry.transfers.scheduler  # noqa: F401

    cli.build_parser()  # imports every command module while we can still read the stdlib
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 99
        try:
            os.dup2(w, 2)
            os.dup2(w, 1)
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - pytest swapped these
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
            os.environ.clear()
            os.environ.update(env)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            code = cli.main(argv)
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException as exc:
            os.write(2, f"child error: {exc!r}\n".encode())
        finally:
            os._exit(code)
    os.close(w)
    chunks = []
    while data := os.read(r, 65536):
        chunks.append(data)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode("utf-8", "replace")


NOBODY = 65534


@pytest.fixture
def shared_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder an unprivileged user can reach (tmp_path sits in a root-only folder)."""
    if os.geteuid() != 0:
        yield tmp_path
        return
    base = Path(tempfile.mkdtemp(prefix="ferry-perm-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        for dirpath, dirs, _names in os.walk(base):
            for n in dirs:
                Path(dirpath, n).chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


def _cp_unprivileged(ferry: Ferry, base: Path, argv: list[str]) -> tuple[int, str]:
    env = dict(ferry.env)
    env["FERRY_DATA_DIR"] = str(base / "data")
    env["FERRY_CONFIG_DIR"] = str(base / "config")
    if os.geteuid() == 0:
        return _run_as_nobody(argv, env)
    res = ferry(*argv)
    return res.returncode, res.stderr


def _owned_by_runner(path: Path) -> None:
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)


@pytest.mark.skipif(not hasattr(os, "setresuid"), reason="needs POSIX users")
def test_unwritable_destination(ferry: Ferry, shared_dir: Path) -> None:
    base = shared_dir
    (base / "src.txt").write_bytes(b"data")
    (base / "src.txt").chmod(0o644)
    locked = base / "locked"
    locked.mkdir()
    _owned_by_runner(locked)
    locked.chmod(0o500)  # the user's own folder, made read-only
    writable = base / "writable"
    writable.mkdir()
    _owned_by_runner(writable)
    before = snapshot(base)
    # The same user may write elsewhere (a dry run checks the destination the same way) ...
    code, err = _cp_unprivileged(ferry, base, ["cp", "--dry-run", str(base / "src.txt"), str(writable)])
    assert code == 0, err
    # ... but not into the read-only folder.
    for target in (locked, locked / "copy.txt", locked / "new" / "deeper/"):
        code, err = _cp_unprivileged(ferry, base, ["cp", str(base / "src.txt"), str(target)])
        assert code == 2, err
        assert "permission denied" in err.lower() and str(locked) in err
        assert err.strip().count("\n") == 0, err
    assert snapshot(base) == before
    assert list(locked.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "setresuid"), reason="needs POSIX users")
def test_unsearchable_destination_is_bad_input(ferry: Ferry, shared_dir: Path) -> None:
    """A destination inside a folder the user cannot enter: one line, exit 2, nothing changed."""
    if os.geteuid() != 0:
        pytest.skip("needs a folder owned by another user")
    base = shared_dir
    (base / "src.txt").write_bytes(b"data")
    (base / "src.txt").chmod(0o644)
    private = base / "private"
    private.mkdir()
    private.chmod(0o700)  # root's: the unprivileged user cannot even look inside
    before = snapshot(base)
    code, err = _cp_unprivileged(ferry, base, ["cp", str(base / "src.txt"), str(private / "copy.txt")])
    assert "permission denied" in err.lower() and err.strip().count("\n") == 0, err
    assert snapshot(base) == before
    assert code == 2, err


def test_json_lines_are_all_json(ferry: Ferry, tmp_path: Path) -> None:
    """--json output is nothing but JSON objects, one a line, even for a failed copy."""
    (tmp_path / "a.txt").write_bytes(b"new")
    (tmp_path / "b.txt").write_bytes(b"old")
    res = ferry("cp", "--json", tmp_path / "a.txt", tmp_path / "b.txt")
    assert res.returncode == 1, describe(res)
    for line in res.stdout.splitlines():
        json.loads(line)
    result = result_event(res.stdout)
    assert result["exit_code"] == 1 and result["state"] == "failed"
    assert result["files_failed"] == 1
    (e,) = file_events(res.stdout).values()
    assert e["state"] == "failed" and "no one is there to ask" in e["error"]
    assert sha256_file(tmp_path / "b.txt") == sha256_bytes(b"old")
