"""An SFTP commit whose answer is lost, and whose second look fails too (issue 18).

The commit of an upload is SETSTAT+RENAME of the partial file (named with the task's id) to its
name. Here the link dies right after the server has done the RENAME, before its answer is read,
and the fresh connection the writer opens to look whether the rename happened fails as well (the
network is still down). Nothing can tell yet: the commit's outcome is typed "in doubt"
(:class:`~ferry.core.errors.CommitInDoubt`, stored as the task's error kind), and the task's next
attempt must recognise its own file by content (a hash of both ends, never size alone) and count
it copied and checked, not fail it as "Already exists" nor skip it. A file of someone else under
the name (same size, other bytes) stays as it is and meets the conflict policy.

The faults are injected in process at the adapter seam, as tests/sftp/test_small_writes.py does:
the real RENAME goes to the real loopback sshd, then the transport is closed. Deterministic.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest

import ferry.backends.sftp as sftp_mod
import ferry.backends.sftp.protocol as protocol_mod
import ferry.backends.sftp.writer as writer_mod
from ferry.core.cancel import CancelToken
from ferry.core.errors import Transient, error_kind
from ferry.core.outcomes import Evidence, Level, SkipReason, TaskState
from helpers import partials
from sftp.conformance_site import sftp_backend
from sshd import SshServer

SMALL = 4096  # the small-file writer (three round trips)
GENERAL = 1 << 20  # the general writer, checked by the host's own hash tool


@pytest.fixture
def backend(sshd: SshServer, tmp_path: Path) -> Iterator[Any]:
    config = sshd.ssh_config(tmp_path / "ssh_config", "doubt")
    b = sftp_backend(sshd, config, "doubt")
    yield b
    sftp_mod.close_all()


def _ctx(dst: Any, **options: Any) -> Any:
    from ferry.backends.local import LocalBackend
    from ferry.core.address import Address
    from ferry.core.progress import Accounting
    from ferry.transfers.bandwidth import Limiters
    from ferry.transfers.copy import CopyContext
    from ferry.transfers.options import JobOptions

    return CopyContext(
        LocalBackend(Address("file", "/")),
        dst,
        JobOptions(**{"on_conflict": "ask", **options}),
        Accounting(),
        Limiters(),
    )


def _task(src: Path, dst: Path, size: int, attempts: int = 0, kind: str | None = None) -> Any:
    from ferry.transfers.store import Task

    # id, job, kind, src, dst, rel, size, mtime_us, extra, state, attempts, interrupted,
    # hash_algo, hash, verified, error_kind, error
    return Task(
        7, 1, "file", str(src), str(dst), dst.name, size, None, None, TaskState.QUEUED, attempts, False,
        None, None, None, kind, None,
    )  # fmt: skip


def _lose_the_answer(
    backend: Any,
    monkeypatch: pytest.MonkeyPatch,
    then: Callable[[], None] = lambda: None,
    reconnect_fails: bool = True,
) -> Callable[[], None]:
    """The next commit's SETSTAT+RENAME reaches the server and is done; then the link dies before
    the answer is read, and (``reconnect_fails``) every new channel fails until the returned
    function is called: the network is still down."""
    real_commit = protocol_mod.setstat_then
    pool = backend._host.pool
    real_sftp = pool.sftp

    def down() -> Any:
        raise paramiko.SSHException("Unable to connect: network is unreachable")

    def drop(client: Any, *args: Any, **kwargs: Any) -> None:
        real_commit(client, *args, **kwargs)
        then()
        backend._host.connection._transport.close()
        if reconnect_fails:
            monkeypatch.setattr(pool, "sftp", down)
        raise paramiko.SSHException("Server connection dropped")

    monkeypatch.setattr(writer_mod, "setstat_then", drop)

    def restore() -> None:
        monkeypatch.setattr(writer_mod, "setstat_then", real_commit)
        monkeypatch.setattr(pool, "sftp", real_sftp)

    return restore


@pytest.mark.parametrize("verify", ["sha256", "none"])
@pytest.mark.parametrize("preserve_mtime", [True, False])
@pytest.mark.parametrize("size", [SMALL, GENERAL])
def test_the_retry_recognises_its_own_file(
    backend: Any,
    sshd: SshServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    size: int,
    preserve_mtime: bool,
    verify: str,
) -> None:
    """First attempt: renamed, answer lost, reconnect fails -> in doubt (a retriable error of its
    own kind), the file in place and no partial left. Next attempt: counted copied and checked by
    a hash of both ends, nothing written again; before, it failed "Already exists" (or was skipped
    as "already there")."""
    from ferry.core.errors import CommitInDoubt
    from ferry.transfers.copy import run_task

    data = os.urandom(size)
    src = tmp_path / "src"
    src.write_bytes(data)
    os.utime(src, (1_500_000_000, 1_500_000_000))  # not kept (preserve_mtime off): the file there looks other
    dst = sshd.mkdir() / "f"
    options = {"preserve_mtime": preserve_mtime, "verify": verify}
    restore = _lose_the_answer(backend, monkeypatch)
    with pytest.raises(Transient) as lost:
        run_task(_task(src, dst, size), _ctx(backend, **options), CancelToken())
    restore()
    assert dst.read_bytes() == data and not partials(dst.parent)  # the server did rename it
    before = dst.stat()

    ctx = _ctx(backend, **options)
    outcome = run_task(_task(src, dst, size, 1, error_kind(lost.value)), ctx, CancelToken())
    assert outcome.state == "done", outcome
    v = outcome.verification
    assert v.level is Level.CHECKSUM and v.algo == "sha256" and Evidence.AFTER_RESTART in v.evidence, v
    assert outcome.hash == hashlib.sha256(data).hexdigest()
    assert dst.read_bytes() == data and not partials(dst.parent)
    assert dst.stat().st_ino == before.st_ino  # recognised, not written again
    assert isinstance(lost.value, CommitInDoubt) and lost.value.kind == "commit-in-doubt", lost.value


@pytest.mark.parametrize("policy", ["skip", "rename"])
@pytest.mark.parametrize("size", [SMALL, GENERAL])
def test_someone_elses_file_of_the_same_size_is_not_ours(
    backend: Any, sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int, policy: str
) -> None:
    """The reconnect works, the partial is gone, the name holds a file of exactly the size written,
    but other bytes (put there as the link dropped): size alone must not call it ours. The commit
    is in doubt, and the next attempt leaves that file as it is and applies the conflict policy."""
    from ferry.core.errors import CommitInDoubt
    from ferry.transfers.copy import run_task

    data = os.urandom(size)
    src = tmp_path / "src"
    src.write_bytes(data)
    dst = sshd.mkdir() / "f"
    theirs = os.urandom(size)

    def replaced() -> None:
        dst.write_bytes(theirs)
        os.utime(dst, (1_000_000_000, 1_000_000_000))  # (same size and time would pass as identical)

    restore = _lose_the_answer(backend, monkeypatch, replaced, reconnect_fails=False)
    w = backend.open_write(str(dst), size=size, token="7", readback="sha256")
    w.write(data)
    assert w.finish() == hashlib.sha256(data).hexdigest()
    with pytest.raises(CommitInDoubt):
        w.commit(overwrite=False)
    restore()
    assert dst.read_bytes() == theirs and not partials(dst.parent)

    ctx = _ctx(backend, on_conflict=policy)
    outcome = run_task(_task(src, dst, size, 1, CommitInDoubt.kind), ctx, CancelToken())
    assert dst.read_bytes() == theirs  # never overwritten, never counted ours
    if policy == "skip":
        assert outcome.state == "skipped" and outcome.skip_reason is SkipReason.POLICY, outcome
    else:  # ours lands beside it, under a name of its own
        assert outcome.state == "done" and outcome.dst is not None and outcome.dst != str(dst), outcome
        assert Path(outcome.dst).read_bytes() == data
    assert not partials(dst.parent)


@pytest.mark.parametrize("how", ["retried in the run", "ferry queue retry"])
def test_the_doubt_survives_the_queue(
    backend: Any, sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Through the queue's own store: the failed attempt is put back (retried with backoff in the
    run) or failed for good (patience ran out) and retried with ``ferry queue retry``
    (Store.retry_failed); either way the claimed task still says its commit was in doubt, and
    its file is recognised. Before, ``queue retry`` forgot the kind and the retry met the file
    as a conflict."""
    from ferry.transfers.copy import run_task
    from ferry.transfers.options import JobOptions
    from ferry.transfers.store import NewTask, Store, TaskResult

    data = os.urandom(SMALL)
    src = tmp_path / "src"
    src.write_bytes(data)
    os.utime(src, (1_500_000_000, 1_500_000_000))
    dst = sshd.mkdir() / "f"
    store = Store(tmp_path / "q.db")
    job = store.create_job([str(src)], str(dst), JobOptions(), [(str(src), str(dst), "")])
    store.add_tasks(job, [NewTask(kind="file", src=str(src), dst=str(dst), rel="f", size=SMALL, mtime_us=None)])
    (task,) = store.claim_tasks([job], 10)
    options = {"preserve_mtime": False}
    restore = _lose_the_answer(backend, monkeypatch)
    with pytest.raises(Transient) as lost:
        run_task(task, _ctx(backend, **options), CancelToken())
    restore()
    state = "queued" if how == "retried in the run" else "failed"
    store.finish_tasks([TaskResult(task.id, state, 1, error_kind=error_kind(lost.value), error=str(lost.value))])
    if how == "ferry queue retry":
        assert store.retry_failed(job) == 1
    (again,) = store.claim_tasks([job], 10)
    assert again.id == task.id and again.error_kind == "commit-in-doubt", again
    outcome = run_task(again, _ctx(backend, **options), CancelToken())
    assert outcome.state == "done" and outcome.verification.level is Level.CHECKSUM, outcome
    assert dst.read_bytes() == data and not partials(dst.parent)
    store.close()


@pytest.mark.parametrize("size", [SMALL, GENERAL])
def test_a_second_look_that_works_settles_it_by_content(
    backend: Any, sshd: SshServer, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    """The answer is lost but the fresh connection works: both writers (before, only the small
    one looked, and by size) find the partial gone and the file's hash equal to what was written,
    and the commit succeeds, its note saying how it was settled."""
    data = os.urandom(size)
    dst = sshd.mkdir() / "f"
    restore = _lose_the_answer(backend, monkeypatch, reconnect_fails=False)
    w = backend.open_write(str(dst), size=size, token="7", readback="sha256")
    w.write(data)
    assert w.finish() == hashlib.sha256(data).hexdigest()
    w.commit(overwrite=False)
    restore()
    assert dst.read_bytes() == data and not partials(dst.parent)
    assert "hashed again" in w.verified_note, w.verified_note
