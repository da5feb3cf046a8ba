"""The window says how many files move at once and why (``--parallel auto``, the default): in the
line under the Transfers panel for a selected running job, and in the Speed cell's tooltip. The
job's row reads the choice the engine recorded (tuning.Choice), never words of its own."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from ferry.transfers.options import JobOptions
from ferry.transfers.store import NewTask, Store
from ferry.transfers.tuning import TUNING_KEY, Choice, Measure, Why
from ferry.ui.dialogs.transfer_settings import TransferSettingsDialog
from ferry.ui.queue_model import SPEED
from ferry.ui.queue_service import QueuePoller
from ferry.ui.settings import TransferSettings
from ui.helpers_ui import panel_with_first_job_selected

CHOICE = Choice(32, Why.PLATEAU, Measure(32, 0, 812.0, 13e6), Measure(64, 0, 830.0, 13.6e6))


def test_a_running_jobs_row_says_files_at_once_and_why(qtbot: QtBot, tmp_path: Path) -> None:
    store = Store(tmp_path / "queue.db")
    job = store.create_job(["/data/run42"], "s3://bucket/run42/", JobOptions(recursive=True), [])
    store.add_tasks(job, [NewTask("file", "/data/run42/a", "s3://bucket/run42/a", "a", 10, None)])
    store.set_job_state(job, "running")
    poller = QueuePoller(None, lambda fn: None, lambda snap: None)
    assert poller.read(store).jobs[0].tuning is None  # nothing chosen yet: nothing said
    store.set_job_value(job, TUNING_KEY, CHOICE.to_json())
    snap = poller.read(store)
    row = snap.jobs[0]
    assert row.tuning == "auto: 32 files at once (64 at once was no faster: 830 files/s against 812 files/s)"
    model, panel = panel_with_first_job_selected(qtbot, snap)
    assert panel.fix_label.text() == f"Job {job}: {row.tuning}"
    tip = model.index(0, SPEED).data(Qt.ItemDataRole.ToolTipRole)
    assert tip == f"How it moves: {row.tuning}"


def test_the_windows_default_is_auto(qtbot: QtBot) -> None:
    ts = TransferSettings()
    dlg = TransferSettingsDialog(ts)
    qtbot.addWidget(dlg)
    assert dlg.parallel.text() == "Auto"
    assert ts.parallel == 0
    config = ts.run_config()
    assert config.auto_parallel and config.parallel >= 64
    ts.validate()  # 0 (Auto) is a valid setting
    fixed = TransferSettings(parallel=8).run_config()
    assert not fixed.auto_parallel and fixed.parallel == 8
