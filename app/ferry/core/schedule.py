"""Time windows (``--window 20:00-07:00``) and start times (``--start-at 22:00``) in local time."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, time, timedelta

from ferry.core.errors import UsageError

_HM = re.compile(r"^\s*([01]?\d|2[0-3]):([0-5]\d)\s*$")


def _parse_hm(text: str, whole: str) -> time:
    m = _HM.match(text)
    if not m:
        raise UsageError(f"Malformed time {text!r} in {whole!r} (expected HH:MM, 24-hour)")
    return time(int(m.group(1)), int(m.group(2)))


def now_local() -> datetime:
    return datetime.now().astimezone()


def _at(day: datetime, t: time, days_later: int) -> datetime:
    """Wall-clock time ``t`` on ``day`` (+ days), with the UTC offset in force *then*: across a
    daylight-saving change the offset differs from today's."""
    naive = day.replace(tzinfo=None, hour=t.hour, minute=t.minute, second=0, microsecond=0)
    naive += timedelta(days=days_later)
    if day.tzinfo is not None and day.utcoffset() != day.astimezone().utcoffset():
        return naive.replace(tzinfo=day.tzinfo)  # an explicit zone other than ours: keep it
    return naive.astimezone()


@dataclass(frozen=True)
class Window:
    """A daily window; ``20:00-07:00`` wraps past midnight. Equal ends mean "always open"."""

    start: time
    end: time

    def __str__(self) -> str:
        return f"{self.start:%H:%M}-{self.end:%H:%M}"

    def contains(self, when: datetime) -> bool:
        t = when.timetz().replace(tzinfo=None)
        if self.start == self.end:
            return True
        if self.start < self.end:
            return self.start <= t < self.end
        return t >= self.start or t < self.end

    def next_open(self, when: datetime) -> datetime:
        """``when`` itself if the window is open, else the next moment it opens."""
        if self.contains(when):
            return when
        candidate = _at(when, self.start, 0)
        return candidate if candidate > when else _at(when, self.start, 1)

    def closes_at(self, when: datetime) -> datetime | None:
        """When the open period containing ``when`` ends (None for an always-open window)."""
        if self.start == self.end:
            return None
        end = _at(when, self.end, 0)
        return end if end > when else _at(when, self.end, 1)


def parse_window(text: str) -> Window:
    start, sep, end = text.partition("-")
    if not sep:
        raise UsageError(f"Malformed window {text!r} (expected HH:MM-HH:MM, e.g. 20:00-07:00)")
    return Window(_parse_hm(start, text), _parse_hm(end, text))


def parse_start_at(text: str, now: datetime | None = None) -> datetime:
    """``22:00`` means the next 22:00 (today or tomorrow); ISO dates are taken as given."""
    now = now or now_local()
    if _HM.match(text):
        t = _parse_hm(text, text)
        at = _at(now, t, 0)
        return at if at > now else _at(now, t, 1)
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"Malformed start time {text!r} (expected HH:MM or YYYY-MM-DDTHH:MM)") from None
    return at if at.tzinfo else at.astimezone()
