"""QA of issue 20 in the running window: a paused job's line uses the window's words, once.

Found under Xvfb: pausing a job showed "paused by you; Resume (or Resume in the window) continues
it" in the Transfers panel, the engine's own hint for the command line turned into nonsense."""

from __future__ import annotations

from ferry.transfers.control import PAUSED
from ferry.ui.queue_model import gui_message


def test_the_paused_line_says_resume_once() -> None:
    shown = gui_message(2, PAUSED)
    assert shown == "paused by you; Resume continues it", shown
    assert "ferry queue" not in (gui_message(7, "failed; 'ferry queue retry 7' tries again") or "")
