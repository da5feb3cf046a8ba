"""Build the real one-folder bundle with packaging/build.sh and run its --selftest (CI does this)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import ferry

ROOT = Path(__file__).resolve().parents[2]
APP_ID = "io.github.ferry.Ferry"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("PyInstaller") is None,
        reason="PyInstaller is not installed (pip install -e '.[package]'); the bundle cannot be built",
    ),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, subprocess.CompletedProcess[str]]]:
    out = tmp_path_factory.mktemp("bundle")
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env["PYTHON_KEYRING_BACKEND"] = "keyring.backends.fail.Keyring"  # never the build machine's keychain
    res = subprocess.run(
        ["bash", str(ROOT / "packaging" / "build.sh"), "--out", str(out)],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    shutil.rmtree(out / "build", ignore_errors=True)  # PyInstaller's work folder: ~200 MB nobody reads
    yield out, res
    shutil.rmtree(out, ignore_errors=True)  # pytest keeps old temp folders; a bundle is ~260 MB


def _show(res: subprocess.CompletedProcess[str]) -> str:
    return f"exit {res.returncode}\n--- stdout\n{res.stdout[-6000:]}\n--- stderr\n{res.stderr[-6000:]}"


def test_build_reports_size_and_its_selftest_passes(built: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    _, res = built
    assert res.returncode == 0, _show(res)
    assert re.search(r"^bundle: .+ [\d.]+ MiB in \d+ files$", res.stdout, re.MULTILINE), _show(res)
    assert re.search(r"^archive: .+\.tar\.gz  [\d.]+ MiB$", res.stdout, re.MULTILINE), _show(res)
    assert "bundle at " in res.stdout and "selftest: all 7 checks passed" in res.stdout, _show(res)


def test_bundle_contents(built: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, res = built
    assert res.returncode == 0, _show(res)
    bundle = out / "dist" / "ferry"
    files = [p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()]
    stray = [f for f in files if re.search(r"(^|/)(libgtk-|libgdk-|libqgtk3|libatk-|libpango)", f)]
    assert not stray, stray
    services = sorted(p.name for p in (bundle / "_internal" / "botocore" / "data").iterdir() if p.is_dir())
    assert services == ["s3", "signin", "sso", "sso-oidc", "sts"]
    assert (bundle / "share" / "applications" / f"{APP_ID}.desktop").is_file()
    assert (bundle / "share" / "icons" / "hicolor" / "256x256" / "apps" / f"{APP_ID}.png").is_file()


def test_archive_and_user_install(built: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    out, res = built
    assert res.returncode == 0, _show(res)
    version = ferry.__version__
    tarball = out / "dist" / f"ferry-{version}-linux-{os.uname().machine}.tar.gz"
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
        assert all(n == f"ferry-{version}" or n.startswith(f"ferry-{version}/") for n in names)
        tar.extractall(tmp_path / "opt", filter="tar")
    top = tmp_path / "opt" / f"ferry-{version}"
    home = tmp_path / "home"
    env = {"HOME": str(home), "PATH": os.environ["PATH"]}
    res = subprocess.run([str(top / "install.sh")], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, _show(res)
    link = home / ".local" / "bin" / "ferry"
    assert link.resolve() == (top / "ferry").resolve()
    desktop = (home / ".local" / "share" / "applications" / f"{APP_ID}.desktop").read_text()
    assert f'Exec="{top}/ferry" %U' in desktop
    assert (home / ".local" / "share" / "icons" / "hicolor" / "48x48" / "apps" / f"{APP_ID}.png").is_file()
    ver = subprocess.run([str(link), "--version"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert ver.stdout.strip() == f"ferry {version}", _show(ver)
    res = subprocess.run(
        [str(top / "install.sh"), "--uninstall"], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert res.returncode == 0, _show(res)
    assert not link.exists() and not link.is_symlink()
    assert not list((home / ".local" / "share").rglob(f"{APP_ID}*"))
    assert (top / "ferry").is_file()  # the bundle itself is the person's to delete


def test_bundle_window_on_a_real_x_display(built: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    """Offscreen needs no system libraries; the xcb platform does. Under Xvfb (pytest-xvfb), prove the
    bundle opens its window on a real X server too."""
    out, res = built
    assert res.returncode == 0, _show(res)
    display = os.environ.get("DISPLAY")
    if not display:
        pytest.skip("no X display (pytest-xvfb and Xvfb provide one in CI): only the offscreen window was checked")
    env = {k: v for k, v in os.environ.items() if k != "QT_QPA_PLATFORM"}
    env["PYTHON_KEYRING_BACKEND"] = "keyring.backends.fail.Keyring"
    run = subprocess.run(
        [str(out / "dist" / "ferry" / "ferry"), "--selftest"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, _show(run)
    assert re.search(r"^ok +window: PySide6 [\d.]+ on 'xcb'", run.stdout, re.MULTILINE), _show(run)
