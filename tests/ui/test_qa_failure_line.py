"""QA of issue 20 in the running window: a refused write's cause is readable, not only its advice.

Found under Xvfb (a file sent with F5 to a read-only folder on the loopback sshd): the job failed at
once and the panel offered "Check permissions, then retry", but the cause ("Permission denied:
/…/readonly/a.h5") was only in the State cell, cut to "failed: 1 failed — P…" at 1024 px, and the
line under the panel said "1 file(s) failed; Retry tries them again" without it. The same for a
job still running whose first file failed for good. Selecting the row now shows the cause there."""

from __future__ import annotations

from pytestqt.qtbot import QtBot

from ferry.core.errors import Action
from ferry.ui.queue_model import QueueModel
from ferry.ui.queue_panel import QueuePanel
from ferry.ui.queue_service import JobRow, QueueSnapshot

CAUSE = "Permission denied: /srv/readonly/a.h5"


def job_row(**kw: object) -> JobRow:
    base: dict[str, object] = dict(
        id=3, state="failed", message="1 file(s) failed; 'ferry queue retry 3' tries them again",
        sources=("/data/a.h5",), dest="sftp://hpc/srv/readonly/", verify="sha256",
        files_total=1, files_done=0, files_failed=1, files_skipped=0, bytes_total=5000, bytes_done=0,
        planned=True, created=0.0, finished=1.0, problem_kind="permission-denied", problem=CAUSE,
        error_action=Action.CHECK_PERMISSIONS,
    )  # fmt: skip
    base.update(kw)
    return JobRow(**base)  # type: ignore[arg-type]


def selected_line(qtbot: QtBot, row: JobRow) -> str:
    model = QueueModel()
    model.apply(QueueSnapshot([row]))
    panel = QueuePanel(model)
    qtbot.addWidget(panel)
    panel.resize(1024, 200)
    panel.show()
    panel.view.setCurrentIndex(model.index(0, 0))
    return panel.fix_label.text()


def test_a_failed_jobs_line_says_the_cause_and_what_to_do(qtbot: QtBot) -> None:
    line = selected_line(qtbot, job_row())
    assert line.startswith("Job 3: 1 file(s) failed; Retry tries them again"), line
    assert CAUSE in line and "check permissions" in line.lower(), line


def test_a_running_jobs_first_failure_is_said_while_the_rest_go_on(qtbot: QtBot) -> None:
    line = selected_line(qtbot, job_row(state="running", message=None, files_total=5, finished=None))
    assert line.startswith("Job 3: ") and CAUSE in line, line
