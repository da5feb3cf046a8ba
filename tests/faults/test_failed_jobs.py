"""A failed job never hides (issue 18): while it is in the queue, every ``ferry queue run`` says
so and exits non-zero, until it is retried, cancelled or cleared."""

from __future__ import annotations

from pathlib import Path

from helpers import Ferry, describe, result_event


def test_queue_run_with_a_failed_job_in_the_queue_says_so_and_exits_1(ferry: Ferry, tmp_path: Path) -> None:
    (tmp_path / "gone.txt").write_bytes(b"here when queued")
    ferry.ok("queue", "add", tmp_path / "gone.txt", f"{tmp_path / 'dst'}/")
    (tmp_path / "gone.txt").unlink()
    res = ferry("queue", "run")
    assert res.returncode == 1, describe(res)
    assert ferry.job(1)["state"] == "failed"

    # Later runs: nothing left to do, but the failed job is still there.
    res = ferry("queue", "run")
    assert res.returncode == 1, describe(res)
    assert "Job 1 failed" in res.stderr and "ferry queue retry 1" in res.stderr, describe(res)
    res = ferry("queue", "run", "--json")
    assert res.returncode == 1, describe(res)
    result = result_event(res.stdout)
    assert result["failed_before"] == [1] and result["exit_code"] == 1 and result["jobs"] == {}

    # A good job run beside it still finishes, and the run still says the failed one is there.
    (tmp_path / "fine.txt").write_bytes(b"fine")
    ferry.ok("queue", "add", tmp_path / "fine.txt", f"{tmp_path / 'dst'}/")
    res = ferry("queue", "run", "--json")
    assert res.returncode == 1, describe(res)
    result = result_event(res.stdout)
    assert result["jobs"] == {"2": "done"} and result["failed_before"] == [1]
    assert (tmp_path / "dst" / "fine.txt").read_bytes() == b"fine"

    # Only job 2 asked for: job 1 is not its business.
    assert ferry("queue", "run", "2").returncode == 0

    ferry.ok("queue", "clear", "--failed", "1")
    res = ferry("queue", "run")
    assert res.returncode == 0, describe(res)
    assert "Nothing to run" in res.stderr
