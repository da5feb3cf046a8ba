"""The icon set: the SVG source, the PNG sizes, and the hand-built .ico/.icns containers."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ICONS = ROOT / "resources" / "icons"
PNG_SIZES = [16, 22, 24, 32, 48, 64, 128, 256, 512, 1024]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (always the first chunk)."""
    assert data[:8] == PNG_MAGIC, "not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_svg_is_a_square_vector_source() -> None:
    root = ET.parse(ICONS / "ferry.svg").getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert root.get("viewBox") == "0 0 512 512"
    # Hand-written vector only: no embedded bitmaps, no external references.
    assert not root.findall(".//{http://www.w3.org/2000/svg}image")
    text = (ICONS / "ferry.svg").read_text()
    assert "xlink:href" not in text and "base64" not in text


@pytest.mark.parametrize("size", PNG_SIZES)
def test_png_sizes(size: int) -> None:
    data = (ICONS / "png" / f"ferry-{size}.png").read_bytes()
    assert png_size(data) == (size, size)


def test_ico_holds_the_windows_sizes_as_pngs() -> None:
    data = (ICONS / "ferry.ico").read_bytes()
    reserved, kind, count = struct.unpack_from("<HHH", data, 0)
    assert (reserved, kind) == (0, 1) and count == 7
    sizes = []
    for i in range(count):
        w, h, colors, _res, planes, bits, length, offset = struct.unpack_from("<BBBBHHII", data, 6 + 16 * i)
        image = data[offset : offset + length]
        assert len(image) == length
        real = png_size(image)
        assert real == ((w or 256), (h or 256))  # 0 means 256 in an ICONDIRENTRY
        assert (colors, planes, bits) == (0, 1, 32)
        sizes.append(real[0])
    assert sizes == [16, 24, 32, 48, 64, 128, 256]


def test_icns_holds_every_macos_size() -> None:
    data = (ICONS / "ferry.icns").read_bytes()
    assert data[:4] == b"icns"
    assert struct.unpack(">I", data[4:8])[0] == len(data)
    entries: dict[bytes, tuple[int, int]] = {}
    pos = 8
    while pos < len(data):
        kind, length = data[pos : pos + 4], struct.unpack(">I", data[pos + 4 : pos + 8])[0]
        entries[kind] = png_size(data[pos + 8 : pos + length])
        pos += length
    assert pos == len(data)
    expected = {b"icp4": 16, b"icp5": 32, b"icp6": 64, b"ic07": 128, b"ic08": 256, b"ic09": 512, b"ic10": 1024}
    expected |= {b"ic11": 32, b"ic12": 64, b"ic13": 256, b"ic14": 512}
    assert entries == {k: (v, v) for k, v in expected.items()}


def test_committed_icons_match_the_svg(tmp_path: Path) -> None:
    """Re-render from the SVG: a changed SVG with stale PNGs fails here (rerun scripts/render_icons.py)."""
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "render_icons.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
        check=False,
    )
    assert res.returncode == 0, res.stderr
    from PySide6.QtGui import QImage

    for size in (16, 48, 256):
        fresh = QImage(str(tmp_path / "png" / f"ferry-{size}.png"))
        committed = QImage(str(ICONS / "png" / f"ferry-{size}.png"))
        assert not fresh.isNull() and fresh.size() == committed.size()
        # Compare pixels, not bytes: zlib settings may differ, the picture must not.
        worst = 0
        for y in range(size):
            for x in range(0, size, max(1, size // 64)):
                a, b = fresh.pixel(x, y), committed.pixel(x, y)
                worst = max(worst, *(abs(((a >> s) & 255) - ((b >> s) & 255)) for s in (0, 8, 16, 24)))
        assert worst <= 8, f"{size}px icon differs from the SVG's rendering (max channel diff {worst})"
    assert (tmp_path / "ferry.ico").read_bytes()[:6] == (ICONS / "ferry.ico").read_bytes()[:6]
