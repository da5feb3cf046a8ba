"""Sizes, durations, time windows and start times."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest

import ferry.core.schedule as schedule_mod
from ferry.core.errors import UsageError
from ferry.core.schedule import Window, parse_start_at, parse_window
from ferry.core.units import format_duration, format_rate, format_size, parse_duration, parse_size

# -- sizes --


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("50M", 50 * 1024 * 1024),
        ("50m", 50 * 1024 * 1024),
        ("50MB", 50 * 1024 * 1024),  # binary whatever the spelling, as rsync and rclone do
        ("50MiB", 50 * 1024 * 1024),
        ("50 mib", 50 * 1024 * 1024),
        ("10M/s", 10 * 1024 * 1024),  # a rate reads the same
        ("1.5G", 3 * 1024**3 // 2),
        ("800K", 800 * 1024),
        ("2T", 2 * 1024**4),
        ("1P", 1024**5),
        ("4096", 4096),
        ("4096B", 4096),
        (" 2k ", 2048),
        ("1.5", 1),  # fractions of a byte are dropped, not rounded up
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "M", "abc", "-5M", "5X", "1e3", "5 M B s", "0", "0.5", "0K"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(UsageError):
        parse_size(text)


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (None, "?"),
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (50 * 1024 * 1024, "50.0 MiB"),
        (150 * 1024 * 1024, "150 MiB"),  # no decimal once it would be noise
        (3 * 1024**4, "3.0 TiB"),
        (2048 * 1024**5, "2048 PiB"),  # PiB is the last unit: it grows instead of overflowing
    ],
)
def test_format_size(n: int | None, expected: str) -> None:
    assert format_size(n) == expected


def test_format_rate() -> None:
    assert format_rate(10 * 1024 * 1024) == "10.0 MiB/s"


def test_format_size_rounds_before_choosing_the_unit() -> None:
    assert format_size(1024 * 1024 - 1) == "1.0 MiB"
    assert format_size(102359) == "100 KiB"


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (None, "--:--"),
        (float("nan"), "--:--"),
        (-1, "--:--"),
        (float("inf"), "--:--"),  # an ETA at zero speed must print, not crash
        (0, "00:00"),
        (59.4, "00:59"),
        (59.5, "01:00"),  # rounded to the nearest second
        (61, "01:01"),
        (3600, "1:00:00"),
        (3661, "1:01:01"),
        (99 * 3600 + 59 * 60 + 59, "99:59:59"),
        (100 * 3600, "4d04h"),  # past 99 hours, days read better
        (30 * 86400 + 5 * 3600, "30d05h"),
    ],
)
def test_format_duration(seconds: float | None, expected: str) -> None:
    assert format_duration(seconds) == expected


# -- windows --

TZ = timezone(timedelta(hours=2))


def at(hour: int, minute: int = 0, day: int = 10, second: int = 0) -> datetime:
    return datetime(2025, 6, day, hour, minute, second, tzinfo=TZ)


NIGHT = Window(at(20).timetz().replace(tzinfo=None), at(7).timetz().replace(tzinfo=None))
OFFICE = parse_window("09:00-17:00")


def test_parse_window_and_str() -> None:
    w = parse_window("20:00-07:00")
    assert w == NIGHT
    assert str(w) == "20:00-07:00"
    assert str(parse_window(" 9:05 - 17:30 ")) == "09:05-17:30"


@pytest.mark.parametrize("text", ["20:00", "20:00-", "-07:00", "24:00-07:00", "20:60-07:00", "8pm-7am", ""])
def test_parse_window_rejects(text: str) -> None:
    with pytest.raises(UsageError):
        parse_window(text)


@pytest.mark.parametrize(
    ("when", "open_"),
    [
        (at(20), True),  # the start is inside
        (at(23, 59), True),
        (at(0), True),  # past midnight: still the same night's window
        (at(6, 59, second=59), True),
        (at(7), False),  # the end is outside
        (at(12), False),
        (at(19, 59, second=59), False),
    ],
)
def test_window_wrapping_past_midnight(when: datetime, open_: bool) -> None:
    assert NIGHT.contains(when) is open_


@pytest.mark.parametrize(
    ("when", "open_"), [(at(9), True), (at(16, 59), True), (at(17), False), (at(3), False)]
)
def test_window_within_a_day(when: datetime, open_: bool) -> None:
    assert OFFICE.contains(when) is open_


def test_equal_ends_mean_always_open() -> None:
    always = parse_window("00:00-00:00")
    assert all(always.contains(at(h)) for h in range(24))
    assert always.next_open(at(5)) == at(5)
    assert always.closes_at(at(5)) is None


def test_next_open() -> None:
    assert NIGHT.next_open(at(23)) == at(23)  # open now: now
    assert NIGHT.next_open(at(12, 30, second=15)) == at(20)  # later today, on the minute
    assert OFFICE.next_open(at(8)) == at(9)
    assert OFFICE.next_open(at(18)) == at(9, day=11)  # closed for today: tomorrow
    assert NIGHT.next_open(at(7)) == at(20)  # just closed: tonight


def test_closes_at() -> None:
    assert NIGHT.closes_at(at(23)) == at(7, day=11)  # opened this evening, closes tomorrow
    assert NIGHT.closes_at(at(3)) == at(7)  # opened last evening, closes this morning
    assert OFFICE.closes_at(at(10)) == at(17)


def test_window_keeps_the_time_zone() -> None:
    assert NIGHT.next_open(at(12)).tzinfo is TZ
    assert NIGHT.closes_at(at(23)).tzinfo is TZ  # type: ignore[union-attr]


# -- start times --

NOW = datetime(2025, 6, 10, 21, 15, 42, 123456, tzinfo=TZ)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("22:00", datetime(2025, 6, 10, 22, 0, tzinfo=TZ)),  # later today
        ("21:15", datetime(2025, 6, 11, 21, 15, tzinfo=TZ)),  # this minute has begun: tomorrow
        ("08:30", datetime(2025, 6, 11, 8, 30, tzinfo=TZ)),  # earlier today: tomorrow
        ("0:05", datetime(2025, 6, 11, 0, 5, tzinfo=TZ)),
        (" 23:59 ", datetime(2025, 6, 10, 23, 59, tzinfo=TZ)),
    ],
)
def test_parse_start_at_clock_times(text: str, expected: datetime) -> None:
    assert parse_start_at(text, now=NOW) == expected


def test_parse_start_at_exactly_now_is_tomorrow() -> None:
    now = datetime(2025, 6, 10, 22, 0, tzinfo=TZ)
    assert parse_start_at("22:00", now=now) == now + timedelta(days=1)


def test_parse_start_at_iso() -> None:
    assert parse_start_at("2030-01-02T03:04+00:00", now=NOW) == datetime(2030, 1, 2, 3, 4, tzinfo=UTC)
    naive = parse_start_at("2030-01-02T03:04", now=NOW)
    assert naive.tzinfo is not None  # taken as local time, never left naive
    assert naive.replace(tzinfo=None) == datetime(2030, 1, 2, 3, 4)


def test_parse_start_at_defaults_to_the_local_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schedule_mod, "now_local", lambda: NOW)
    assert parse_start_at("22:00") == datetime(2025, 6, 10, 22, 0, tzinfo=TZ)


@pytest.mark.parametrize("text", ["25:00", "7pm", "22:60", "tomorrow", "", "2030-13-01T00:00"])
def test_parse_start_at_rejects(text: str) -> None:
    with pytest.raises(UsageError):
        parse_start_at(text, now=NOW)


@pytest.fixture
def berlin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if not hasattr(time, "tzset"):
        pytest.skip("time.tzset is POSIX-only")
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_parse_start_at_across_a_dst_change(berlin: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # 23:00 CET on 2024-03-30; clocks go forward to CEST (UTC+2) at 02:00 that night.
    now = datetime(2024, 3, 30, 22, 0, tzinfo=UTC).astimezone()
    monkeypatch.setattr(schedule_mod, "now_local", lambda: now)
    # 22:00 on 2024-03-31 in Berlin is 20:00 UTC.
    assert parse_start_at("22:00") == datetime(2024, 3, 31, 20, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200), ("7d", 604800), ("1h30m", 5400), ("1.5h", 5400),
     ("2 h", 7200), ("1w", 604800), ("10min", 600)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "h", "0", "0s", "-5m", "2x", "1h-"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(UsageError):
        parse_duration(text)
