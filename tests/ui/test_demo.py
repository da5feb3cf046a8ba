"""``ferry --demo``: throwaway loopback SFTP (OpenSSH) and S3 (moto) servers with sample data."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pytestqt.qtbot import QtBot

from ferry.ui.demo import BUCKET, SSH_ALIAS, DemoServers
from ferry.ui.main_window import MainWindow
from sshd import require_sshd
from ui.helpers_ui import wait_job


@pytest.fixture
def demo() -> Iterator[DemoServers]:
    from ferry.backends import sftp

    require_sshd()
    d = DemoServers()
    d.start()
    yield d
    sftp.close_all()
    d.stop()


def test_demo_opens_the_window_on_sample_data_and_copies_to_the_sftp_server(
    qtbot: QtBot, window: MainWindow, demo: DemoServers
) -> None:
    assert demo.problems == []
    with qtbot.waitSignal(window.right.listed, timeout=30_000):
        demo.open_in(window)
    qtbot.waitUntil(lambda: not window.left.loading, timeout=10_000)
    assert {e.name for e in window.left.model.entries()} >= {"README.txt", "results", "many-small-files"}
    assert {e.name for e in window.right.model.entries()} >= {"README.txt", "results"}, window.right.error_text
    labels = [window.right.site.itemText(i) for i in range(window.right.site.count())]
    assert f"Demo: {SSH_ALIAS}:{demo.remote}" in labels
    with qtbot.waitSignal(window.job_created, timeout=20_000) as created:
        window.queue_transfer([str(demo.local / "notes")], f"{SSH_ALIAS}:{demo.remote}/from-laptop/")
    assert wait_job(qtbot, created.args[0], ("done", "failed"), timeout=60_000) == "done"
    assert (demo.remote / "from-laptop" / "notes" / "2026-11-23.md").read_text().startswith("# Lab notes")


def test_demo_s3_bucket_lists_when_the_s3_backend_is_installed(qtbot, window: MainWindow, demo: DemoServers) -> None:  # type: ignore[no-untyped-def]
    from ferry.backends.registry import backend_class

    try:
        backend_class("s3")
    except Exception as exc:  # the S3 backend is another issue's work and may not be merged yet
        pytest.skip(f"S3 backend not available in this tree: {exc}")
    with qtbot.waitSignal(window.right.listed, timeout=30_000):
        window.right.navigate(f"s3://{BUCKET}/")
    assert {e.name for e in window.right.model.entries()} >= {"README.txt", "results"}, window.right.error_text
