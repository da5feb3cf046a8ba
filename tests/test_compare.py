"""``ferry compare`` between local folders, run as a user would: missing, extra, changed by size,
by time, by content at the same size and time (only ``--by checksum`` sees it), case-only
renames, exit codes, and the streaming merge itself (order, bounded listing)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ferry.backends.local import LocalBackend
from ferry.core.address import Address
from ferry.transfers.compare import Side, State, compare, sorted_walk
from helpers import Ferry, describe, put

T = 1_700_000_000_123_456_789


def pair(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "A", tmp_path / "B"
    for root in (a, b):
        put(root, "same.txt", b"same\n")
        put(root, "deep/er/same.bin", b"x" * 1000)
    return a, b


def items(res_stdout: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for line in res_stdout.splitlines():
        obj = json.loads(line)
        if obj["event"] == "item":
            out[obj["path"]] = obj
    return out


def summary(res_stdout: str) -> dict[str, Any]:
    return [json.loads(x) for x in res_stdout.splitlines() if '"summary"' in x][-1]  # type: ignore[no-any-return]


def test_identical_trees_exit_0(ferry: Ferry, tmp_path: Path) -> None:
    a, b = pair(tmp_path)
    res = ferry("compare", "-r", a, b)
    assert res.returncode == 0, describe(res)
    assert "identical: 0 only in A, 0 only in B, 0 different, 2 identical" in res.stderr


def test_missing_extra_size_and_time(ferry: Ferry, tmp_path: Path) -> None:
    a, b = pair(tmp_path)
    put(a, "missing.txt", b"only in a")
    put(b, "extra/deeper.txt", b"only in b")
    put(a, "size.txt", b"12345")
    put(b, "size.txt", b"1234")
    put(a, "time.txt", b"same bytes")
    put(b, "time.txt", b"same bytes", T + 1)  # one nanosecond: local disks keep nanoseconds
    res = ferry("compare", "-r", "--json", a, b)
    assert res.returncode == 1, describe(res)
    got = items(res.stdout)
    assert got["missing.txt"]["state"] == "only-a"
    assert got["extra"]["state"] == "only-b" and got["extra/deeper.txt"]["state"] == "only-b"
    assert got["size.txt"]["state"] == "different" and got["size.txt"]["reasons"] == ["size"]
    assert got["time.txt"]["state"] == "different" and got["time.txt"]["reasons"] == ["time"]
    assert got["same.txt"]["state"] == "same" and got["deep/er/same.bin"]["state"] == "same"
    s = summary(res.stdout)
    assert (s["only_a"], s["only_b"], s["different"], s["same"]) == (1, 1, 2, 2)
    assert s["exit_code"] == 1


def test_same_size_and_time_different_content_only_checksum_sees(ferry: Ferry, tmp_path: Path) -> None:
    a, b = pair(tmp_path)
    put(a, "sneaky.dat", b"AAAA")
    put(b, "sneaky.dat", b"BBBB")
    res = ferry("compare", "-r", a, b)
    assert res.returncode == 0, describe(res)  # by size and time they look the same
    res = ferry("compare", "-r", "--by", "checksum", "--json", a, b)
    assert res.returncode == 1, describe(res)
    got = items(res.stdout)
    assert got["sneaky.dat"]["reasons"] == ["content"]
    assert "A read" in got["sneaky.dat"]["how"] and "B read" in got["sneaky.dat"]["how"]
    s = summary(res.stdout)
    assert s["read_a"] == 3 and s["read_b"] == 3  # every same-size local file had to be read, and says so


def test_case_only_rename_is_one_missing_and_one_extra(ferry: Ferry, tmp_path: Path) -> None:
    a, b = pair(tmp_path)
    put(a, "Data.txt", b"d")
    put(b, "data.txt", b"d")
    res = ferry("compare", "-r", "--json", a, b)
    got = items(res.stdout)
    assert got["Data.txt"]["state"] == "only-a" and got["data.txt"]["state"] == "only-b", describe(res)


def test_bad_input_exits_2(ferry: Ferry, tmp_path: Path) -> None:
    a, _ = pair(tmp_path)
    res = ferry("compare", "-r", a, tmp_path / "nope")
    assert res.returncode == 2 and "B not found" in res.stderr, describe(res)
    res = ferry("compare", "-r", a, a / "same.txt")
    assert res.returncode == 2 and "folder with a folder" in res.stderr, describe(res)


def test_without_r_only_the_first_level(ferry: Ferry, tmp_path: Path) -> None:
    a, b = pair(tmp_path)
    put(b, "deep/er/extra.txt", b"x")
    assert ferry("compare", a, b).returncode == 0
    assert ferry("compare", "-r", a, b).returncode == 1


def test_two_files(ferry: Ferry, tmp_path: Path) -> None:
    x = put(tmp_path, "x", b"one")
    y = put(tmp_path, "y", b"two")
    z = put(tmp_path, "z", b"one")
    assert ferry("compare", "--by", "checksum", x, y).returncode == 1
    assert ferry("compare", "--by", "checksum", x, z).returncode == 0


def test_walk_order_is_the_merge_order(tmp_path: Path) -> None:
    """'a' (a folder), 'a.txt' and 'a/b' must come out in one order on both sides: component by
    component, so a folder's contents come before a sibling that sorts after its name."""
    root = tmp_path / "t"
    for rel in ("a/b", "a.txt", "a-b", "a/c/d", "b"):
        put(root, rel, b"1")
    b = LocalBackend(Address("local", str(root)))
    keys = [k for k, _ in sorted_walk(b, str(root))]
    assert keys == sorted(keys)
    assert keys.index(("a", "c", "d")) < keys.index(("a-b",)) < keys.index(("a.txt",))


def test_merge_reports_before_the_listings_end(tmp_path: Path) -> None:
    """The first difference comes out after the first names are listed, not after the whole walk."""
    a, b = tmp_path / "A", tmp_path / "B"
    for i in range(50):
        put(a, f"d{i:02}/f", b"1")
    (b / "d00").mkdir(parents=True)
    listed: list[str] = []

    class Counting(LocalBackend):
        def list(self, path: str, cancel: Any = None) -> Any:
            listed.append(path)
            return super().list(path, cancel)

    left = Counting(Address("local", str(a)))
    right = Counting(Address("local", str(b)))
    first = next(iter(compare(Side(left, str(a), True), Side(right, str(b), True), recursive=True)))
    assert first.rel == "d00" and first.state is State.SAME
    assert len(listed) <= 4, listed  # the two roots and at most the first folder of each


def test_ferrys_own_partial_files_are_not_compared(ferry: Ferry, tmp_path: Path) -> None:
    """A paused copy's partial file at B is Ferry's, not a difference (and a sync never deletes it)."""
    a, b = pair(tmp_path)
    put(b, "deep/.big.bin.7.ferry-part", b"half a file")
    res = ferry("compare", "-r", a, b)
    assert res.returncode == 0, describe(res)
    res = ferry("sync", "--delete", "--max-delete", "5", a, b)
    assert res.returncode == 0 and (b / "deep/.big.bin.7.ferry-part").exists(), describe(res)
