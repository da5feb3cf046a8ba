"""The token bucket behind ``--bwlimit`` and the window's limit, including a change mid-run."""

from __future__ import annotations

import time

from ferry.transfers.bandwidth import Limiters, TokenBucket


def test_an_unlimited_bucket_lets_everything_through_and_reports_inactive() -> None:
    bucket = TokenBucket(None)
    start = time.monotonic()
    bucket.consume(1 << 30)
    assert time.monotonic() - start < 0.5
    assert not Limiters(bucket)
    assert bucket.chunk_hint(1 << 20) == 1 << 20


def test_a_limit_set_while_running_slows_the_next_chunks_and_lifting_it_frees_them() -> None:
    bucket = TokenBucket(None)
    bucket.set_rate(256 * 1024)
    assert Limiters(bucket)
    start = time.monotonic()
    for _ in range(4):
        bucket.consume(64 * 1024)  # 256 KiB against a 64 KiB burst: about 0.75 s of debt
    assert time.monotonic() - start >= 0.6
    bucket.set_rate(None)
    start = time.monotonic()
    bucket.consume(64 << 20)
    assert time.monotonic() - start < 0.5
