"""``ferry --selftest`` from the source tree, as a subprocess: clean, and with each part broken.

Breakage is real where it can be made real from outside (a library that fails to import, a Qt
platform plug-in that does not exist, a keychain that is locked); the rest goes through
``FERRY_SELFTEST_FAIL``, which fails a check at its start through the same reporting path.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import describe, ferry_env

CHECKS = ["backends", "s3-client", "paramiko", "globus-sdk", "keychain", "queue-db", "window"]
TESTS_DIR = Path(__file__).resolve().parent.parent
LINE = re.compile(r"^(ok|notice|FAILED)\s+([a-z0-9-]+): (.+)$")


def selftest(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None, pythonpath: list[Path] | None = None
) -> tuple[subprocess.CompletedProcess[str], dict[str, tuple[str, str]]]:
    """Run ``python -m ferry --selftest`` headless (no display: the window step must go offscreen)."""
    full = ferry_env(tmp_path, env)
    for var in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM", "FERRY_SELFTEST_FAIL"):
        if env is None or var not in env:
            full.pop(var, None)
    if pythonpath:
        full["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), full.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    res = subprocess.run(
        [sys.executable, "-m", "ferry", "--selftest", *args],
        cwd=tmp_path,
        env=full,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines: dict[str, tuple[str, str]] = {}
    for line in res.stdout.splitlines():
        m = LINE.match(line)
        if m:
            lines[m.group(2)] = (m.group(1), m.group(3))
    return res, lines


def assert_only_failed(res: subprocess.CompletedProcess[str], lines: dict[str, tuple[str, str]], *failed: str) -> None:
    assert res.returncode == 1, describe(res)
    assert list(lines) == CHECKS, describe(res)  # every check still reported, in order
    assert sorted(n for n, (status, _) in lines.items() if status == "FAILED") == sorted(failed), describe(res)
    summary = res.stdout.strip().splitlines()[-1]
    assert summary == f"selftest: {len(failed)} of {len(CHECKS)} checks FAILED ({', '.join(failed)})", describe(res)


def test_clean_source_tree_passes_headless(tmp_path: Path) -> None:
    res, lines = selftest(tmp_path)
    assert res.returncode == 0, describe(res)
    assert list(lines) == CHECKS, describe(res)
    assert all(status == "ok" for name, (status, _) in lines.items() if name != "keychain"), describe(res)
    # ferry_env selects keyring's "fail" backend: no keychain is a notice, never a failure.
    assert lines["keychain"][0] == "notice" and "no keychain" in lines["keychain"][1], describe(res)
    assert "offscreen" in lines["window"][1], describe(res)
    assert "sftp" in lines["backends"][1] and "s3" in lines["backends"][1] and "globus" in lines["backends"][1]
    assert res.stdout.strip().endswith(f"selftest: all {len(CHECKS)} checks passed, 1 notice"), describe(res)
    assert "source at" in res.stdout.splitlines()[0]
    # The temporary queue database is gone: nothing left in the isolated data folder either.
    assert not (tmp_path / "data" / "queue.db").exists()


def test_list_and_bad_option(tmp_path: Path) -> None:
    res, _ = selftest(tmp_path, "--list")
    assert res.returncode == 0 and res.stdout.split() == CHECKS, describe(res)
    res, _ = selftest(tmp_path, "--bogus")
    assert res.returncode == 2 and "unknown selftest option '--bogus'" in res.stderr, describe(res)
    res, _ = selftest(tmp_path, env={"FERRY_SELFTEST_FAIL": "nosuchcheck"})
    assert res.returncode == 2 and "nosuchcheck" in res.stderr, describe(res)


def test_every_check_reports_its_own_failure(tmp_path: Path) -> None:
    """All seven fail at once: each says so on its own line, and the run still reaches the summary."""
    res, lines = selftest(tmp_path, env={"FERRY_SELFTEST_FAIL": ",".join(CHECKS)})
    assert_only_failed(res, lines, *CHECKS)
    for name in CHECKS:
        assert lines[name][1] == f"InjectedFailure: failed on purpose (FERRY_SELFTEST_FAIL names '{name}')"


@pytest.mark.parametrize("check", ["queue-db", "s3-client"])
def test_one_injected_failure_leaves_the_others_ok(tmp_path: Path, check: str) -> None:
    res, lines = selftest(tmp_path, env={"FERRY_SELFTEST_FAIL": check})
    assert_only_failed(res, lines, check)


def _broken_package(root: Path, name: str) -> Path:
    """A package that shadows the real one and fails to import, like a library missing from a bundle."""
    pkg = root / "broken" / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"raise ImportError('{name} is broken on purpose (selftest test)')\n")
    return root / "broken"


@pytest.mark.parametrize(
    ("package", "check"), [("paramiko", "paramiko"), ("boto3", "s3-client"), ("globus_sdk", "globus-sdk")]
)
def test_missing_library_is_named(tmp_path: Path, package: str, check: str) -> None:
    # Backends import their SDK when first used, so their modules still load; the SDK's own check
    # is the one that must catch it.
    res, lines = selftest(tmp_path, pythonpath=[_broken_package(tmp_path, package)])
    assert_only_failed(res, lines, check)
    assert lines[check][1] == f"ImportError: {package} is broken on purpose (selftest test)", describe(res)


def test_qt_platform_that_cannot_load_fails_only_the_window(tmp_path: Path) -> None:
    """Qt aborts the process when its platform plug-in is missing; the selftest survives and says why."""
    res, lines = selftest(tmp_path, env={"QT_QPA_PLATFORM": "nosuchplatform"})
    assert_only_failed(res, lines, "window")
    text = lines["window"][1]
    assert text.startswith("Qt could not start (killed by signal"), text
    assert 'Qt platform plugin "nosuchplatform"' in text


def test_working_and_locked_keychains(tmp_path: Path) -> None:
    res, lines = selftest(
        tmp_path, env={"PYTHON_KEYRING_BACKEND": "keyring_memory.MemoryKeyring"}, pythonpath=[TESTS_DIR]
    )
    assert lines["keychain"][0] == "ok", describe(res)
    assert lines["keychain"][1].startswith("Passwords are kept in"), describe(res)
    # A keychain that is there but refuses to be read (locked) is reported, not fatal.
    res, lines = selftest(
        tmp_path, env={"PYTHON_KEYRING_BACKEND": "keyring_memory.LockedKeyring"}, pythonpath=[TESTS_DIR]
    )
    assert lines["keychain"] == (
        "notice",
        "no keychain: The system keychain stopped working (KeyringLocked), so passwords are kept in memory "
        "for this session only and you will be asked again next time; nothing is written to disk.",
    ), describe(res)
    assert "keychain" not in res.stdout.splitlines()[-1]


def test_verbose_shows_the_traceback(tmp_path: Path) -> None:
    res, lines = selftest(tmp_path, "--verbose", env={"FERRY_SELFTEST_FAIL": "paramiko"})
    assert lines["paramiko"][0] == "FAILED"
    assert "Traceback (most recent call last)" in res.stdout and "InjectedFailure" in res.stdout, describe(res)
