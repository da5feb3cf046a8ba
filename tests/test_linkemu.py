"""The WAN bench's link emulator (benchmarks/linkemu.py) does what its figures rest on: it delays
by the RTT, caps the link rate and caps each connection's bytes in flight (the TCP window)."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

# a benchmark script, outside mypy's files: typed as Any here, checked with mypy --strict by hand
import linkemu  # type: ignore[import-not-found]

MiB = 1 << 20
# The machine is shared: other processes can only make a run slower, never faster. A bound that
# load can break (too slow) gets a second attempt; a bound the emulator itself would break (too
# fast, too early, over the window) is checked on every attempt.
ATTEMPTS = 2


@pytest.fixture
def sink() -> Iterator[tuple[str, int]]:
    listener, close = linkemu._sink_server()
    yield ("127.0.0.1", int(listener.getsockname()[1]))
    close()


def test_round_trip_is_the_rtt_within_ten_percent(sink: tuple[str, int]) -> None:
    emu = linkemu.LinkEmulator(0.050, 1e9, 6 * MiB).start()
    try:
        port = emu.add_route(sink)
        medians = []
        for _ in range(ATTEMPTS):
            rtts = linkemu.ping(port, 15)
            assert min(rtts) >= 0.050 * 0.98, rtts  # never early: the delay is a floor, in every attempt
            medians.append(statistics.median(rtts))
            if medians[-1] <= 0.055:
                break
    finally:
        emu.close()
    assert 0.045 <= min(medians) <= 0.055, medians


def test_link_rate_is_capped_within_fifteen_percent(sink: tuple[str, int]) -> None:
    # 80 Mbit/s = 10 MB/s; 8 MiB takes 0.84 s plus one RTT of handshake and the last byte's delay.
    expected = 8 * MiB / 10e6 + 0.010 + 0.010
    took = []
    for _ in range(ATTEMPTS):
        emu = linkemu.LinkEmulator(0.010, 80e6, 64 * MiB).start()
        try:
            took.append(linkemu.send_bulk(emu.add_route(sink), 8 * MiB))
        finally:
            emu.close()
        assert took[-1] >= expected * 0.85, (took, expected)  # never faster than the cap
        if took[-1] <= expected * 1.15:
            break
    assert min(took) <= expected * 1.15, (took, expected)


def test_window_caps_bytes_in_flight_and_the_rate_to_window_over_rtt(sink: tuple[str, int]) -> None:
    # 256 KiB per 100 ms RTT = 2.6 MB/s on a link that could carry 125 MB/s: 4 MiB takes ~1.6 s.
    window, rtt = 256 * 1024, 0.100
    expected = 4 * MiB / (window / rtt) + rtt  # plus the handshake
    took = []
    for _ in range(ATTEMPTS):
        emu = linkemu.LinkEmulator(rtt, 1e9, window).start()
        try:
            took.append(linkemu.send_bulk(emu.add_route(sink), 4 * MiB))
            peak = emu.stats.peak_in_flight
        finally:
            emu.close()
        assert peak == window  # filled, never exceeded
        assert took[-1] >= expected * 0.85, (took, expected)
        if took[-1] <= expected * 1.15:
            break
    assert min(took) <= expected * 1.15, (took, expected)
