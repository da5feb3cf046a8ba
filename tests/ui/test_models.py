"""The listing and queue models pass Qt's model tester, sort/filter correctly and keep selections."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from PySide6.QtCore import QModelIndex, Qt

from ferry.backends.base import Entry, Kind
from ferry.core.address import Address
from ferry.core.errors import Action
from ferry.core.outcomes import Evidence, Level, SkipReason, Verification
from ferry.transfers.options import JobOptions
from ferry.transfers.store import NewTask, Store, TaskResult
from ferry.ui.listing_model import KIND, MODIFIED, NAME, SIZE, EntryRole, ListingModel, display_name
from ferry.ui.queue_model import FILES, STATE, VERIFY, QueueModel, fix_for
from ferry.ui.queue_service import FileRow, JobRow, QueuePoller, QueueSnapshot

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def entries(n: int) -> list[Entry]:
    out = [Entry(path=f"/d/dir{i}", name=f"dir{i}", kind=Kind.DIR, mtime=T0 + timedelta(minutes=i)) for i in range(3)]
    out += [
        Entry(
            path=f"/d/f{i:03}.csv",
            name=f"f{i:03}.csv",
            kind=Kind.FILE,
            size=(i * 37) % 101,
            mtime=T0 + timedelta(hours=i),
        )
        for i in range(n)
    ]
    out.append(Entry(path="/d/.hidden", name=".hidden", kind=Kind.FILE, size=1, mtime=T0))
    out.append(Entry(path="/d/link", name="link", kind=Kind.LINK, size=4, mtime=T0, link_target="f001.csv"))
    out.append(
        Entry(path="/d/s3obj", name="s3obj", kind=Kind.FILE, size=9, mtime=T0, meta={"storage_class": "GLACIER"})
    )
    return out


def names(m: ListingModel) -> list[str]:
    return [m.entry(r).name for r in range(m.rowCount())]


def test_listing_model_passes_modeltester_while_filling_sorting_filtering(qtmodeltester) -> None:  # type: ignore[no-untyped-def]
    m = ListingModel()
    qtmodeltester.check(m)
    m.begin_listing(Address("memory", "/d", host="t"))
    all_entries = entries(50)
    for i in range(0, len(all_entries), 7):
        m.add_batch(all_entries[i : i + 7])
    m.end_listing()
    qtmodeltester.check(m)
    assert m.rowCount() == len(all_entries) - 1  # .hidden is hidden by default
    assert names(m)[:3] == ["dir0", "dir1", "dir2"]  # folders first
    m.sort(SIZE, Qt.SortOrder.DescendingOrder)
    qtmodeltester.check(m)
    files = [m.entry(r) for r in range(m.rowCount()) if not m.entry(r).is_dir]
    sizes = [e.size or 0 for e in files]
    assert sizes == sorted(sizes, reverse=True)
    m.sort(MODIFIED, Qt.SortOrder.AscendingOrder)
    m.set_filter("F00")  # case-insensitive
    assert names(m) == [f"f00{i}.csv" for i in range(10)]
    m.set_filter("")
    m.set_show_hidden(True)
    assert ".hidden" in names(m)
    qtmodeltester.check(m)


def test_listing_columns_say_what_each_entry_is() -> None:
    m = ListingModel()
    m.set_entries(entries(2), Address("memory", "/d", host="t"))
    by_name = {m.entry(r).name: r for r in range(m.rowCount())}

    def kind(name: str) -> object:
        return m.data(m.index(by_name[name], KIND))

    assert kind("dir0") == "Folder"
    assert kind("f000.csv") == "CSV file"
    assert kind("link") == "→ f001.csv"  # link target
    assert kind("s3obj") == "GLACIER"  # storage class on S3
    assert m.data(m.index(by_name["dir0"], SIZE)) == ""
    assert m.data(m.index(by_name["f001.csv"], SIZE)) == "37 B"
    assert isinstance(m.data(m.index(0, NAME), EntryRole), Entry)
    assert display_name("evil\x1b[2Jname\n") == "evil\\x1b[2Jname\\n"  # control characters shown escaped


def test_resorting_keeps_the_selection_on_the_same_entries(qtbot) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import QItemSelectionModel
    from PySide6.QtWidgets import QTreeView

    m = ListingModel()
    m.set_entries(entries(20), Address("memory", "/d", host="t"))
    view = QTreeView()
    qtbot.addWidget(view)
    view.setModel(m)
    row = names(m).index("f007.csv")
    view.selectionModel().select(
        m.index(row, 0), QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows
    )
    m.sort(SIZE, Qt.SortOrder.DescendingOrder)
    chosen = [m.entry(i.row()).name for i in view.selectionModel().selectedRows()]
    assert chosen == ["f007.csv"]


def job(
    i: int, state: str = "running", files: int = 10, done: int = 3, failed: int = 0, msg: str | None = None
) -> JobRow:
    return JobRow(
        id=i, state=state, message=msg, sources=(f"/src/{i}",), dest="/dst/", verify="sha256",
        files_total=files, files_done=done, files_failed=failed, files_skipped=0,
        bytes_total=files * 100, bytes_done=done * 100, planned=True, created=0.0, finished=None, speed=50.0,
    )  # fmt: skip


def test_queue_model_passes_modeltester_through_inserts_removals_and_file_pages(qtmodeltester) -> None:  # type: ignore[no-untyped-def]
    m = QueueModel()
    m.apply(QueueSnapshot([job(1), job(2, "queued"), job(3, "failed", failed=2, msg="Permission denied on /dst")]))
    assert m.rowCount() == 3
    # The view asks for the first page of job 1's files; the poller's next read brings them.
    parent = m.index(0, 0)
    assert m.canFetchMore(parent)
    m.fetchMore(parent)
    assert m.wanted == {1: 500}
    assert not m.canFetchMore(parent)  # asked already: no second request until the page arrives
    qtmodeltester.check(m)
    files = [FileRow(100 + k, f"f{k}", "done" if k < 3 else "queued", 100, "sha256", None, 1) for k in range(10)]
    m.apply(QueueSnapshot([job(1, done=4), job(3, "failed", failed=2, msg="Permission denied on /dst")], {1: files}))
    qtmodeltester.check(m)
    assert m.rowCount() == 2  # job 2 went away (cleared)
    assert m.rowCount(m.index(0, 0)) == 10
    assert m.data(m.index(0, FILES)) == "4 / 10"
    files[5] = FileRow(105, "f5", "failed", 100, None, "No space left on the destination", 2)
    m.apply(QueueSnapshot([job(1, done=4), job(3, "failed", failed=2, msg="x")], {1: files}))
    child = m.index(5, STATE, m.index(0, 0))
    assert m.data(child) == "failed: No space left on the destination"
    m.collapse(1)
    assert m.rowCount(m.index(0, 0)) == 0
    qtmodeltester.check(m)


def test_queue_filters_and_failure_fixes() -> None:
    m = QueueModel()
    snap = QueueSnapshot([job(1), job(2, "queued"), job(3, "failed", failed=1, msg="x"), job(4, "done", done=10)])
    m.apply(snap)
    for name, expected in (("active", [1]), ("queued", [2]), ("failed", [3]), ("done", [4]), ("all", [1, 2, 3, 4])):
        m.set_filter(name)
        assert [j.id for j in m.jobs()] == expected, name
    assert m.data(m.index(2, STATE)) == "failed: x"
    assert fix_for(Action.TRUST_HOST_KEY) == (Action.TRUST_HOST_KEY, "Trust key…")
    assert fix_for(Action.LOGIN) == (Action.LOGIN, "Log in again")
    assert fix_for(Action.FREE_SPACE) == (Action.FREE_SPACE, "Free space, then retry")
    assert fix_for(None) == (Action.RETRY, "Retry")
    assert fix_for(None, failed=False) is None
    assert not m.index(9, 0).isValid() and m.parent(QModelIndex()) == QModelIndex()


def test_a_finished_job_says_what_its_files_reached(tmp_path: Path) -> None:
    """While a job runs the Verify column names the mode asked for; once it is over it says what
    the files reached, from the typed outcomes (never the configured method over files that were
    size-checked or skipped), and the Fix button offers the action the engine stored."""
    store = Store(tmp_path / "queue.db")
    try:
        job_id = store.create_job(["/src"], "/dst", JobOptions(verify="blake3"), [("/src", "/dst", "src")])
        names = ("a", "b", "c", "d")
        store.add_tasks(job_id, [NewTask("file", f"/src/{n}", f"/dst/{n}", n, 10, None) for n in names])
        ids = [t.id for t in store.tasks(job_id)]
        poller = QueuePoller(None, lambda fn: None, lambda snap: None)
        checked = Verification(Level.CHECKSUM, "blake3", (Evidence.READBACK,), "blake3 match")
        store.finish_tasks([TaskResult.done(ids[0], 1, checked, "ab")])
        running = poller.read(store).jobs[0]
        assert running.outcomes is None  # not counted while the job runs
        # The note of a size-checked file may say anything: only its level counts.
        size = Verification(Level.SIZE, "blake3", (), "blake3 match? no: size only")
        store.finish_tasks(
            [
                TaskResult.done(ids[1], 1, size, "cd"),
                TaskResult.done(ids[2], 1, size, "ef"),
                TaskResult.skipped(ids[3], 1, SkipReason.IDENTICAL, "already there"),
            ]
        )
        store.set_job_state(job_id, "done")
        row = poller.read(store).jobs[0]
        assert row.outcomes is not None and row.outcomes.below(Level.CHECKSUM) == 2
        store.set_job_state(
            job_id, "failed", "wrong password? no: the bucket said so", error_kind="auth", error_action=Action.LOGIN
        )
        failed = poller.read(store).jobs[0]
    finally:
        store.close()
    m = QueueModel()
    m.apply(QueueSnapshot([running]))
    assert m.data(m.index(0, VERIFY)) == "will check blake3"  # a running job has checked nothing yet
    m.apply(QueueSnapshot([row]))
    assert m.data(m.index(0, VERIFY)) == "3 copied: 1 blake3-checked, 2 size only; 1 skipped (1 identical)"
    assert fix_for(failed.error_action) == (Action.LOGIN, "Log in again")
