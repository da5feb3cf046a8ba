"""``ferry ls``, ``ferry hash`` and ``ferry sites`` from the command line."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from ferry.cli.cmd_hash import checksum_line
from ferry.cli.cmd_ls import escape_name
from ferry.cli.main import main
from keyring_memory import FAIL, MEMORY, MemoryKeyring, selected_keyring

POSIX = os.name == "posix"
needs_posix = pytest.mark.skipif(not POSIX, reason="POSIX file names and special files")
SECRET = "s3cr3t-Pa55 word!"


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("FERRY_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("FERRY_DATA_DIR", str(tmp_path / "data"))
    # Never the real keychain of whoever runs the tests; tests that want one select it.
    with selected_keyring(monkeypatch, FAIL):
        yield


@pytest.fixture
def memory_keyring(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with selected_keyring(monkeypatch, MEMORY):
        yield


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """d/ with files, a hidden file, a subfolder and (on POSIX) a symlink."""
    d = tmp_path / "d"
    (d / "sub" / "deeper").mkdir(parents=True)
    (d / "b.txt").write_bytes(b"bee\n")
    (d / "A.txt").write_bytes(b"hello")
    (d / ".hidden").write_bytes(b"secret-ish")
    (d / "sub" / "inner.bin").write_bytes(bytes(range(256)) * 10)
    (d / "sub" / "deeper" / "z").write_bytes(b"")
    (d / "Zdir").mkdir()
    if POSIX:
        os.symlink("b.txt", d / "link")
    return d


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- ls --


def test_ls_folders_first_sorted_hidden_skipped(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "ls", str(tree))
    assert (code, err) == (0, "")
    expected = ["sub/", "Zdir/", "A.txt", "b.txt"] + (["link"] if POSIX else [])
    assert out.splitlines() == expected


def test_ls_all_shows_hidden(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "ls", "-a", str(tree))
    assert code == 0
    assert ".hidden" in out.splitlines()


def test_ls_a_file_shows_it_as_typed(
    tree: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tree)
    code, out, _ = run(capsys, "ls", "b.txt")
    assert (code, out) == (0, "b.txt\n")
    code, out, _ = run(capsys, "ls", ".hidden")  # named explicitly: shown without -a
    assert (code, out) == (0, ".hidden\n")


def test_ls_missing_is_not_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "ls", str(tmp_path / "nope"))
    assert code == 1
    assert out == ""
    assert err == f"ferry: No such file or folder: {tmp_path / 'nope'}\n"


def test_ls_unknown_site_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "ls", "nosuchsite:data")
    assert code == 2
    assert "Unknown site 'nosuchsite'" in err


def test_ls_empty_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "e").mkdir()
    assert run(capsys, "ls", str(tmp_path / "e")) == (0, "", "")
    code, out, _ = run(capsys, "ls", "--json", str(tmp_path / "e"))
    assert (code, json.loads(out)) == (0, [])


_LONG = re.compile(r"^([-dlpscb?][-rwxsStT]{9}|[-dlpscb?] {9})  +(-|\d+)  (\d{4}-\d\d-\d\d \d\d:\d\d)  (.+)$")


def test_ls_long(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "ls", "-l", str(tree))
    assert code == 0
    lines = out.splitlines()
    rows = {}
    for line in lines:
        m = _LONG.match(line)
        assert m, line
        rows[m.group(4)] = m
    assert rows["sub/"].group(1).startswith("d") and rows["sub/"].group(2) == "-"
    assert rows["A.txt"].group(1).startswith("-") and rows["A.txt"].group(2) == "5"
    mtime = datetime.fromtimestamp((tree / "A.txt").stat().st_mtime).strftime("%Y-%m-%d %H:%M")
    assert rows["A.txt"].group(3) == mtime
    # Sizes are right-aligned: every time column starts at the same place.
    assert len({m.start(3) for m in rows.values()}) == 1
    if POSIX:
        assert rows["link -> b.txt"].group(1).startswith("l")


@needs_posix
def test_ls_long_special_and_link_itself(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(tree / "pipe")
    os.symlink("sub", tree / "dirlink")
    _, out, _ = run(capsys, "ls", "-l", str(tree))
    assert any(line.startswith("p") and line.endswith("  pipe") for line in out.splitlines())
    # Named on the command line: without -l a link to a folder is listed through, with -l shown itself.
    _, out, _ = run(capsys, "ls", str(tree / "dirlink"))
    assert out.splitlines() == ["deeper/", "inner.bin"]
    _, out, _ = run(capsys, "ls", "-l", str(tree / "dirlink"))
    assert out.rstrip("\n").endswith(f"{tree / 'dirlink'} -> sub")
    _, out, _ = run(capsys, "ls", "-l", str(tree / "dirlink") + "/")
    assert len(out.splitlines()) == 2


def test_ls_json(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "ls", "--json", "-a", str(tree))
    assert code == 0
    items = json.loads(out)
    by_name = {i["name"]: i for i in items}
    assert [i["name"] for i in items][:2] == ["sub", "Zdir"]
    a = by_name["A.txt"]
    assert set(a) >= {"name", "path", "kind", "size", "mtime", "link_target", "mode"}
    assert a["path"] == str(tree / "A.txt")
    assert (a["kind"], a["size"], a["link_target"]) == ("file", 5, None)
    assert a["mtime"].endswith("Z")
    parsed = datetime.fromisoformat(a["mtime"].replace("Z", "+00:00"))
    assert abs(parsed.timestamp() - (tree / "A.txt").stat().st_mtime) < 1e-3
    assert by_name["sub"]["kind"] == "dir" and by_name["sub"]["size"] is None
    assert ".hidden" in by_name
    if POSIX:
        assert isinstance(a["mode"], int) and a["mode"] == (tree / "A.txt").stat().st_mode & 0o7777
        assert (by_name["link"]["kind"], by_name["link"]["link_target"]) == ("link", "b.txt")


@needs_posix
def test_ls_odd_names_one_line_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "odd"
    d.mkdir()
    names = ["new\nline", "tab\there", "back\\slash", "cr\rx", "bell\x07", "esc\x1b[31m", "ünï"]
    for n in names:
        (d / n).write_bytes(b"x")
    raw = os.fsencode(str(d)) + b"/bad\xffbyte"
    with open(raw, "wb") as f:
        f.write(b"y")
    code, out, _ = run(capsys, "ls", str(d))
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == len(names) + 1
    assert "new\\nline" in lines and "tab\\there" in lines and "back\\\\slash" in lines
    assert "cr\\rx" in lines and "bell\\a" in lines and "esc\\x1b[31m" in lines and "ünï" in lines
    assert "bad\\xffbyte" in lines
    code, out, _ = run(capsys, "ls", "-l", str(d))
    assert len(out.splitlines()) == len(names) + 1
    # JSON keeps the exact names (the undecodable byte as Python's surrogate escape).
    _, out, _ = run(capsys, "ls", "--json", str(d))
    got = {i["name"] for i in json.loads(out)}
    assert got == {*names, os.fsdecode(b"bad\xffbyte")}


def test_escape_name() -> None:
    assert escape_name("plain name.txt") == "plain name.txt"
    assert escape_name("a\nb\\c") == "a\\nb\\\\c"
    assert escape_name("x\u202ey") == "x\\u202ey"  # a right-to-left override cannot disguise a name
    assert escape_name("x\u2028y\x7f") == "x\\u2028y\\x7f"
    assert escape_name("e\u0301moji\U0001f600") == "e\u0301moji\U0001f600"


def test_ls_memory_backend(capsys: pytest.CaptureFixture[str]) -> None:
    from ferry.backends.memory import MemoryBackend, reset_memory_stores
    from ferry.core.address import parse_address

    reset_memory_stores()
    try:
        backend = MemoryBackend(parse_address("memory://clitest/"))
        backend.mkdir("/data/sub")
        with backend.open_write("/data/f.txt", size=3, token="t") as w:
            w.write(b"abc")
            w.commit(overwrite=False)
        code, out, _ = run(capsys, "ls", "memory://clitest/data")
        assert (code, out) == (0, "sub/\nf.txt\n")
        code, out, _ = run(capsys, "ls", "--json", "memory://clitest/data")
        item = next(i for i in json.loads(out) if i["name"] == "f.txt")
        assert (item["path"], item["address"], item["size"]) == (
            "/data/f.txt",
            "memory://clitest/data/f.txt",
            3,
        )
        code, out, _ = run(capsys, "hash", "memory://clitest/data/f.txt")
        assert (code, out) == (0, f"{sha256(b'abc')}  memory://clitest/data/f.txt\n")
    finally:
        reset_memory_stores()


# -- hash --


def test_hash_files(tree: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tree)
    code, out, err = run(capsys, "hash", "A.txt", "b.txt")
    assert (code, err) == (0, "")
    bee = b"bee\n"
    assert out == f"{sha256(b'hello')}  A.txt\n{sha256(bee)}  b.txt\n"


@pytest.mark.parametrize("algo", ["sha256", "md5", "sha1", "blake3"])
def test_hash_algorithms(tree: Path, capsys: pytest.CaptureFixture[str], algo: str) -> None:
    if algo == "blake3":
        import blake3

        expected = blake3.blake3(b"hello").hexdigest()
    else:
        expected = hashlib.new(algo, b"hello").hexdigest()
    code, out, _ = run(capsys, "hash", "--algo", algo, str(tree / "A.txt"))
    assert (code, out) == (0, f"{expected}  {tree / 'A.txt'}\n")


def test_hash_unknown_algo_is_usage(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["hash", "--algo", "crc32", str(tree / "A.txt")])
    assert info.value.code == 2


def test_hash_folder_needs_r(
    tree: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tree.parent)
    code, out, err = run(capsys, "hash", "d", "d/A.txt")
    assert code == 1
    assert err == "ferry: d: Is a folder (use -r to hash the files in it)\n"
    assert out == f"{sha256(b'hello')}  d/A.txt\n"  # the other argument still hashed


def test_hash_recursive_sorted_files_only(
    tree: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tree.parent)
    if POSIX:
        os.mkfifo(tree / "sub" / "fifo")  # skipped, never opened (it would block)
    code, out, err = run(capsys, "hash", "-r", "d")
    assert (code, err) == (0, "")
    names = [line.split("  ", 1)[1] for line in out.splitlines()]
    sep = os.sep
    assert names == [
        "d/.hidden" if sep == "/" else "d\\.hidden",
        *(n.replace("/", sep) for n in ["d/A.txt", "d/b.txt", "d/sub/deeper/z", "d/sub/inner.bin"]),
    ]
    # Trailing slash typed: not doubled.
    _, out2, _ = run(capsys, "hash", "-r", "d/")
    assert out2 == out


def test_hash_missing_file_continues(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "hash", str(tree / "nope"), str(tree / "A.txt"))
    assert code == 1
    assert err == f"ferry: No such file or folder: {tree / 'nope'}\n"
    assert out == f"{sha256(b'hello')}  {tree / 'A.txt'}\n"


@needs_posix
def test_hash_fifo_argument_is_refused_not_hung(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(tmp_path / "p")
    code, out, err = run(capsys, "hash", str(tmp_path / "p"))
    assert (code, out) == (1, "")
    assert "Not a regular file (named pipe)" in err


def test_hash_unreadable_file_continues(
    tree: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Injected rather than chmod 0: the tests also run as root, who reads everything.
    import errno

    from ferry.backends.local import LocalBackend
    from ferry.core.errors import from_oserror

    real = LocalBackend.open_read

    def open_read(self: LocalBackend, path: str, offset: int = 0, length: int | None = None) -> object:
        if path.endswith("b.txt"):
            raise from_oserror(PermissionError(errno.EACCES, "Permission denied", path), path)
        return real(self, path, offset, length)

    monkeypatch.setattr(LocalBackend, "open_read", open_read)
    code, out, err = run(capsys, "hash", "-r", str(tree))
    assert code == 1
    assert err == f"ferry: Permission denied: {tree / 'b.txt'}\n"
    assert f"{tree / 'A.txt'}" in out and f"{tree / 'sub' / 'inner.bin'}" in out


def test_checksum_line_escaping() -> None:
    assert checksum_line("ab", "x y") == "ab  x y\n"
    assert checksum_line("ab", "a\\b\nc\rd") == "\\ab  a\\\\b\\nc\\rd\n"


@needs_posix
@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs coreutils sha256sum")
def test_hash_output_verifies_with_sha256sum(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "w"
    (d / "sub").mkdir(parents=True)
    files = {
        "plain.txt": b"one",
        "with space": b"two",
        "back\\slash": b"three",
        "new\nline": b"four",
        "cr\rname": b"five",
        "sub/ünï": b"six",
        "sub/big": os.urandom(3 << 20),
    }
    for name, data in files.items():
        (d / name).write_bytes(data)
    with open(os.fsencode(str(d)) + b"/raw\xfe", "wb") as f:
        f.write(b"seven")
    monkeypatch.chdir(tmp_path)
    code = main(["hash", "-r", "w"])
    out = capsysbinary.readouterr().out  # bytes: the undecodable name is written as its own bytes
    assert code == 0
    assert b"  w/raw\xfe\n" in out
    sums = tmp_path / "SUMS"
    sums.write_bytes(out)
    check = subprocess.run(["sha256sum", "-c", "--strict", str(sums)], cwd=tmp_path, capture_output=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count(b": OK") == len(files) + 1
    # And it catches a change.
    (d / "sub" / "big").write_bytes(b"changed")
    check = subprocess.run(["sha256sum", "-c", "--quiet", str(sums)], cwd=tmp_path, capture_output=True)
    assert check.returncode == 1 and b"big: FAILED" in check.stdout


@pytest.mark.skipif(shutil.which("md5sum") is None, reason="needs coreutils md5sum")
def test_md5_output_verifies_with_md5sum(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "hash", "--algo", "md5", "-r", str(tree))
    assert code == 0
    check = subprocess.run(["md5sum", "-c", "--strict", "-"], input=out.encode(), capture_output=True)
    assert check.returncode == 0, check.stdout + check.stderr


def _env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, FERRY_CONFIG_DIR=str(tmp_path / "config"))


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs coreutils sha256sum")
def test_hash_as_a_real_process(tree: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ferry", "hash", "-r", "d", "d/missing"],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
    )
    assert proc.returncode == 1
    assert proc.stderr.decode().startswith("ferry: No such file or folder:")
    check = subprocess.run(["sha256sum", "-c", "-"], input=proc.stdout, cwd=tmp_path, capture_output=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count(b": OK") == 5


def test_ls_as_a_real_process(tree: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ferry", "ls", "--json", str(tree)], env=_env(tmp_path), capture_output=True
    )
    assert proc.returncode == 0, proc.stderr
    assert {i["name"] for i in json.loads(proc.stdout)} >= {"A.txt", "sub"}


# -- sites --


def test_sites_add_list_use_remove(tree: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run(
        capsys,
        "sites",
        "add",
        "proj",
        str(tree),
        "--description",
        "Project data",
        "--option",
        "region=eu-west-1",
        "--option",
        "endpoint_url=https://s3.example/x=y",
    )
    assert (code, err) == (0, "")
    assert out.startswith(f"Saved site 'proj': {tree}")
    code, out, _ = run(capsys, "ls", "proj:sub")
    assert (code, out) == (0, "deeper/\ninner.bin\n")
    code, out, _ = run(capsys, "hash", "proj:A.txt")
    assert out == f"{sha256(b'hello')}  proj:A.txt\n"

    code, out, err = run(capsys, "sites", "list")
    assert code == 0
    header, row = out.splitlines()
    assert header.split() == ["NAME", "ADDRESS", "PASSWORD", "OPTIONS", "DESCRIPTION"]
    assert row.split("  ")[0] == "proj"
    assert "endpoint_url=https://s3.example/x=y, region=eu-west-1" in row and "Project data" in row
    assert "no keychain" in row and "No usable system keychain" in err

    code, out, _ = run(capsys, "sites", "list", "--json")
    assert json.loads(out) == [
        {
            "name": "proj",
            "address": str(tree),
            "description": "Project data",
            "options": {"endpoint_url": "https://s3.example/x=y", "region": "eu-west-1"},
            "password_stored": None,
        }
    ]
    code, out, _ = run(capsys, "sites")  # bare: lists
    assert code == 0 and "proj" in out
    code, out, _ = run(capsys, "sites", "remove", "proj")
    assert (code, out) == (0, f"Removed site 'proj' ({tree}); no files were touched.\n")
    assert tree.exists()
    code, out, _ = run(capsys, "sites", "list")
    assert out.startswith("No saved sites.")


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["sites", "add", "x", "/a"], "Invalid site name"),
        (["sites", "add", "ok", "other:/a"], "cannot be another site"),
        (["sites", "add", "ok", "/a", "--option", "novalue"], "expected KEY=VALUE"),
        (["sites", "add", "ok", "/a", "--option", "k=1", "--option", "k=2"], "given twice"),
        (["sites", "add", "ok", "/a", "--option", "api_token=x"], "looks like a secret"),
        (["sites", "remove", "ghost"], "No site named 'ghost'"),
    ],
)
def test_sites_bad_input(capsys: pytest.CaptureFixture[str], argv: list[str], words: str) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert words in err
    assert err.count("\n") == 1  # one line, no traceback


def test_sites_duplicate_and_replace(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "sites", "add", "s1", "/one")[0] == 0
    code, _, err = run(capsys, "sites", "add", "s1", "/two")
    assert code == 2 and "--replace" in err
    assert run(capsys, "sites", "add", "s1", "/two", "--replace")[0] == 0
    _, out, _ = run(capsys, "sites", "list", "--json")
    assert json.loads(out)[0]["address"] == "/two"


def test_sites_password_goes_to_keychain_only(
    memory_keyring: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    prompts: list[str] = []

    def fake_getpass(prompt: str = "") -> str:
        prompts.append(prompt)
        return SECRET

    monkeypatch.setattr("getpass.getpass", fake_getpass)
    code, out, err = run(capsys, "sites", "add", "hpc", "sftp://alice@hpc.example/scratch", "--password")
    assert (code, err) == (0, "")
    assert prompts == ["Password for site 'hpc' (not shown): "]
    assert "Password stored in the system keychain" in out
    assert MemoryKeyring.store == {("ferry", "site:hpc:password"): SECRET}
    assert SECRET not in out
    toml = (tmp_path / "config" / "sites.toml").read_text()
    assert "sftp://alice@hpc.example/scratch" in toml and SECRET not in toml
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]

    code, out, _ = run(capsys, "sites", "list")
    assert "stored" in out.splitlines()[1] and SECRET not in out
    _, out, _ = run(capsys, "sites", "list", "--json")
    assert json.loads(out)[0]["password_stored"] is True

    code, out, _ = run(capsys, "sites", "remove", "hpc")
    assert "and its stored password" in out
    assert MemoryKeyring.store == {}


def test_sites_empty_password_saves_nothing(
    memory_keyring: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("getpass.getpass", lambda prompt="": "")
    code, _, err = run(capsys, "sites", "add", "hpc", "/x", "--password")
    assert code == 2 and "Empty password" in err
    _, out, _ = run(capsys, "sites", "list", "--json")
    assert json.loads(out) == []


def test_sites_password_without_keychain(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def no_prompt(prompt: str = "") -> str:
        raise AssertionError("must not ask for a password it cannot keep")

    monkeypatch.setattr("getpass.getpass", no_prompt)
    code, out, err = run(capsys, "sites", "add", "hpc", "sftp://hpc.example/x", "--password")
    assert code == 0
    assert "Saved site 'hpc'" in out  # the site itself is saved
    assert err.startswith("ferry: No usable system keychain was found on this computer, so no password")
    _, out, _ = run(capsys, "sites", "list", "--json")
    assert json.loads(out)[0]["password_stored"] is None


def test_sites_keep_secrets_out_of_the_file_when_keychain_breaks(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from keyring_memory import LOCKED

    monkeypatch.setattr("getpass.getpass", lambda prompt="": SECRET)
    with selected_keyring(monkeypatch, LOCKED):
        code, out, err = run(capsys, "sites", "add", "hpc", "/x", "--password")
    assert code == 1
    assert "Saved site 'hpc'" in out
    assert "the password was not stored" in err and SECRET not in err
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]


def test_sites_as_a_real_process(tmp_path: Path) -> None:
    env = _env(tmp_path)
    add = subprocess.run(
        [sys.executable, "-m", "ferry", "sites", "add", "bkt", "s3://bucket/pre", "--option", "region=x"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert add.returncode == 0, add.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "ferry", "sites", "list", "--json"], env=env, capture_output=True, text=True
    )
    assert json.loads(listed.stdout)[0]["address"] == "s3://bucket/pre"
