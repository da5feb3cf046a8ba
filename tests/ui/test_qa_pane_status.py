"""QA of the window (issue 22's site-to-site set-up): opening a saved S3 site at its top, the
status bar read ``bucket:: 0 items (0.2 s)`` (the site's ``bucket:`` and the line's own colon)."""

from __future__ import annotations

from pytestqt.qtbot import QtBot

from ferry.credentials.sites import Site, SiteStore
from ferry.ui.main_window import MainWindow
from ferry.ui.pane import listed_text


def test_a_sites_top_folder_is_named_once_in_the_status_line() -> None:
    top = str(Site("bucket", "s3://qabucket").base_address())
    assert top == "bucket:"
    assert listed_text(top, 0, 0.24) == "bucket: 0 items (0.2 s)"
    assert listed_text("cluster:/scratch/run42", 1, 0.04) == "cluster:/scratch/run42: 1 item (0.0 s)"
    assert listed_text("/data", 12_000, 1.0) == "/data: 12,000 items (1.0 s)"


def test_the_pane_says_it_after_a_listing(qtbot: QtBot, window: MainWindow) -> None:
    SiteStore().add("store", "memory://qa-status", {})
    said: list[str] = []
    window.left.status.connect(said.append)
    with qtbot.waitSignal(window.left.listed, timeout=20_000):
        window.left.navigate("store:")
    assert said[-1].startswith("store:/: 0 items ("), said
