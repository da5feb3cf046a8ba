"""install.sh on a stand-in bundle (a tiny 'ferry' script), so it is checked without PyInstaller:
user install, the menu entry pointing at the bundle, URL handlers, and a clean uninstall."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APP_ID = "io.github.ferry.Ferry"


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    top = tmp_path / "opt" / "Ferry 0.1"  # a space in the path, as people's folders have
    top.mkdir(parents=True)
    ferry = top / "ferry"
    ferry.write_text("#!/bin/sh\necho \"stand-in ferry $*\"\n")
    ferry.chmod(0o755)
    subprocess.run(["sh", str(ROOT / "packaging" / "linux" / "stage.sh"), str(top)], check=True, timeout=60)
    return top


def run(script: Path, *args: str, home: Path, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(home), "PATH": path if path is not None else os.environ["PATH"]}
    return subprocess.run([str(script), *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def test_stage_lays_out_share(bundle: Path) -> None:
    share = bundle / "share"
    assert (share / "applications" / f"{APP_ID}.desktop").is_file()
    assert (share / "metainfo" / f"{APP_ID}.metainfo.xml").is_file()
    assert (share / "icons" / "hicolor" / "scalable" / "apps" / f"{APP_ID}.svg").is_file()
    sizes = sorted(int(p.name.split("x")[0]) for p in (share / "icons" / "hicolor").glob("*x*"))
    assert sizes == [16, 22, 24, 32, 48, 64, 128, 256, 512]
    assert os.access(bundle / "install.sh", os.X_OK)


def test_install_and_uninstall_for_one_user(bundle: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    res = run(bundle / "install.sh", home=home)
    assert res.returncode == 0, res.stderr
    link = home / ".local" / "bin" / "ferry"
    assert link.is_symlink() and link.resolve() == (bundle / "ferry").resolve()
    ran = subprocess.run([str(link), "--version"], capture_output=True, text=True, check=False)
    assert "stand-in ferry --version" in ran.stdout
    apps = home / ".local" / "share" / "applications"
    desktop = (apps / f"{APP_ID}.desktop").read_text()
    # The menu runs this bundle by full path (quoted: the folder has a space), whatever PATH says.
    assert f'Exec="{bundle}/ferry" %U' in desktop
    assert f'Exec="{bundle}/ferry" --new-window' in desktop
    assert f"TryExec={bundle}/ferry" in desktop
    assert "MimeType=x-scheme-handler/sftp;x-scheme-handler/s3;x-scheme-handler/ferry;" in desktop
    if shutil.which("desktop-file-validate"):
        installed = str(apps / f"{APP_ID}.desktop")
        check = subprocess.run(["desktop-file-validate", installed], capture_output=True, text=True, check=False)
        assert check.returncode == 0, check.stdout + check.stderr
    icons = home / ".local" / "share" / "icons" / "hicolor"
    assert (icons / "scalable" / "apps" / f"{APP_ID}.svg").is_file()
    assert (icons / "256x256" / "apps" / f"{APP_ID}.png").is_file()
    assert (home / ".local" / "share" / "metainfo" / f"{APP_ID}.metainfo.xml").is_file()
    assert "is not on your PATH" in res.stdout  # the scratch home's bin is not on PATH: say so

    res = run(bundle / "install.sh", "--uninstall", home=home)
    assert res.returncode == 0, res.stderr
    assert not link.exists() and not link.is_symlink()
    assert not list((home / ".local" / "share").rglob(f"{APP_ID}*"))
    assert (bundle / "ferry").is_file()  # the bundle is the person's to delete


def test_bad_option_and_wrong_folder(bundle: Path, tmp_path: Path) -> None:
    res = run(bundle / "install.sh", "--bogus", home=tmp_path / "home")
    assert res.returncode == 2 and "unknown option '--bogus'" in res.stderr
    stray = tmp_path / "elsewhere"
    stray.mkdir()
    shutil.copy(bundle / "install.sh", stray / "install.sh")
    res = run(stray / "install.sh", home=tmp_path / "home")
    assert res.returncode == 2 and "run me from the unpacked Ferry folder" in res.stderr
    assert not (tmp_path / "home" / ".local").exists()  # nothing half-installed
