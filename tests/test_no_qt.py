"""The engine and the command line never load a GUI toolkit: they run on headless servers."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ENGINE_MODULES = [
    "ferry.cli.main",
    "ferry.transfers.scheduler",
    "ferry.transfers.copy",
    "ferry.transfers.planner",
    "ferry.backends.local",
    "ferry.backends.memory",
    "ferry.api",  # the public API, once it exists
]

PROBE = """
import importlib, json, sys
import PySide6  # the stub is importable: proves the check below would see a GUI import
del sys.modules["PySide6"]
from ferry.cli.main import build_parser
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
build_parser()  # every command module
print(json.dumps(sorted(sys.modules)))
"""


def _stub_toolkits(root: Path) -> dict[str, str]:
    """Importable stand-ins for the GUI toolkits, so even a guarded ``try: import PySide6`` shows
    up in sys.modules whether or not the real one is installed here."""
    for name in ("PySide6", "PyQt5", "PyQt6"):
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text("")
        (root / name / "QtCore.py").write_text("")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    return env


def test_engine_and_cli_do_not_import_qt(tmp_path: Path) -> None:
    modules = [m for m in ENGINE_MODULES if importlib.util.find_spec(m) is not None]
    assert "ferry.cli.main" in modules and "ferry.transfers.scheduler" in modules
    env = _stub_toolkits(tmp_path / "stubs")
    res = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(modules)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert res.returncode == 0, res.stderr
    loaded = json.loads(res.stdout)
    assert set(modules) <= set(loaded)
    gui = [m for m in loaded if m.split(".")[0].startswith(("PySide6", "PySide2", "PyQt"))]
    assert gui == [], gui


def test_cli_help_runs_without_a_display() -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}  # no DISPLAY, no WAYLAND_DISPLAY
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ferry", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert res.returncode == 0, res.stderr
    assert "usage: ferry" in res.stdout
    imported = {line.split("|")[-1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}
    assert not any(m.startswith(("PySide6", "PyQt")) for m in imported)
