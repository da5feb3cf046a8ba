"""The window's "Compare panes" view and its "Synchronise" preview, on real local folders.

The view runs the engine's comparison on a worker thread and streams it into its model; the
preview's Enter is Cancel; a confirmed sync is one job in the queue, run by the window's runner
through the same engine path as ``ferry sync`` (``transfers.sync.queue_sync``), copied and verified.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog

from ferry.core.outcomes import Level
from ferry.transfers.compare import State
from ferry.transfers.store import Store
from ferry.ui.compare_view import CompareView
from sshd import SshServer, require_sshd
from ui.helpers_ui import wait_job

T = 1_700_000_000  # a fixed modification time, so "same" files are the same by size and time


def _file(path: Path, data: bytes, mtime: int = T) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (mtime, mtime))


def _trees(tmp_path: Path) -> tuple[Path, Path]:
    left, right = tmp_path / "left", tmp_path / "right"
    _file(left / "only_left.txt", b"L")
    _file(left / "sub" / "deep_left.txt", b"deep")
    _file(right / "only_right.txt", b"R")
    for side in (left, right):
        _file(side / "same.txt", b"same bytes")
        _file(side / "sub" / "same2.txt", b"also same")
    _file(left / "bigger.txt", b"0123456789")
    _file(right / "bigger.txt", b"0123")
    _file(left / "newer.txt", b"abcd", T + 100)
    _file(right / "newer.txt", b"abcd", T)
    _file(left / "content.txt", b"AAAA")  # same size and time: only a checksum tells them apart
    _file(right / "content.txt", b"BBBB")
    return left, right


def _open(qtbot, window, left: Path, right: Path | str) -> CompareView:  # type: ignore[no-untyped-def]
    window.left.navigate(str(left))
    window.right.navigate(str(right))
    window.action_map["compare"].trigger()
    view = window.findChild(CompareView, "compareView")
    assert isinstance(view, CompareView)
    qtbot.waitUntil(lambda: not view.running, timeout=30_000)
    return view


def _states(view: CompareView) -> dict[str, State]:
    return {item.rel: item.state for item in view.model.items}


def _jobs() -> list[int]:
    store = Store()
    try:
        return [j.id for j in store.jobs()]
    finally:
        store.close()


def test_compare_view_lists_each_state_and_filters(qtbot, window, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    left, right = _trees(tmp_path)
    view = _open(qtbot, window, left, right)
    states = _states(view)
    assert states["only_left.txt"] is State.ONLY_A
    assert states["sub/deep_left.txt"] is State.ONLY_A
    assert states["only_right.txt"] is State.ONLY_B
    assert states["bigger.txt"] is State.DIFFERENT
    assert states["newer.txt"] is State.DIFFERENT
    assert states["same.txt"] is State.SAME
    assert states["sub/same2.txt"] is State.SAME
    assert states["content.txt"] is State.SAME  # by size and time, as 'ferry compare' without --by checksum
    rows = {
        view.model.data(view.model.index(r, 1)): view.model.data(view.model.index(r, 4))
        for r in range(view.model.rowCount())
    }
    assert rows["bigger.txt"] == "size" and rows["newer.txt"] == "time"
    t = view.totals
    assert (t.only_a, t.only_b, t.different, t.same) == (2, 1, 2, 3)
    assert view.counts.text().startswith("2 only left, 1 only right, 2 different")

    view.filters[State.SAME].setChecked(False)
    view.filters[State.ONLY_B].setChecked(False)
    shown = {view.proxy.data(view.proxy.index(r, 1)) for r in range(view.proxy.rowCount())}
    assert "same.txt" not in shown and "only_right.txt" not in shown
    assert {"only_left.txt", "bigger.txt", "newer.txt", "sub/deep_left.txt"} <= shown
    view.filters[State.SAME].setChecked(True)
    assert "same.txt" in {view.proxy.data(view.proxy.index(r, 1)) for r in range(view.proxy.rowCount())}

    # Content, as 'ferry compare --by checksum': the same size and time, other bytes.
    view.checksum.setChecked(True)
    view.start()
    qtbot.waitUntil(lambda: not view.running, timeout=30_000)
    item = next(i for i in view.model.items if i.rel == "content.txt")
    how = str(view.model.data(view.model.index(view.model.items.index(item), 4)))
    assert item.state is State.DIFFERENT and how.startswith("content; sha256: A read, B read"), how
    assert view.totals.read_a >= 1  # local files are read to compare them, and the view says so


def test_enter_in_the_sync_preview_changes_nothing(qtbot, window, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    left, right = _trees(tmp_path)
    view = _open(qtbot, window, left, right)
    view.sync_right.click()
    qtbot.waitUntil(lambda: view.preview is not None and view.preview.isVisible(), timeout=30_000)
    dlg = view.preview
    assert dlg is not None
    assert "3 file(s) to copy" not in dlg.summary.text()  # only_left, deep_left: two new files
    assert "2 file(s) to copy, 2 to replace" in dlg.summary.text()
    assert "Nothing is deleted: 1 file(s) only in the destination stay" in dlg.summary.text()
    qtbot.keyClick(dlg, Qt.Key.Key_Return)
    assert dlg.result() == QDialog.DialogCode.Rejected
    qtbot.wait(300)
    assert _jobs() == []
    assert not (right / "only_left.txt").exists()
    assert (right / "bigger.txt").read_bytes() == b"0123"


def test_confirmed_sync_is_one_verified_job(qtbot, window, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    left, right = _trees(tmp_path)
    view = _open(qtbot, window, left, right)
    view.sync_right.click()
    qtbot.waitUntil(lambda: view.preview is not None and view.preview.isVisible(), timeout=30_000)
    assert view.preview is not None
    view.preview.start.click()
    qtbot.waitUntil(lambda: len(_jobs()) == 1, timeout=30_000)
    (job_id,) = _jobs()
    wait_job(qtbot, job_id)
    assert (right / "only_left.txt").read_bytes() == b"L"
    assert (right / "sub" / "deep_left.txt").read_bytes() == b"deep"
    assert (right / "bigger.txt").read_bytes() == b"0123456789"
    assert (right / "newer.txt").stat().st_mtime == T + 100
    assert (right / "only_right.txt").exists()  # the window never deletes
    assert (right / "content.txt").read_bytes() == b"BBBB"  # the same by size and time: not copied
    store = Store()
    try:
        counts = store.outcome_counts(job_id)
    finally:
        store.close()
    assert counts.copied == {Level.CHECKSUM: 4}, counts
    assert not counts.failed_total and not counts.open
    # Compared again, the two panes now differ only by what the window leaves alone.
    view.start()
    qtbot.waitUntil(lambda: not view.running, timeout=30_000)
    assert (view.totals.only_a, view.totals.only_b, view.totals.different) == (0, 1, 0)


def test_stop_cancels_the_comparison(qtbot, window, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    left, right = tmp_path / "left", tmp_path / "right"
    for i in range(200):
        _file(left / f"d{i:03}" / "f.txt", b"x")
    right.mkdir()
    view = _open(qtbot, window, left, right)
    assert view.totals.only_a == 200
    view.start()
    token = view._cancel
    view.stop()
    assert token is not None and token.cancelled
    assert not view.running and "stopped" in view.counts.text()
    qtbot.wait(500)
    assert view.model.rowCount() == 0  # what the stopped comparison still sends is dropped
    assert view.stop_btn.isEnabled() is False


def _sync_with_delete(qtbot, window, left: Path, right: Path) -> tuple[CompareView, int]:  # type: ignore[no-untyped-def]
    view = _open(qtbot, window, left, right)
    view.sync_right.click()
    qtbot.waitUntil(lambda: view.preview is not None and view.preview.isVisible(), timeout=30_000)
    dlg = view.preview
    assert dlg is not None
    assert not dlg.delete.isChecked()  # deleting is asked for, never the default
    dlg.delete.setChecked(True)
    dlg.start.click()
    qtbot.waitUntil(lambda: len(_jobs()) == 1, timeout=30_000)
    return view, _jobs()[0]


def test_sync_deletes_only_after_every_copy_verified(qtbot, window, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    left, right = _trees(tmp_path)
    view = _open(qtbot, window, left, right)
    view.sync_right.click()
    qtbot.waitUntil(lambda: view.preview is not None and view.preview.isVisible(), timeout=30_000)
    assert view.preview is not None
    view.preview.delete.setChecked(True)
    assert "1 file(s) only in the destination will be deleted" in view.preview.summary.text()
    assert "delete   only_right.txt" in view.preview.lines.toPlainText()
    view.preview.reject()
    view.preview = None
    view, job_id = _sync_with_delete(qtbot, window, left, right)
    assert wait_job(qtbot, job_id) == "done"
    qtbot.waitUntil(lambda: view.last_deleted is not None, timeout=30_000)
    assert view.last_deleted is not None
    refusal, done = view.last_deleted
    assert refusal is None and done.deleted == 1 and not done.kept
    assert not (right / "only_right.txt").exists()
    assert (right / "only_left.txt").read_bytes() == b"L"


def test_sync_deletes_nothing_when_a_copy_failed(qtbot, window, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    left, right = _trees(tmp_path)
    _file(left / "clash", b"a file here")  # a folder there: this copy fails
    _file(right / "clash" / "inner.txt", b"in the folder")
    view, job_id = _sync_with_delete(qtbot, window, left, right)
    assert wait_job(qtbot, job_id, ("done", "failed")) == "failed"
    qtbot.waitUntil(lambda: view.last_deleted is not None, timeout=30_000)
    assert view.last_deleted is not None
    refusal, done = view.last_deleted
    assert refusal is not None and "nothing was deleted" in refusal and done.deleted == 0
    assert (right / "only_right.txt").read_bytes() == b"R"
    assert (right / "clash" / "inner.txt").exists()
    assert (right / "only_left.txt").read_bytes() == b"L"  # the other copies were made


def test_deleting_more_than_half_needs_the_persons_say_so(qtbot, window, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """As 'ferry sync --max-delete N': the engine refuses to delete more than half of the
    destination; the preview offers to allow exactly that many, never for an empty source."""
    left, right = tmp_path / "left", tmp_path / "right"
    _file(left / "keep.txt", b"k")
    _file(left / "new.txt", b"n")
    _file(right / "keep.txt", b"k")
    for i in range(4):
        _file(right / f"old{i}.txt", b"o")
    view = _open(qtbot, window, left, right)
    view.sync_right.click()
    qtbot.waitUntil(lambda: view.preview is not None and view.preview.isVisible(), timeout=30_000)
    dlg = view.preview
    assert dlg is not None
    assert dlg.allow_more.isHidden()  # nothing to allow while nothing is to be deleted
    dlg.delete.setChecked(True)
    assert "Refused" in dlg.summary.text() and not dlg.start.isEnabled()
    assert not dlg.allow_more.isHidden() and "4 of the destination's 5 files" in dlg.allow_more.text()
    dlg.allow_more.setChecked(True)
    assert dlg.start.isEnabled() and dlg.max_delete == 4
    assert "4 file(s) only in the destination will be deleted" in dlg.summary.text()
    dlg.start.click()
    qtbot.waitUntil(lambda: len(_jobs()) == 1, timeout=30_000)
    assert wait_job(qtbot, _jobs()[0]) == "done"
    qtbot.waitUntil(lambda: view.last_deleted is not None, timeout=30_000)
    assert sorted(p.name for p in right.iterdir()) == ["keep.txt", "new.txt"]


def test_rows_arrive_in_batches_as_the_comparison_goes(  # type: ignore[no-untyped-def]
    qtbot, window, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ferry.ui import compare_view

    monkeypatch.setattr(compare_view, "BATCH", 10)
    left, right = tmp_path / "left", tmp_path / "right"
    for i in range(100):
        _file(left / f"f{i:03}.txt", b"x")
    right.mkdir()
    view = _open(qtbot, window, left, right)
    inserts: list[int] = []
    view.model.rowsInserted.connect(lambda _p, first, last: inserts.append(last - first + 1))
    view.start()
    qtbot.waitUntil(lambda: not view.running, timeout=30_000)
    assert sum(inserts) == 100 and len(inserts) >= 10 and max(inserts) <= 10, inserts


@pytest.fixture
def server() -> Iterator[SshServer]:
    require_sshd()
    with SshServer() as s:
        yield s


def test_compare_and_sync_with_the_loopback_sshd(qtbot, window, tmp_path: Path, server: SshServer) -> None:  # type: ignore[no-untyped-def]
    from ferry.backends import sftp

    sftp.close_all()
    left, _ = _trees(tmp_path)
    target = server.mkdir()
    _, right = _trees(target)
    server.chown(right)
    Path(os.environ["FERRY_SSH_CONFIG"]).write_text(server.ssh_config_block("cluster"))
    try:
        view = _open(qtbot, window, left, f"cluster:{right}")
        states = _states(view)
        assert states["only_left.txt"] is State.ONLY_A and states["only_right.txt"] is State.ONLY_B
        assert states["bigger.txt"] is State.DIFFERENT and states["newer.txt"] is State.DIFFERENT
        assert states["same.txt"] is State.SAME
        view.checksum.setChecked(True)
        view.start()
        qtbot.waitUntil(lambda: not view.running, timeout=30_000)
        item = next(i for i in view.model.items if i.rel == "content.txt")
        assert item.state is State.DIFFERENT and "hashed on the server" in item.how, item.how
        view.sync_right.click()
        qtbot.waitUntil(lambda: view.preview is not None and view.preview.isVisible(), timeout=30_000)
        assert view.preview is not None
        # By checksum: content.txt is replaced, newer.txt (same bytes, another time) is not.
        replaced = {rel for a, rel, _n in view.preview.plan.actions if a.value == "replace"}
        assert replaced == {"bigger.txt", "content.txt"}, view.preview.plan.actions
        assert "2 file(s) to copy, 2 to replace" in view.preview.summary.text()
        view.preview.start.click()
        qtbot.waitUntil(lambda: len(_jobs()) == 1, timeout=30_000)
        (job_id,) = _jobs()
        assert wait_job(qtbot, job_id) == "done"
        assert (right / "sub" / "deep_left.txt").read_bytes() == b"deep"
        assert (right / "content.txt").read_bytes() == b"AAAA"
        view.start()
        qtbot.waitUntil(lambda: not view.running, timeout=30_000)
        assert (view.totals.only_a, view.totals.only_b, view.totals.different) == (0, 1, 0)
    finally:
        sftp.close_all()
