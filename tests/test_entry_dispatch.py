"""``ferry`` alone opens the window; subcommands never load Qt (see test_no_qt.py for imports)."""

from __future__ import annotations

import pytest

from ferry.__main__ import _wants_gui


@pytest.mark.parametrize(
    ("argv", "gui"),
    [
        ([], True),
        (["--demo"], True),
        (["sftp://cluster/scratch/me"], True),  # a URL handler or a second launch
        (["s3://bucket/"], True),
        (["ls", "s3://bucket/"], False),
        (["cp", "a", "b"], False),
        (["--help"], False),
        (["--version"], False),
        (["queue"], False),
    ],
)
def test_which_front_end(argv: list[str], gui: bool) -> None:
    assert _wants_gui(argv) is gui
