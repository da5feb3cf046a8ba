"""The fast tier of the test suite: the tests that need no server, no display and no Globus fake,
less the end-to-end runs that wait on real time. ``scripts/test.sh --fast`` runs it after ruff,
mypy and lint-imports; the whole is meant to stay under a minute on a 2-core machine. The full
suite (``scripts/test.sh``, CI) still runs everything, these tests included.

    .venv/bin/python scripts/fast_tier.py [pytest arguments]

What is left out, and why:

* folders whose tests start servers or need Qt: tests/sftp (sshd), tests/s3 (moto, rclone),
  tests/globus (the Globus fake), tests/ui (a display), tests/packaging (builds the bundle);
* any other test that uses a server fixture (``SERVER_FIXTURES``), and the conformance suite's
  server sites (it runs here on ``local`` and ``memory`` only);
* tests marked ``slow``;
* ``END_TO_END``: files and tests that run the ``ferry`` command in subprocesses and wait on real
  time (pause within a second, bandwidth limits, kill -9 and resume, settle times). A new test
  that takes more than about a second belongs in that list or, better, gets faster.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"

SERVER_FOLDERS = ("sftp", "s3", "globus", "ui", "packaging")
SERVER_FIXTURES = frozenset(
    {"sshd", "sshd_factory", "server", "moto", "rclone", "s3_server", "globus_server", "globus_fake", "qtbot", "qapp"}
)
SERVER_SITES = frozenset({"sftp", "s3-moto", "s3-rclone", "globus"})  # tests/conformance/conftest.py
END_TO_END = (
    "tests/test_cli_cp.py",
    "tests/test_cli_queue.py",
    "tests/test_conflict_answers.py",
    "tests/test_crash_resume.py",
    "tests/test_move.py",
    "tests/test_no_space.py",
    "tests/watch/test_watch_cli.py",
    "tests/watch/test_watch_engine.py",
    "tests/test_engine.py::test_pause_resume_cancel_act_within_a_second",
    "tests/test_engine.py::test_a_pause_taken_back_before_the_runner_lets_go_keeps_the_job_going",
)


def _left_out(item: pytest.Item) -> bool:
    nodeid = item.nodeid if item.nodeid.startswith("tests/") else f"tests/{item.nodeid}"
    if any(nodeid == e or nodeid.startswith((f"{e}::", f"{e}[")) for e in END_TO_END):
        return True
    if item.get_closest_marker("slow") is not None:
        return True
    if SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("site") in SERVER_SITES


class FastTier:
    """The plugin: skips collecting the server folders, deselects the rest of what is left out."""

    def pytest_ignore_collect(self, collection_path: Path) -> bool | None:
        try:
            parts = collection_path.resolve().relative_to(TESTS).parts
        except ValueError:
            return None
        return True if parts and parts[0] in SERVER_FOLDERS else None

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        kept = [item for item in items if not _left_out(item)]
        dropped = [item for item in items if _left_out(item)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept


def main(argv: list[str]) -> int:
    # no Xvfb: nothing here opens a window
    return int(pytest.main(["-p", "no:xvfb", *argv], plugins=[FastTier()]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
