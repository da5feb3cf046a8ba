"""The Backend contract, checked identically against every backend in ``conftest._FACTORIES``.

Two parts: the required operations (every backend must pass), and "capabilities tell the
truth": each flag a backend declares True is exercised, and each optional method whose flag is
False must refuse with :class:`ferry.core.errors.Unsupported` rather than half-work.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

import blake3
import pytest

from ferry.backends.base import PARTIAL_SUFFIX, Capabilities, Kind, temp_name
from ferry.core.cancel import CancelToken
from ferry.core.errors import (
    AlreadyExists,
    Cancelled,
    FerryError,
    IsADirectory,
    NotADirectory,
    NotFound,
    Unsupported,
)

from .conftest import Site

# -- helpers --


def payload(n: int, seed: int = 0) -> bytes:
    """Deterministic, non-repeating-looking bytes (a repeated pattern could hide offset bugs)."""
    out = bytearray()
    counter = 0
    while len(out) < n:
        out += hashlib.sha256(f"{seed}:{counter}".encode()).digest()
        counter += 1
    return bytes(out[:n])


def put(site: Site, path: str, data: bytes, *, token: str = "tok", overwrite: bool = False) -> None:
    w = site.backend.open_write(path, size=len(data), token=token)
    w.write(data)
    w.finish()
    w.commit(overwrite=overwrite)


def get(site: Site, path: str, offset: int = 0, length: int | None = None) -> bytes:
    with site.backend.open_read(path, offset, length) as f:
        return f.read()


def names(site: Site, path: str | None = None) -> set[str]:
    return {e.name for e in site.backend.list(site.root if path is None else path)}


def true_hash(algo: str, data: bytes) -> str:
    # Computed with the libraries directly, not ferry.core.hashing, so a bug there shows up here.
    if algo == "blake3":
        return str(blake3.blake3(data).hexdigest())
    return hashlib.new(algo, data).hexdigest()


def assert_utc(mtime: datetime | None) -> None:
    assert mtime is not None
    assert mtime.tzinfo is not None and mtime.utcoffset() == timedelta(0)


# -- listing and stat --


def test_list_gives_every_entry_with_kind_path_and_size(site: Site) -> None:
    put(site, site.path("a.bin"), payload(100))
    put(site, site.path("empty"), b"")
    site.backend.mkdir(site.path("d"))
    entries = {e.name: e for e in site.backend.list(site.root)}
    assert set(entries) == {"a.bin", "empty", "d"}  # and no "." or ".."
    for name, e in entries.items():
        assert e.path == site.path(name)
        assert_utc(e.mtime)
    assert (entries["a.bin"].kind, entries["a.bin"].size) == (Kind.FILE, 100)
    assert (entries["empty"].kind, entries["empty"].size) == (Kind.FILE, 0)
    assert (entries["d"].kind, entries["d"].size) == (Kind.DIR, None)  # unknown, never a made-up 0
    assert entries["d"].is_dir and entries["a.bin"].is_file


def test_list_of_empty_folder_is_empty(site: Site) -> None:
    assert list(site.backend.list(site.root)) == []


def test_stat_agrees_with_list(site: Site) -> None:
    put(site, site.path("f"), payload(321))
    site.backend.mkdir(site.path("d"))
    listed = {e.name: e for e in site.backend.list(site.root)}
    for name in ("f", "d"):
        st = site.backend.stat(site.path(name))
        assert (st.path, st.name, st.kind, st.size) == (
            listed[name].path,
            listed[name].name,
            listed[name].kind,
            listed[name].size,
        )
        assert st.mtime == listed[name].mtime


def test_stat_of_root_folder_is_a_dir(site: Site) -> None:
    st = site.backend.stat(site.root)
    assert st.kind is Kind.DIR and st.size is None
    assert site.backend.exists(site.root)
    assert not site.backend.exists(site.path("nope"))


def test_split_and_join_round_trip(site: Site) -> None:
    p = site.path("x y", "z")
    assert site.backend.split(p) == (site.path("x y"), "z")
    assert site.backend.split(site.path("x y") + "/") == (site.root, "x y")


@pytest.mark.parametrize(
    "op",
    ["stat", "list", "open_read", "remove", "remove_recursive", "rename", "open_write_in_missing_folder"],
)
def test_missing_paths_raise_not_found(site: Site, op: str) -> None:
    b, missing = site.backend, site.path("missing")
    calls: dict[str, Callable[[], object]] = {
        "stat": lambda: b.stat(missing),
        "list": lambda: list(b.list(missing)),  # list may be lazy: the error may come on iteration
        "open_read": lambda: b.open_read(missing).close(),
        "remove": lambda: b.remove(missing),
        "remove_recursive": lambda: b.remove(missing, recursive=True),
        "rename": lambda: b.rename(missing, site.path("other")),
        "open_write_in_missing_folder": lambda: b.open_write(
            site.path("missing", "f"), size=1, token="t"
        ).commit(overwrite=False),
    }
    with pytest.raises(NotFound) as info:
        calls[op]()
    assert isinstance(info.value, FileNotFoundError)  # code catching the builtin keeps working
    assert info.value.message  # a sentence for the user, not an empty string


def test_list_of_a_file_is_not_a_directory(site: Site) -> None:
    put(site, site.path("f"), b"x")
    with pytest.raises(NotADirectory) as info:
        list(site.backend.list(site.path("f")))
    assert isinstance(info.value, NotADirectoryError)


def test_path_through_a_file_is_not_a_directory(site: Site) -> None:
    put(site, site.path("f"), b"x")
    with pytest.raises(NotADirectory):
        site.backend.stat(site.path("f", "child"))


def test_open_read_of_a_folder_is_a_directory(site: Site) -> None:
    site.backend.mkdir(site.path("d"))
    with pytest.raises(IsADirectory) as info:
        site.backend.open_read(site.path("d")).close()
    assert isinstance(info.value, IsADirectoryError)


# -- writing --


def test_write_commit_round_trip_with_any_buffer_type(site: Site) -> None:
    data = payload(3 * 1024 * 1024 + 17)
    w = site.backend.open_write(site.path("f"), size=len(data), token="t")
    assert w.offset == 0
    third = len(data) // 3
    w.write(data[:third])
    w.write(bytearray(data[third : 2 * third]))
    w.write(memoryview(data)[2 * third :])
    assert w.finish() is None  # no read-back asked for: no hash
    w.commit(overwrite=False)
    assert get(site, site.path("f")) == data
    st = site.backend.stat(site.path("f"))
    assert st.size == len(data) and st.kind is Kind.FILE


def test_commit_leaves_no_partial(site: Site) -> None:
    w = site.backend.open_write(site.path("f"), size=5, token="t")
    w.write(b"hello")
    w.finish()
    w.commit(overwrite=False)
    assert names(site) == {"f"}  # the partial is gone, not left beside the file
    assert get(site, site.path("f")) == b"hello"


def test_commit_mtime_is_aware_utc_and_recent(site: Site) -> None:
    before = datetime.now(UTC)
    put(site, site.path("f"), b"x")
    mtime = site.backend.stat(site.path("f")).mtime
    assert_utc(mtime)
    assert mtime is not None
    # Generous: filesystem clocks are coarse and may lag the process clock a little.
    assert before - timedelta(seconds=5) <= mtime <= datetime.now(UTC) + timedelta(seconds=5)


def test_empty_file(site: Site) -> None:
    w = site.backend.open_write(site.path("empty"), size=0, token="t")
    w.finish()
    w.commit(overwrite=False)
    st = site.backend.stat(site.path("empty"))
    assert (st.kind, st.size) == (Kind.FILE, 0)
    assert get(site, site.path("empty")) == b""
    for algo in site.backend.capabilities.hashes:
        assert site.backend.hash(site.path("empty"), algo) == true_hash(algo, b"")


def test_commit_without_overwrite_never_clobbers(site: Site) -> None:
    put(site, site.path("f"), b"original")
    w = site.backend.open_write(site.path("f"), size=3, token="t")
    w.write(b"new")
    w.finish()
    with pytest.raises(AlreadyExists) as info:
        w.commit(overwrite=False)
    assert isinstance(info.value, FileExistsError)
    assert get(site, site.path("f")) == b"original"
    w.abort()
    assert names(site) == {"f"}
    assert get(site, site.path("f")) == b"original"


def test_commit_without_overwrite_when_the_name_appears_meanwhile(site: Site) -> None:
    w = site.backend.open_write(site.path("f"), size=4, token="mine")
    w.write(b"mine")
    put(site, site.path("f"), b"theirs", token="theirs")  # someone else got there first
    with pytest.raises(AlreadyExists):
        w.commit(overwrite=False)
    w.abort()
    assert get(site, site.path("f")) == b"theirs"


def test_commit_with_overwrite_replaces(site: Site) -> None:
    put(site, site.path("f"), b"old contents, longer")
    put(site, site.path("f"), b"new", overwrite=True)
    assert get(site, site.path("f")) == b"new"
    assert names(site) == {"f"}


def test_abort_leaves_no_partial(site: Site) -> None:
    w = site.backend.open_write(site.path("f"), size=10, token="t")
    w.write(b"0123456789")
    w.abort()
    assert names(site) == set()
    with pytest.raises(NotFound):
        site.backend.stat(site.path("f"))


def test_exception_in_writer_block_never_leaves_the_final_name(site: Site) -> None:
    with pytest.raises(RuntimeError), site.backend.open_write(site.path("f"), size=10, token="t") as w:
        w.write(b"01234")
        raise RuntimeError("source went away")
    with pytest.raises(NotFound):
        site.backend.stat(site.path("f"))
    # Whatever stays behind is a partial file, recognisable as such.
    assert all(n.endswith(PARTIAL_SUFFIX) for n in names(site))


def test_concurrent_writers_in_one_folder(site: Site) -> None:
    # The scheduler runs several transfers at once against one backend instance.
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            data = payload(50_000 + i, seed=i)
            w = site.backend.open_write(site.path(f"f{i}"), size=len(data), token=f"t{i}")
            for k in range(0, len(data), 4096):
                w.write(data[k : k + 4096])
            w.finish()
            w.commit(overwrite=False)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert names(site) == {f"f{i}" for i in range(8)}
    for i in range(8):
        assert get(site, site.path(f"f{i}")) == payload(50_000 + i, seed=i)


# -- names --

ODD_NAMES = [
    "Ünïcødé ☃.txt",
    "with space.txt",
    " leading and trailing ",
    "new\nline",
    "emoji 🚀",
    "colon:and;semicolon",
    "percent%20stays",
    "#hash?query&amp",
    "日本語のファイル",
]


@pytest.mark.parametrize("name", ODD_NAMES, ids=lambda n: n.encode("unicode_escape").decode())
def test_odd_names_round_trip(site: Site, name: str) -> None:
    data = name.encode() * 3
    put(site, site.path(name), data)
    site.backend.mkdir(site.path(name + ".d"))
    assert names(site) == {name, name + ".d"}
    st = site.backend.stat(site.path(name))
    assert st.name == name and st.path == site.path(name) and st.size == len(data)
    assert get(site, site.path(name)) == data
    put(site, site.path(name + ".d", name), b"inside")
    assert names(site, site.path(name + ".d")) == {name}
    site.backend.rename(site.path(name), site.path(name + " renamed"))
    assert get(site, site.path(name + " renamed")) == data


# -- reading --


@pytest.mark.parametrize(
    ("offset", "length"),
    [(0, None), (0, 0), (1, None), (1000, 1), (4 * 1024 * 1024 - 3, 10), (5_000_000, None), (10, 10**9)],
)
def test_ranged_read(site: Site, offset: int, length: int | None) -> None:
    data = payload(5_000_123)
    put(site, site.path("f"), data)
    end = None if length is None else offset + length
    assert get(site, site.path("f"), offset, length) == data[offset:end]


def test_ranged_read_past_the_end_is_empty(site: Site) -> None:
    put(site, site.path("f"), b"short")
    assert get(site, site.path("f"), 100) == b""
    assert get(site, site.path("f"), 100, 5) == b""


def test_reader_supports_readinto_and_small_reads(site: Site) -> None:
    data = payload(10_000)
    put(site, site.path("f"), data)
    with site.backend.open_read(site.path("f"), 100, 5000) as f:
        buf = bytearray(3000)
        n = f.readinto(buf)
        got = bytes(buf[:n])
        while chunk := f.read(777):
            got += chunk
    assert got == data[100:5100]


# -- rename --


def test_rename_to_a_new_name(site: Site) -> None:
    put(site, site.path("a"), b"A")
    site.backend.rename(site.path("a"), site.path("b"))
    assert names(site) == {"b"}
    assert get(site, site.path("b")) == b"A"


def test_rename_without_overwrite_refuses_and_keeps_both(site: Site) -> None:
    put(site, site.path("a"), b"A")
    put(site, site.path("b"), b"B")
    with pytest.raises(AlreadyExists):
        site.backend.rename(site.path("a"), site.path("b"))
    assert (get(site, site.path("a")), get(site, site.path("b"))) == (b"A", b"B")


def test_rename_with_overwrite_replaces(site: Site) -> None:
    put(site, site.path("a"), b"A")
    put(site, site.path("b"), b"B")
    site.backend.rename(site.path("a"), site.path("b"), overwrite=True)
    assert names(site) == {"b"}
    assert get(site, site.path("b")) == b"A"


def test_rename_moves_a_folder_with_its_contents(site: Site) -> None:
    site.backend.mkdir(site.path("src", "sub"))
    put(site, site.path("src", "sub", "f"), b"deep")
    site.backend.mkdir(site.path("dst"))
    site.backend.rename(site.path("src"), site.path("dst", "moved"))
    assert names(site) == {"dst"}
    assert get(site, site.path("dst", "moved", "sub", "f")) == b"deep"


# -- remove --


def test_remove_file_and_empty_folder(site: Site) -> None:
    put(site, site.path("f"), b"x")
    site.backend.mkdir(site.path("d"))
    site.backend.remove(site.path("f"))
    site.backend.remove(site.path("d"))
    assert names(site) == set()


def test_remove_non_empty_folder_needs_recursive(site: Site) -> None:
    site.backend.mkdir(site.path("d", "sub"))
    put(site, site.path("d", "sub", "f"), b"keep me")
    with pytest.raises(FerryError) as info:
        site.backend.remove(site.path("d"))
    assert not isinstance(info.value, NotFound)
    assert get(site, site.path("d", "sub", "f")) == b"keep me"  # nothing was removed
    site.backend.remove(site.path("d"), recursive=True)
    assert names(site) == set()


def test_remove_recursive_of_a_file(site: Site) -> None:
    put(site, site.path("f"), b"x")
    site.backend.remove(site.path("f"), recursive=True)
    assert names(site) == set()


# -- mkdir --


def test_mkdir_parents(site: Site) -> None:
    site.backend.mkdir(site.path("a", "b", "c"))
    for p in (site.path("a"), site.path("a", "b"), site.path("a", "b", "c")):
        assert site.backend.stat(p).kind is Kind.DIR


def test_mkdir_exist_ok_keeps_contents(site: Site) -> None:
    site.backend.mkdir(site.path("d"))
    put(site, site.path("d", "f"), b"x")
    site.backend.mkdir(site.path("d"), exist_ok=True)
    site.backend.mkdir(site.path("d"), parents=False, exist_ok=True)
    assert names(site, site.path("d")) == {"f"}


@pytest.mark.parametrize("parents", [True, False])
def test_mkdir_existing_without_exist_ok(site: Site, parents: bool) -> None:
    site.backend.mkdir(site.path("d"))
    with pytest.raises(AlreadyExists):
        site.backend.mkdir(site.path("d"), parents=parents, exist_ok=False)


def test_mkdir_over_a_file_refuses_even_with_exist_ok(site: Site) -> None:
    put(site, site.path("f"), b"x")
    with pytest.raises(AlreadyExists):
        site.backend.mkdir(site.path("f"), exist_ok=True)
    assert get(site, site.path("f")) == b"x"


def test_mkdir_without_parents_needs_the_parent(site: Site) -> None:
    with pytest.raises(NotFound):
        site.backend.mkdir(site.path("no", "such"), parents=False)
    site.backend.mkdir(site.path("one"), parents=False)
    assert names(site) == {"one"}


def test_walk_visits_the_tree_depth_first(site: Site) -> None:
    site.backend.mkdir(site.path("a", "b"))
    put(site, site.path("a", "b", "f"), b"1")
    put(site, site.path("a", "g"), b"2")
    put(site, site.path("top"), b"3")
    seen = {rel: e.kind for rel, e in site.backend.walk(site.root)}
    assert seen == {"a": Kind.DIR, "a/b": Kind.DIR, "a/b/f": Kind.FILE, "a/g": Kind.FILE, "top": Kind.FILE}


# -- capabilities tell the truth --

# Every Capabilities field must be listed in exactly one of these, so a new flag cannot be added
# without deciding how the suite checks it.
_EXERCISED = {
    "streaming",  # every test above moves bytes through open_read/open_write
    "range_read",  # test_ranged_read (results are checked whatever the flag says)
    "resume_write",
    "atomic_commit",
    "server_side_copy",
    "hashes",
    "readback",
    "symlinks",
    "empty_dirs",
    "set_mtime",
    "mtime_precision",
    "case_insensitive",
    "max_connections",
    "delegated_transfer",  # test_delegated_transfer_is_offered (the task itself: tests/globus)
    "acl_share",  # test_acl_share_is_a_sharer (the rules themselves: tests/globus)
    "multipart_write",  # test_multipart_write_of_many_parts_arrives_intact
    "presign",  # test_presigned_download_link_serves_the_bytes
    "source_evidence",  # test_source_evidence_matches_the_bytes_and_refuses_others
    "modes",  # test_folder_modes
    "prefix_folders",  # test_prefix_folders_have_nothing_to_keep
    "hard_links",  # test_hard_links
    "sparse",  # test_sparse_writes_read_back_the_same
    "xattrs",  # test_xattrs
}
_INFORMATIONAL = {"slow_hash"}  # a cost hint for the planner; no behaviour to observe
# A new flag with no check yet goes here: then no backend may claim it until it brings one.
_NOT_YET_CHECKABLE: set[str] = set()


def test_every_capability_flag_is_covered_by_the_suite() -> None:
    fields = {f.name for f in dataclasses.fields(Capabilities)}
    assert fields == _EXERCISED | _INFORMATIONAL | _NOT_YET_CHECKABLE
    assert not (_EXERCISED & _INFORMATIONAL or _EXERCISED & _NOT_YET_CHECKABLE)


def test_uncheckable_capabilities_are_not_claimed(site: Site) -> None:
    if not _NOT_YET_CHECKABLE:
        pytest.skip("every capability flag has a check in this suite")
    caps = site.backend.capabilities
    claimed = [f for f in sorted(_NOT_YET_CHECKABLE) if getattr(caps, f)]
    assert claimed == [], f"{site.backend.scheme} claims {claimed}; add a conformance check first"


def test_multipart_write_of_many_parts_arrives_intact(site: Site) -> None:
    # A backend claiming multipart_write splits a large write into parts sent separately, and
    # offers ``use_part_size(n) -> used`` (its own knob, clamped to the service's floor) so the
    # test needs only a few parts. The writer reports ``part_count`` so the split is observable.
    b = site.backend
    if not b.capabilities.multipart_write:
        pytest.skip(f"{b.scheme} declares multipart_write=False")
    part = b.use_part_size(1)  # type: ignore[attr-defined]
    assert isinstance(part, int) and part > 0
    data = payload(2 * part + 12345, seed=7)  # two whole parts and a short last one
    w = b.open_write(site.path("multi.bin"), size=len(data), token="mp")
    for i in range(0, len(data), 1 << 20):
        w.write(data[i : i + (1 << 20)])
    w.finish()
    w.commit(overwrite=False)
    assert getattr(w, "part_count", None) == 3
    assert b.stat(site.path("multi.bin")).size == len(data)
    assert hashlib.sha256(get(site, site.path("multi.bin"))).digest() == hashlib.sha256(data).digest()


def test_presigned_download_link_serves_the_bytes(site: Site) -> None:
    # presign: the backend is a Sharer and its default link for an object is a plain URL that
    # anyone can fetch (no credentials, no SDK) and that serves exactly the object's bytes.
    import urllib.request

    from ferry.sharing.types import Sharer, ShareRequest

    b = site.backend
    if not b.capabilities.presign:
        pytest.skip(f"{b.scheme} declares presign=False")
    assert isinstance(b, Sharer)
    data = payload(70_000, seed=3)
    put(site, site.path("shared.bin"), data)
    link = b.share(site.path("shared.bin"), ShareRequest(expires=timedelta(minutes=5)))
    assert link.kind == "download" and link.url.startswith(("http://", "https://"))
    with urllib.request.urlopen(link.url, timeout=30) as resp:
        assert resp.read() == data


def test_delegated_transfer_is_offered(site: Site) -> None:
    # A backend claiming delegated_transfer hands a job between two of its sites to the service
    # (scheduler: transfers/delegated.find_delegation); one that does not, offers nothing.
    offer = getattr(site.backend, "delegation", None)
    if site.backend.capabilities.delegated_transfer:
        assert callable(offer)
        found = offer(site.backend, site.backend)
        assert found is not None and callable(getattr(found, "run_job", None))
    else:
        assert offer is None or offer(site.backend, site.backend) is None


def test_acl_share_is_a_sharer(site: Site) -> None:
    from ferry.sharing.types import Sharer

    if not site.backend.capabilities.acl_share:
        pytest.skip(f"{site.backend.scheme} declares acl_share=False")
    assert isinstance(site.backend, Sharer)


def test_streaming_is_declared(site: Site) -> None:
    # Every other test in this file streams bytes; a non-streaming backend needs its own fixture.
    assert site.backend.capabilities.streaming


def test_atomic_commit_hides_data_until_commit(site: Site) -> None:
    if not site.backend.capabilities.atomic_commit:
        pytest.skip(f"{site.backend.scheme} declares atomic_commit=False")
    w = site.backend.open_write(site.path("f"), size=3, token="t")
    w.write(b"abc")
    w.finish()
    assert "f" not in names(site)
    with pytest.raises(NotFound):
        site.backend.stat(site.path("f"))  # nothing under the final name before commit
    w.commit(overwrite=False)
    assert "f" in names(site)


@pytest.mark.parametrize("split", [0, 1, 4096, 1_000_000])
def test_resume_write_continues_at_offset(site: Site, split: int) -> None:
    data = payload(1_000_003)
    b, p = site.backend, site.path("f")
    w = b.open_write(p, size=len(data), token="job1")
    w.write(data[:split])
    w.abort(keep_partial=True)
    w2 = b.open_write(p, size=len(data), token="job1", resume=True)
    if not b.capabilities.resume_write:
        assert w2.offset == 0  # without the capability a resume must start over, not guess
        w2.abort()
        return
    assert w2.offset == split
    w2.write(data[w2.offset :])
    w2.finish()
    w2.commit(overwrite=False)
    assert get(site, p) == data
    assert names(site) == {"f"}


def test_resume_write_only_picks_up_its_own_token(site: Site) -> None:
    b, p = site.backend, site.path("f")
    w = b.open_write(p, size=10, token="job1")
    w.write(b"stale")
    w.abort(keep_partial=True)
    w2 = b.open_write(p, size=10, token="job2", resume=True)
    assert w2.offset == 0
    w2.write(b"fresh")
    w2.commit(overwrite=False)
    assert get(site, p) == b"fresh"
    w3 = b.open_write(p, size=10, token="job3", resume=True)  # nothing to resume: starts at 0
    assert w3.offset == 0
    w3.abort()
    w4 = b.open_write(p, size=10, token="job1", resume=False)  # not resuming: the partial restarts
    assert w4.offset == 0
    w4.write(b"x")
    w4.commit(overwrite=True)
    assert get(site, p) == b"x"
    assert names(site) == {"f"}


def test_resume_partial_is_a_hidden_tagged_name(site: Site) -> None:
    # Resume works by finding the partial again after a restart: it must be where temp_name says.
    if not site.backend.capabilities.resume_write:
        pytest.skip(f"{site.backend.scheme} declares resume_write=False")
    w = site.backend.open_write(site.path("f"), size=10, token="job1")
    w.write(b"12345")
    w.abort(keep_partial=True)
    assert w.temp_path == site.path(temp_name("f", "job1"))
    assert names(site) == {temp_name("f", "job1")}
    assert site.backend.stat(w.temp_path).size == 5


def test_readback_hash_is_the_true_hash(site: Site) -> None:
    b = site.backend
    data = payload(2_500_000)
    algos = [a for a in ("sha256", "blake3", "md5", "sha1") if a in b.capabilities.hashes] or ["sha256"]
    for algo in algos:
        p = site.path(f"f-{algo}")
        w = b.open_write(p, size=len(data), token="t", readback=algo)
        for k in range(0, len(data), 1 << 20):
            w.write(data[k : k + (1 << 20)])
        got = w.finish()
        w.commit(overwrite=False)
        if not b.capabilities.readback:
            assert got is None  # never a made-up hash
            continue
        assert got == true_hash(algo, data)


def test_readback_covers_a_resumed_file_from_its_start(site: Site) -> None:
    b = site.backend
    if not (b.capabilities.readback and b.capabilities.resume_write):
        pytest.skip(f"{b.scheme} lacks readback or resume_write")
    data = payload(300_000)
    w = b.open_write(site.path("f"), size=len(data), token="t")
    w.write(data[:100_000])
    w.abort(keep_partial=True)
    w2 = b.open_write(site.path("f"), size=len(data), token="t", resume=True, readback="sha256")
    assert w2.offset == 100_000
    w2.write(data[100_000:])
    assert w2.finish() == true_hash("sha256", data)
    w2.commit(overwrite=False)


def test_source_evidence_matches_the_bytes_and_refuses_others(site: Site) -> None:
    """A backend that says its store keeps evidence about objects (capabilities.source_evidence)
    implements the protocol, its check matches the object's own bytes and never matches others.
    Every other backend resolves no such feature."""
    b = site.backend
    if not b.capabilities.source_evidence:
        assert b.features.source_evidence is None
        return
    evidence = b.features.source_evidence
    assert evidence is not None, f"{b.scheme} claims source_evidence but has no evidence_for"
    data = payload(300_001)
    put(site, site.path("f"), data)
    entry = b.stat(site.path("f"))
    good = evidence.evidence_for(entry)
    good.update(data[:1000])
    good.update(data[1000:])
    ok = good.result()
    bad = evidence.evidence_for(entry)
    bad.update(data[:-1] + bytes([data[-1] ^ 1]))
    wrong = bad.result()
    if ok.evidence is None:  # the store keeps nothing for this object: it must say why
        assert ok.note and wrong.evidence is None
        return
    assert ok.matched, ok
    assert wrong.evidence is not None and not wrong.matched, wrong


def test_hash_agrees_with_the_bytes_written(site: Site) -> None:
    data = payload(5 * 1024 * 1024 + 7)  # more than one 4 MiB hashing chunk
    put(site, site.path("f"), data)
    for algo in site.backend.capabilities.hashes:
        assert site.backend.hash(site.path("f"), algo) == true_hash(algo, data), algo


def test_hash_refuses_undeclared_algorithms(site: Site) -> None:
    put(site, site.path("f"), b"x")
    with pytest.raises(Unsupported):
        site.backend.hash(site.path("f"), "not-an-algorithm")


def test_hash_of_missing_file_is_not_found(site: Site) -> None:
    if not site.backend.capabilities.hashes:
        pytest.skip(f"{site.backend.scheme} declares no hashes")
    with pytest.raises(NotFound):
        site.backend.hash(site.path("missing"), site.backend.capabilities.hashes[0])


def test_symlinks(site: Site) -> None:
    b = site.backend
    if not b.capabilities.symlinks:
        with pytest.raises(Unsupported):
            b.symlink("target", site.path("link"))
        assert names(site) == set()
        return
    site.backend.mkdir(site.path("d"))
    put(site, site.path("d", "inside"), b"x")
    b.symlink("d", site.path("link"))
    b.symlink("no such target", site.path("dangling"))  # dangling links are legal
    st = b.stat(site.path("link"))  # stat does not follow the final link
    assert (st.kind, st.link_target) == (Kind.LINK, "d")
    listed = {e.name: e for e in b.list(site.root)}
    assert listed["dangling"].kind is Kind.LINK and listed["dangling"].link_target == "no such target"
    # walk never follows links: nothing under "link/" is visited.
    assert {rel for rel, _ in b.walk(site.root)} == {"d", "d/inside", "link", "dangling"}
    with pytest.raises(AlreadyExists):
        b.symlink("elsewhere", site.path("link"))
    assert b.stat(site.path("link")).link_target == "d"
    b.remove(site.path("link"))  # removes the link, not what it points to
    assert get(site, site.path("d", "inside")) == b"x"


@pytest.mark.parametrize(
    "when",
    [
        datetime(2001, 2, 3, 4, 5, 6, 789012, tzinfo=UTC),
        datetime(2040, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),  # past 2038
        datetime(2024, 6, 1, 12, 0, 0, 123456, tzinfo=timezone(timedelta(hours=5, minutes=30))),
    ],
    ids=["2001", "2040", "non-utc-input"],
)
def test_set_mtime_within_declared_precision(site: Site, when: datetime) -> None:
    b = site.backend
    put(site, site.path("f"), b"x")
    if not b.capabilities.set_mtime:
        with pytest.raises(Unsupported):
            b.set_mtime(site.path("f"), when)
        return
    precision = b.capabilities.mtime_precision
    b.mkdir(site.path("d"))
    for name in ("f", "d"):
        b.set_mtime(site.path(name), when)
        got = b.stat(site.path(name)).mtime
        assert_utc(got)
        assert got is not None
        assert abs((got - when).total_seconds()) <= precision, (name, got, when)
    # commit(mtime=...) is the same promise, made at the moment the file appears.
    w = b.open_write(site.path("g"), size=1, token="t")
    w.write(b"y")
    w.commit(overwrite=False, mtime=when)
    got = b.stat(site.path("g")).mtime
    assert got is not None and abs((got - when).total_seconds()) <= precision


def test_folder_modes(site: Site) -> None:
    b = site.backend
    b.mkdir(site.path("d"))
    if not b.capabilities.modes:
        with pytest.raises(Unsupported):
            b.set_mode(site.path("d"), 0o2750)
        return
    b.set_mode(site.path("d"), 0o2750)
    assert b.stat(site.path("d")).mode == 0o2750


def test_prefix_folders_have_nothing_to_keep(site: Site) -> None:
    """A backend whose folders are only key prefixes (S3) has no folder of its own to keep
    permissions, a time or attributes on: none is listed, and it claims no folder modes."""
    b = site.backend
    if not b.capabilities.prefix_folders:
        pytest.skip(f"{b.scheme} has folders of its own")
    b.mkdir(site.path("d"))
    put(site, site.path("d", "f"), b"x")
    e = b.stat(site.path("d"))
    assert e.is_dir and e.mode is None and e.mtime is None, e
    assert not b.capabilities.modes
    listed = {x.name: x for x in b.list(site.root)}["d"]
    assert listed.is_dir and listed.mode is None and listed.mtime is None, listed


def test_hard_links(site: Site) -> None:
    b = site.backend
    put(site, site.path("f"), b"linked")
    if not b.capabilities.hard_links:
        with pytest.raises(Unsupported):
            b.hard_link(site.path("f"), site.path("g"))
        return
    b.hard_link(site.path("f"), site.path("g"))
    with pytest.raises(AlreadyExists):
        b.hard_link(site.path("f"), site.path("g"))
    put(site, site.path("h"), b"other")
    b.hard_link(site.path("f"), site.path("h"), overwrite=True)
    for name in ("g", "h"):
        e = b.stat(site.path(name))
        assert (e.nlink, e.inode, get(site, site.path(name))) == (3, b.stat(site.path("f")).inode, b"linked")


def test_sparse_writes_read_back_the_same(site: Site) -> None:
    data = b"\0" * (1 << 20) + b"middle" + b"\0" * 70_000
    w = site.backend.open_write(site.path("s"), size=len(data), token="sp")
    claimed = w.set_sparse()
    assert claimed == site.backend.capabilities.sparse
    for i in range(0, len(data), 100_000):
        w.write(data[i : i + 100_000])
    w.finish()
    w.commit(overwrite=False)
    assert get(site, site.path("s")) == data


def test_xattrs(site: Site) -> None:
    b = site.backend
    put(site, site.path("f"), b"x")
    b.mkdir(site.path("d"))
    if not b.capabilities.xattrs:
        with pytest.raises(Unsupported):
            b.get_xattrs(site.path("f"))
        return
    refused = b.set_xattrs(site.path("d"), {"user.ferry-test": b"1"})
    if refused:
        pytest.skip("this file system keeps no user xattrs")
    assert b.get_xattrs(site.path("d"))["user.ferry-test"] == b"1"
    w = b.open_write(site.path("g"), size=1, token="xa")
    assert w.set_xattrs({"user.ferry-test": b"2"}) == []
    w.write(b"y")
    w.finish()
    w.commit(overwrite=False)
    assert b.get_xattrs(site.path("g"))["user.ferry-test"] == b"2"


def test_mtime_precision_is_sane(site: Site) -> None:
    assert 0 < site.backend.capabilities.mtime_precision <= 2  # FAT's 2 s is the coarsest known


def test_server_side_copy(site: Site) -> None:
    b = site.backend
    server_copy = getattr(b, "server_copy", None)
    if not b.capabilities.server_side_copy:
        assert server_copy is None, "a server_copy method without the capability would be used by mistake"
        return
    # The call shape is LocalBackend.server_copy's (the only one so far); a backend whose
    # server-side copy needs another shape (S3 CopyObject) must extend this check, not skip it.
    assert callable(server_copy)
    data = payload(3 * 1024 * 1024 + 11)
    put(site, site.path("src"), data)
    w = b.open_write(site.path("dst"), size=len(data), token="t")
    counted: list[int] = []
    server_copy(site.path("src"), w, counted.append, CancelToken(), chunk=1 << 20)
    w.finish()
    w.commit(overwrite=False)
    assert get(site, site.path("dst")) == data
    assert sum(counted) == len(data)
    # A cancelled token stops the copy rather than finishing it.
    token = CancelToken()
    token.cancel()
    w2 = b.open_write(site.path("dst2"), size=len(data), token="t")
    with pytest.raises(Cancelled):
        server_copy(site.path("src"), w2, counted.append, token)
    w2.abort()


def test_empty_dirs_are_kept_and_listed(site: Site) -> None:
    b = site.backend
    b.mkdir(site.path("empty"))
    if not b.capabilities.empty_dirs:
        pytest.skip(f"{b.scheme} declares empty_dirs=False")
    assert {e.name: e.kind for e in b.list(site.root)} == {"empty": Kind.DIR}
    assert list(b.list(site.path("empty"))) == []


def test_case_sensitivity_matches_declaration(site: Site) -> None:
    put(site, site.path("Name.txt"), b"upper")
    if site.backend.capabilities.case_insensitive:
        assert get(site, site.path("name.txt")) == b"upper"
        return
    with pytest.raises(NotFound):
        site.backend.stat(site.path("name.txt"))
    put(site, site.path("name.txt"), b"lower")
    assert names(site) == {"Name.txt", "name.txt"}
    assert get(site, site.path("Name.txt")) == b"upper"


def test_max_connections_is_none_or_positive(site: Site) -> None:
    limit = site.backend.capabilities.max_connections
    assert limit is None or (isinstance(limit, int) and limit >= 1)


def test_declared_hashes_are_known_algorithms(site: Site) -> None:
    for algo in site.backend.capabilities.hashes:
        true_hash(algo, b"")  # raises for an algorithm neither hashlib nor blake3 knows
    assert len(set(site.backend.capabilities.hashes)) == len(site.backend.capabilities.hashes)
