"""What goes into Ferry's PyInstaller bundle, kept apart from ``ferry.spec`` so tests can check it.

``ferry.spec`` imports this module (PyInstaller runs a spec as Python with ``SPECPATH`` set);
``tests/packaging`` imports it too, so the trimming rules and the macOS/Windows metadata are
checked on every CI run even though only the Linux bundle is built there.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

PACKAGING = Path(__file__).resolve().parent
ROOT = PACKAGING.parent
APP_ID = "io.github.ferry.Ferry"  # reverse-DNS id: .desktop file, AppStream, macOS bundle id
NAME = "Ferry"

# botocore ships models for ~440 AWS services (28 MB); Ferry talks to S3 and, to resolve
# credentials from profiles, roles and single sign-on, to STS, SSO and SSO-OIDC. "signin" is the
# model behind `aws login` sessions (botocore's login credential provider), a few kilobytes.
BOTOCORE_SERVICES = frozenset({"s3", "sts", "sso", "sso-oidc", "signin"})
# boto3's resource definitions: Ferry uses none, but boto3.resource("s3") costs only a few KB.
BOTO3_RESOURCES = frozenset({"s3"})

# Libraries that must never be swept in: GTK (through Qt's gtk3 theme plug-in) drags in ~16 MB
# of the build machine's desktop stack, which then clashes with the user's own.
_STRAY_LIBS = re.compile(
    r"(^|/)(libqgtk3\.so|libgtk-|libgdk-|libgdk_pixbuf|libatk-|libatk-bridge|libpango|libcairo|libharfbuzz-gobject)"
)
# Qt plug-ins a desktop file browser does not use on Linux (embedded/kiosk platforms, Qt Virtual
# Keyboard, the designer); dropping them saves megabytes and their stray dependencies.
_UNUSED_QT_PLUGINS = re.compile(
    r"plugins/(platforms/lib(qeglfs|qlinuxfb|qminimalegl|qvnc|qvkkhrdisplay)\.so"
    r"|egldeviceintegrations/|designer/|platforminputcontexts/libqtvirtualkeyboardplugin\.so)"
)


def version() -> str:
    """Ferry's version, read from the package without importing it."""
    text = (ROOT / "app" / "ferry" / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__\s*=\s*"([^"]+)"', text, re.MULTILINE)
    if not match:
        raise SystemExit("packaging: no __version__ in app/ferry/__init__.py")
    return match.group(1)


def version_tuple(ver: str) -> tuple[int, int, int, int]:
    nums = [int(n) for n in re.findall(r"\d+", ver)[:4]]
    nums += [0] * (4 - len(nums))
    return (nums[0], nums[1], nums[2], nums[3])


def keep_data(dest: str) -> bool:
    """Whether a data file (by its path inside the bundle) belongs in the bundle."""
    parts = PurePosixPath(dest.replace("\\", "/")).parts
    if parts[:2] == ("botocore", "data") and len(parts) > 3:  # botocore/data/SERVICE/DATE/x.json
        return parts[2] in BOTOCORE_SERVICES
    if parts[:2] == ("boto3", "data") and len(parts) > 3:
        return parts[2] in BOTO3_RESOURCES
    return True


def keep_binary(dest: str) -> bool:
    """Whether a shared library or plug-in (by its path inside the bundle) belongs in the bundle."""
    path = dest.replace("\\", "/")
    return not (_STRAY_LIBS.search(path) or _UNUSED_QT_PLUGINS.search(path))


def is_stray(dest: str) -> bool:
    """A library that must not be in the bundle at all (the build's test fails on any)."""
    return bool(_STRAY_LIBS.search(dest.replace("\\", "/")))


URL_SCHEMES = ("ferry", "sftp", "s3")


def info_plist(ver: str) -> dict[str, object]:
    """macOS Info.plist entries for Ferry.app (PyInstaller adds the executable/bundle basics)."""
    return {
        "CFBundleName": NAME,
        "CFBundleDisplayName": NAME,
        "CFBundleIdentifier": APP_ID,
        "CFBundleShortVersionString": ver,
        "CFBundleVersion": ver,
        "CFBundlePackageType": "APPL",
        "LSMinimumSystemVersion": "12.0",  # PySide6 6.11 wheels need macOS 12 or later
        "LSApplicationCategoryType": "public.app-category.utilities",
        "NSHighResolutionCapable": True,
        "NSRequiresAquaSystemAppearance": False,  # follow the system's dark mode
        "NSHumanReadableCopyright": "MIT License, Ferry developers",
        # Open sftp://, s3:// and ferry:// links in Ferry (the app decides what each opens).
        "CFBundleURLTypes": [
            {"CFBundleURLName": f"{APP_ID}.{scheme}", "CFBundleURLSchemes": [scheme], "CFBundleTypeRole": "Viewer"}
            for scheme in URL_SCHEMES
        ],
        # Folders dropped on the Dock icon open in a pane.
        "CFBundleDocumentTypes": [
            {"CFBundleTypeName": "Folder", "CFBundleTypeRole": "Viewer", "LSItemContentTypes": ["public.folder"]}
        ],
    }


def windows_version_file(ver: str, out: Path) -> Path:
    """Fill in ``windows/version_info.txt`` (PyInstaller's version-resource syntax) and return its path."""
    template = (PACKAGING / "windows" / "version_info.txt").read_text(encoding="utf-8")
    text = template.replace("@VERSION_TUPLE@", repr(version_tuple(ver))).replace("@VERSION@", ver)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out
