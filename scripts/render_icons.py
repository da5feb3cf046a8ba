#!/usr/bin/env python3
"""Render Ferry's icon set from ``resources/icons/ferry.svg`` with Qt's own SVG renderer.

Writes, next to the SVG:

- ``png/ferry-SIZE.png`` for every size a platform asks for (Linux hicolor theme 16-512,
  Windows 16-256, macOS up to 1024 for 512@2x);
- ``ferry.ico`` (Windows; PNG-compressed entries, which Windows has read since Vista);
- ``ferry.icns`` (macOS; PNG entries, the ``ic07``-``ic14``/``icp4``-``icp6`` types).

The .ico and .icns containers are written by hand (a header and a table of PNGs each), so no
imaging library beyond Qt is needed.

Usage: scripts/render_icons.py [--out DIR]   (run with the project's .venv Python)
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SVG = ROOT / "resources" / "icons" / "ferry.svg"

PNG_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512, 1024)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
# macOS icon types that hold PNG data, and the pixel size each one holds.
ICNS_TYPES = (
    (b"icp4", 16),
    (b"icp5", 32),
    (b"icp6", 64),
    (b"ic07", 128),
    (b"ic08", 256),
    (b"ic09", 512),
    (b"ic10", 1024),  # 512@2x
    (b"ic11", 32),  # 16@2x
    (b"ic12", 64),  # 32@2x
    (b"ic13", 256),  # 128@2x
    (b"ic14", 512),  # 256@2x
)


def render_pngs(svg: Path, sizes: tuple[int, ...]) -> dict[int, bytes]:
    """PNG bytes per size, drawn straight from the vector source at each size (no downscaling blur)."""
    if not os.environ.get("DISPLAY") and not os.environ.get("QT_QPA_PLATFORM"):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    app = QGuiApplication.instance() or QGuiApplication([sys.argv[0]])
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"render_icons: {svg} is not a valid SVG for Qt")
    out: dict[int, bytes] = {}
    for size in sizes:
        image = QImage(size, size, QImage.Format.Format_ARGB32)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        renderer.render(painter)
        painter.end()
        data = QByteArray()
        buf = QBuffer(data)
        buf.open(QIODevice.OpenModeFlag.WriteOnly)
        if not image.save(buf, "PNG"):  # type: ignore[call-overload]  # the stubs say bytes; PySide6 wants str
            raise SystemExit(f"render_icons: Qt could not encode a {size}px PNG")
        buf.close()
        out[size] = bytes(data.data())
    del app
    return out


def build_ico(pngs: dict[int, bytes], sizes: tuple[int, ...]) -> bytes:
    """ICONDIR + one 16-byte ICONDIRENTRY per image + the PNGs. Width/height 0 means 256."""
    header = struct.pack("<HHH", 0, 1, len(sizes))
    offset = len(header) + 16 * len(sizes)
    entries, blobs = b"", b""
    for size in sizes:
        data = pngs[size]
        dim = 0 if size >= 256 else size
        entries += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(data), offset)
        blobs += data
        offset += len(data)
    return header + entries + blobs


def build_icns(pngs: dict[int, bytes]) -> bytes:
    """'icns' + total length, then (type, length including its 8-byte header, PNG) per entry; big-endian."""
    body = b"".join(kind + struct.pack(">I", 8 + len(pngs[size])) + pngs[size] for kind, size in ICNS_TYPES)
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--svg", type=Path, default=SVG, help="the source SVG (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=SVG.parent, help="output folder (default: %(default)s)")
    args = parser.parse_args(argv)
    pngs = render_pngs(args.svg, PNG_SIZES)
    png_dir = args.out / "png"
    png_dir.mkdir(parents=True, exist_ok=True)
    for size, data in pngs.items():
        (png_dir / f"ferry-{size}.png").write_bytes(data)
    (args.out / "ferry.ico").write_bytes(build_ico(pngs, ICO_SIZES))
    (args.out / "ferry.icns").write_bytes(build_icns(pngs))
    total = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file() and p.suffix != ".svg")
    print(f"render_icons: {len(pngs)} PNGs, ferry.ico, ferry.icns in {args.out} ({total / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
