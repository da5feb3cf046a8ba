"""Sizes, rates and durations as people write and read them."""

from __future__ import annotations

import re

from ferry.core.errors import UsageError

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b?)?(?:/s)?\s*$", re.IGNORECASE)
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def parse_size(text: str) -> int:
    """``50M`` -> 52428800. Suffixes K/M/G/T/P are binary (as rsync's and rclone's --bwlimit)."""
    m = _SIZE_RE.match(text)
    if not m:
        raise UsageError(f"Malformed size {text!r} (examples: 50M, 1.5G, 800K, 4096)")
    value = float(m.group(1)) * 1024 ** _POWERS[m.group(2).lower()]
    if value < 1:
        raise UsageError(f"Size must be at least one byte: {text!r}")
    return int(value)


def format_size(n: float | None) -> str:
    if n is None:
        return "?"
    if n < 1024:
        return f"{int(n)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        n /= 1024
        # Round first, then choose: 1048575 B is "1.0 MiB", not "1024 KiB".
        text = f"{n:.1f}" if n < 99.95 else f"{n:.0f}"
        if float(text) < 1024 or unit == "PiB":
            return f"{text} {unit}"
    raise AssertionError("unreachable")


def format_rate(bps: float) -> str:
    return f"{format_size(bps)}/s"


def format_duration(seconds: float | None) -> str:
    if seconds is None or not 0 <= seconds < float("inf"):  # also NaN and inf: int() would fail
        return "--:--"
    s = int(seconds + 0.5)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    if h >= 100:
        return f"{h // 24}d{h % 24:02d}h"
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)\s*(min|sec|w|d|h|m|s)?", re.IGNORECASE)
_SECONDS = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """``2h`` -> 7200.0; also ``90s``, ``30m``, ``7d``, ``1h30m`` and a bare number of seconds."""
    s = text.strip().lower()
    pos, total = 0, 0.0
    while pos < len(s):
        m = _DURATION_RE.match(s, pos)
        if not m or m.end() == pos:
            raise UsageError(f"Malformed duration {text!r} (examples: 90s, 30m, 2h, 7d, 1h30m)")
        total += float(m.group(1)) * _SECONDS[(m.group(2) or "").lower()]
        pos = m.end()
        while pos < len(s) and s[pos] == " ":
            pos += 1
    if not s or total <= 0:
        raise UsageError(f"Duration must be longer than zero: {text!r}")
    return total
