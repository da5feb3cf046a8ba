"""What the spec keeps and drops, and the macOS/Windows metadata it prepares (checked on Linux too)."""

from __future__ import annotations

import ast
import importlib.util
import plistlib
from pathlib import Path
from types import ModuleType

import pytest

import ferry

ROOT = Path(__file__).resolve().parents[2]


def _load_bundle_meta() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ferry_bundle_meta", ROOT / "packaging" / "bundle_meta.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


meta = _load_bundle_meta()


def test_version_is_the_package_version() -> None:
    assert meta.version() == ferry.__version__
    assert meta.version_tuple("0.1.0") == (0, 1, 0, 0)
    assert meta.version_tuple("1.2.3rc1") == (1, 2, 3, 1)


@pytest.mark.parametrize(
    ("dest", "kept"),
    [
        ("botocore/data/s3/2006-03-01/service-2.json.gz", True),
        ("botocore/data/sts/2011-06-15/service-2.json.gz", True),
        ("botocore/data/sso-oidc/2019-06-10/service-2.json.gz", True),
        ("botocore/data/sso/2019-06-10/paginators-1.json", True),
        ("botocore/data/endpoints.json", True),  # top-level endpoint and partition data stay
        ("botocore/data/partitions.json", True),
        ("botocore/data/ec2/2016-11-15/service-2.json.gz", False),
        ("botocore/data/s3control/2018-08-20/service-2.json.gz", False),  # a prefix is not a match
        ("botocore/data/sso-admin/2020-07-20/service-2.json.gz", False),
        ("boto3/data/s3/2006-03-01/resources-1.json", True),
        ("boto3/data/ec2/2016-11-15/resources-1.json", False),
        ("botocore/cacert.pem", True),
        ("PySide6/Qt/translations/qt_de.qm", True),
    ],
)
def test_botocore_trimmed_to_the_services_ferry_uses(dest: str, kept: bool) -> None:
    assert meta.keep_data(dest) is kept


@pytest.mark.parametrize(
    ("dest", "kept"),
    [
        ("PySide6/Qt/plugins/platformthemes/libqgtk3.so", False),
        ("libgtk-3.so.0", False),
        ("libgdk-3.so.0", False),
        ("libatk-1.0.so.0", False),
        ("libpangocairo-1.0.so.0", False),
        ("PySide6/Qt/plugins/platforms/libqeglfs.so", False),
        ("PySide6/Qt/plugins/platforms/libqvnc.so", False),
        ("PySide6/Qt/plugins/platforminputcontexts/libqtvirtualkeyboardplugin.so", False),
        ("PySide6/Qt/plugins/platforms/libqxcb.so", True),
        ("PySide6/Qt/plugins/platforms/libqwayland.so", True),
        ("PySide6/Qt/plugins/platforms/libqoffscreen.so", True),
        ("PySide6/Qt/plugins/platformthemes/libqxdgdesktopportal.so", True),
        ("PySide6/Qt/plugins/iconengines/libqsvgicon.so", True),
        ("libxcb-cursor.so.0", True),
        ("libQt6Widgets.so.6", True),
    ],
)
def test_no_gtk_or_unused_qt_plugins(dest: str, kept: bool) -> None:
    assert meta.keep_binary(dest) is kept


def test_macos_info_plist() -> None:
    plist = meta.info_plist("0.1.0")
    data = plistlib.loads(plistlib.dumps(plist))  # serialises: only plist types inside
    assert data["CFBundleIdentifier"] == "io.github.ferry.Ferry"
    assert data["CFBundleShortVersionString"] == "0.1.0"
    schemes = sorted(s for t in data["CFBundleURLTypes"] for s in t["CFBundleURLSchemes"])
    assert schemes == ["ferry", "s3", "sftp"]
    assert data["NSHighResolutionCapable"] is True


def test_windows_version_resource(tmp_path: Path) -> None:
    path = meta.windows_version_file("1.2.3", tmp_path / "v.txt")
    text = path.read_text()
    assert "@" not in text
    tree = ast.parse(text, mode="eval")  # PyInstaller evaluates this file as a Python expression
    call = tree.body
    assert isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "VSVersionInfo"
    assert "filevers=(1, 2, 3, 0)" in text and "StringStruct('ProductVersion', '1.2.3')" in text


def test_spec_uses_the_shared_rules() -> None:
    spec = (ROOT / "packaging" / "ferry.spec").read_text()
    needles = ("bundle_meta.keep_data", "bundle_meta.keep_binary", "BUNDLE(", "info_plist=", "version=version_file")
    for needle in needles:
        assert needle in spec
    compile(spec, "ferry.spec", "exec")
