"""QA of the site-to-site route in the window (issue 22) and of the tuner's choice shown there
(issue 21), found driving the real window under Xvfb: a job whose bytes went host → bucket
directly had its Speed tooltip say "auto: 4 files at once (measuring)" long after it finished,
though the tuned workers never moved its files (the host's curl did), and nothing in the row said
how its bytes travelled beyond the ``direct:`` prefix, nor why a job was relayed."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from ferry.credentials.sites import SiteStore
from ferry.transfers.options import JobOptions
from ferry.transfers.store import NewTask, Store
from ferry.transfers.tuning import TUNING_KEY, Choice, Why
from ferry.ui.queue_model import BYTES, FILES, SPEED, TITLE, VERIFY, QueueModel
from ferry.ui.queue_service import QueuePoller
from ui.helpers_ui import panel_with_first_job_selected

# What the engine records for every job today, the direct ones included (never past measuring).
MEASURING = Choice(4, Why.MEASURING)


def _job(store: Store, route: str, reason: str | None) -> int:
    job = store.create_job(["sftp://cluster/scratch/run42"], "s3://bucket/run42/", JobOptions(recursive=True), [])
    store.add_tasks(job, [NewTask("file", "sftp://cluster/scratch/run42/a", "s3://bucket/run42/a", "a", 10, None)])
    store.set_job_state(job, "running")
    store.set_route(job, route, reason)
    store.set_job_value(job, TUNING_KEY, MEASURING.to_json())
    return job


def test_a_direct_job_never_shows_the_tuners_choice_and_says_its_route(qtbot: QtBot, tmp_path: Path) -> None:
    store = Store(tmp_path / "queue.db")
    job = _job(store, "direct", None)
    snap = QueuePoller(None, lambda fn: None, lambda snap: None).read(store)
    row = snap.jobs[0]
    assert row.tuning is None  # the host moved the files, not the tuned workers
    model, panel = panel_with_first_job_selected(qtbot, snap)
    assert "files at once" not in panel.fix_label.text()
    speed_tip = model.index(0, SPEED).data(Qt.ItemDataRole.ToolTipRole)
    assert "measuring" not in speed_tip and "direct route" in speed_tip
    title_tip = model.index(0, TITLE).data(Qt.ItemDataRole.ToolTipRole)
    assert title_tip.splitlines()[-1] == "Route: direct (site to site: the bytes do not pass through this computer)"
    assert model.index(0, TITLE).data().startswith(f"#{job}  direct: ")


def test_a_relayed_job_says_why_not_direct_and_keeps_the_tuners_choice(qtbot: QtBot, tmp_path: Path) -> None:
    store = Store(tmp_path / "queue.db")
    _job(store, "relay", "the host cluster has no curl")
    snap = QueuePoller(None, lambda fn: None, lambda snap: None).read(store)
    assert snap.jobs[0].tuning == MEASURING.describe()
    model = QueueModel()
    model.apply(snap)
    title_tip = model.index(0, TITLE).data(Qt.ItemDataRole.ToolTipRole)
    assert title_tip.splitlines()[-1] == "Route: through this computer (the host cluster has no curl)"
    assert model.index(0, SPEED).data(Qt.ItemDataRole.ToolTipRole) == f"How it moves: {MEASURING.describe()}"


def test_a_jobs_row_names_the_saved_sites_it_runs_between(
    qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row read ``direct: sftp://me@127.0.0.1:46503/tmp/ferr…/run42 → s3://qabucket/`` for a
    drag from the pane showing the site ``cluster`` to the one showing ``bucket``."""
    monkeypatch.setenv("FERRY_CONFIG_DIR", str(tmp_path / "config"))
    sites = SiteStore()
    sites.add("cluster", "sftp://me@127.0.0.1:46503/scratch", {})
    sites.add("bucket", "s3://qabucket", {"endpoint_url": "http://127.0.0.1:9000"})
    store = Store(tmp_path / "queue.db")
    src, dest = "sftp://me@127.0.0.1:46503/scratch/run42", "s3://qabucket/"
    job = store.create_job([src], dest, JobOptions(recursive=True), [])
    store.set_route(job, "direct", None)
    other = store.create_job(["sftp://me@127.0.0.1:46503/scratchy/x"], "s3://qabucket2/in/", JobOptions(), [])
    snap = QueuePoller(None, lambda fn: None, lambda snap: None).read(store)
    model = QueueModel()
    model.apply(snap)
    by_id = {model.index(r, 0).data().split()[0]: r for r in range(model.rowCount())}
    row = by_id[f"#{job}"]
    assert model.index(row, TITLE).data() == f"#{job}  direct: cluster:run42 → bucket:"
    assert model.index(row, TITLE).data(Qt.ItemDataRole.ToolTipRole).splitlines()[:2] == [src, f"→ {dest}"]
    # Not under a site (a longer name is not a folder of it): the addresses, whole.
    assert model.index(by_id[f"#{other}"], TITLE).data().endswith("/scratchy/x → s3://qabucket2/in/")
    # Two sites with the same base: which one is unknown, so the address.
    sites.add("cluster2", "sftp://me@127.0.0.1:46503/scratch/", {})
    snap = QueuePoller(None, lambda fn: None, lambda snap: None).read(store)
    assert {r.shown_sources[0] for r in snap.jobs} >= {src}


def test_cells_cut_short_in_their_column_read_whole_on_hover(qtbot: QtBot, tmp_path: Path) -> None:
    """Under Xvfb a finished job of 1,500 files read "1,500 / …" and "1,500 copied…", a direct
    job "7 copied: 7 s…", with no tooltip to read them whole."""
    store = Store(tmp_path / "queue.db")
    job = store.create_job(["/data/many"], "s3://bucket/", JobOptions(recursive=True), [])
    store.add_tasks(
        job, [NewTask("file", f"/data/many/{i}", f"s3://bucket/{i}", str(i), 16, None) for i in range(1500)]
    )
    store.mark_planned(job)
    store.set_job_state(job, "running")
    model = QueueModel()
    model.apply(QueuePoller(None, lambda fn: None, lambda snap: None).read(store))
    for col in (BYTES, FILES, VERIFY):
        index = model.index(0, col)
        assert index.data(Qt.ItemDataRole.ToolTipRole) == index.data(), col
    assert model.index(0, FILES).data(Qt.ItemDataRole.ToolTipRole) == "0 / 1,500"
