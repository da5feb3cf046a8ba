"""Fast paths of the local backend agree with the general ones they stand in for."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ferry.backends import local
from ferry.backends.local import LocalBackend
from ferry.core.errors import FerryError, NotFound


def test_stat_or_none_agrees_with_stat(tmp_path: Path) -> None:
    b = LocalBackend()
    f = tmp_path / "f.bin"
    f.write_bytes(b"12345")
    os.symlink("f.bin", tmp_path / "link")
    for p in (f, tmp_path, tmp_path / "link"):
        assert b.stat_or_none(str(p)) == b.stat(str(p))
    missing = str(tmp_path / "missing")
    assert b.stat_or_none(missing) is None
    with pytest.raises(NotFound):
        b.stat(missing)
    # A file where a folder should be is an error, not "nothing there": both say so alike.
    under_file = str(f / "x")
    with pytest.raises(FerryError) as general:
        b.stat(under_file)
    with pytest.raises(FerryError) as fast:
        b.stat_or_none(under_file)
    assert type(fast.value) is type(general.value) and fast.value.message == general.value.message


def test_renameat2_found_without_ctypes_util(tmp_path: Path) -> None:
    if os.uname().sysname != "Linux":
        pytest.skip("renameat2 is Linux's")
    assert local._renameat2 is not None
    a, c = tmp_path / "a", tmp_path / "c"
    a.write_text("a")
    c.write_text("c")
    assert local._renameat2(str(a), str(c)) != 0  # EEXIST: never replaces
    assert c.read_text() == "c"
    assert local._renameat2(str(a), str(tmp_path / "d")) == 0
    assert (tmp_path / "d").read_text() == "a"
