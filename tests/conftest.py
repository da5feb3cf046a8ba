"""Shared fixtures: the real ``ferry`` command, isolated in the test's own folder."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.backends.memory import reset_memory_stores
from ferry.transfers.store import Store
from helpers import Ferry, MemSite


@pytest.fixture
def ferry(tmp_path: Path) -> Ferry:
    """Run ``ferry`` in a subprocess with its data and config under ``tmp_path``."""
    return Ferry(home=tmp_path, cwd=tmp_path)


@pytest.fixture
def site() -> Iterator[MemSite]:
    """A fresh in-memory site (``mem://`` addresses), emptied afterwards. Folders with a site of
    another kind (the conformance suite) override this."""
    name = f"mem-{uuid.uuid4().hex[:10]}"
    yield MemSite(name)
    reset_memory_stores(name)


@pytest.fixture
def store(ferry: Ferry) -> Iterator[Store]:
    """The queue database the ``ferry`` fixture's CLI uses too."""
    s = Store(ferry.home / "data" / "queue.db")
    yield s
    s.close()


# ---- leaving the test process --------------------------------------------------------------
# A full run (over 1,600 tests that start Qt, paramiko transports, boto3 clients and their
# threads) has crashed with SIGSEGV in the interpreter's own teardown, after every test had passed
# and the summary was printed; its exit status then said 139 whatever the tests said. The
# process leaves with pytest's own status once every plugin has finished and the exit functions
# have run (Xvfb stopped, reports written), without the rest of that teardown. faulthandler
# stays on until then, so a crash while a test runs still shows its traceback. Why the teardown
# crashes is still to be found (stop 16 note); FERRY_TEST_NORMAL_EXIT=1 keeps the ordinary exit.
_EXIT_STATUS: list[int] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _EXIT_STATUS.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    import atexit
    import os
    import sys

    if not _EXIT_STATUS or os.environ.get("FERRY_TEST_NORMAL_EXIT"):
        return
    atexit._run_exitfuncs()  # what plugins registered (pytest-xvfb stops its Xvfb there)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_EXIT_STATUS[-1])
