"""The window runs the overnight queue too: its runner is as patient with outages as
``ferry queue run`` (issue 18)."""

from __future__ import annotations

from ferry.transfers.scheduler import DEFAULT_PATIENCE


def test_the_windows_queue_runner_waits_out_outages_as_queue_run_does() -> None:
    from ferry.ui.settings import TransferSettings

    assert DEFAULT_PATIENCE >= 3600
    assert TransferSettings().run_config().patience == DEFAULT_PATIENCE
