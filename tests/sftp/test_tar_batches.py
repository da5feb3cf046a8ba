"""Many small files as tar streams over an exec channel (``ferry.backends.sftp.batches`` driven by
``ferry.transfers.batch``), against the real sshd: exact bytes and per-file records both ways,
conflict policies as per file, odd names through the per-file path, no tar where the account
has no shell, a source vanishing mid-batch, and a batch cancelled half way then resumed."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import ferry.backends.sftp as sftp_mod
from ferry.backends.base import temp_name
from ferry.backends.sftp import batches
from ferry.core.cancel import CancelToken
from ferry.core.errors import Cancelled, NotFound, Transient
from helpers import describe, file_digests, file_events, partials, wait_until
from sftp.conformance_site import sftp_backend
from sftp.test_resilience import alias_block, ferry_with, known_line
from sshd import SshServer

UP = "remote sha256 of the tar-extracted file"
DOWN = "sent in a tar stream"


def nested_tree(root: Path, count: int) -> dict[str, str]:
    """``count`` small files (0 B to ~9 KiB) in nested folders, times set to whole seconds."""
    for i in range(count):
        sub = root / f"a{i % 3}" / f"b{i % 5}"
        sub.mkdir(parents=True, exist_ok=True)
        p = sub / f"f{i:04d}.dat"
        p.write_bytes(os.urandom((i * 37) % 9000))
        os.utime(p, (1_600_000_000 + i, 1_600_000_000 + i))
    return file_digests(root)


def staging_folders(root: Path) -> list[str]:
    """The tar batches' staging folders under ``root`` (os.walk: they may vanish as it looks)."""
    return [os.path.join(top, d) for top, dirs, _files in os.walk(root) for d in dirs if d.startswith(".ferry-batch.")]


def task_rows(home: Path) -> list[tuple[str, str, str | None, str | None]]:
    """(kind, state, hash, verified) of every task in the queue database ``ferry`` used."""
    db = next((home / "data").rglob("*.db"))
    with sqlite3.connect(db) as con:
        return list(con.execute("SELECT kind, state, hash, verified FROM tasks"))


def test_upload_and_download_of_a_nested_tree_go_in_tar_batches(sshd: SshServer, tmp_path: Path) -> None:
    ferry = ferry_with(tmp_path, alias_block(sshd, "tar"), known_line(sshd))
    src = tmp_path / "tree"
    want = nested_tree(src, 300)
    remote = sshd.mkdir()
    res = ferry("cp", "-r", "--json", src, f"tar:{remote}/")
    assert res.returncode == 0, describe(res)
    files = [e for e in file_events(res.stdout).values() if e.get("kind", "file") == "file"]
    assert len(files) == 300 and all(e["state"] == "done" for e in files)
    batched = [e for e in files if UP in e["verified"]]
    assert len(batched) >= 250, files  # the first few may start before a batch can form
    assert all(e["verified"].startswith("sha256 match") for e in files)
    assert file_digests(remote / "tree") == want
    assert not partials(remote)
    assert not staging_folders(remote)  # the server's staging folders are gone
    for p in (src / "a1" / "b2").iterdir():  # times as the source's (set by tar from the header)
        assert (remote / "tree" / "a1" / "b2" / p.name).stat().st_mtime == p.stat().st_mtime
    rows = [r for r in task_rows(tmp_path) if r[0] == "file"]
    assert len(rows) == 300 and all(state == "done" and digest and len(digest) == 64 for _k, state, digest, _v in rows)

    back = tmp_path / "back"
    res = ferry("cp", "-r", "--json", f"tar:{remote}/tree", back)
    assert res.returncode == 0, describe(res)
    files = [e for e in file_events(res.stdout).values() if e.get("kind", "file") == "file"]
    assert len(files) == 300 and all(e["state"] == "done" and "sha256 match" in e["verified"] for e in files)
    assert sum(DOWN in e["verified"] for e in files) >= 250, files
    assert file_digests(back) == want
    assert not partials(back)
    for p in (src / "a2" / "b4").iterdir():
        assert (back / "a2" / "b4" / p.name).stat().st_mtime == p.stat().st_mtime


@pytest.mark.parametrize("policy", ["skip", "rename", "overwrite"])
def test_conflicts_in_a_batch_follow_the_policy_per_file(sshd: SshServer, tmp_path: Path, policy: str) -> None:
    ferry = ferry_with(tmp_path, alias_block(sshd, "tar"), known_line(sshd))
    src = tmp_path / "many"
    want = nested_tree(src, 120)
    remote = sshd.mkdir()
    clash = sorted(want)[::4]
    for rel in clash:
        (remote / "many" / rel).parent.mkdir(parents=True, exist_ok=True)
        (remote / "many" / rel).write_bytes(b"already here")
    sshd.chown(remote)
    res = ferry("cp", "-r", "--json", "--on-conflict", policy, src, f"tar:{remote}/")
    assert res.returncode == 0, describe(res)
    events = {k: e for k, e in file_events(res.stdout).items() if e.get("kind", "file") == "file"}
    assert len(events) == 120
    by_name = {k.rsplit("/", 1)[-1]: e for k, e in events.items()}
    got = file_digests(remote / "many")
    for rel, digest in want.items():
        e = by_name[rel.rsplit("/", 1)[-1]]
        if rel in clash and policy == "skip":
            assert e["state"] == "skipped" and (remote / "many" / rel).read_bytes() == b"already here"
            continue
        assert e["state"] == "done"
        if rel in clash and policy == "rename":
            stem, ext = os.path.splitext(rel)
            assert (remote / "many" / rel).read_bytes() == b"already here"
            assert got[f"{stem} (1){ext}"] == digest
        else:
            assert got[rel] == digest
    assert sum(UP in e["verified"] for e in events.values()) >= 60  # the others did go in batches
    assert not partials(remote)


ODD = ["new\nline.txt", "-leading-dash", "caf\udce9.bin", "back\\slash", "plain.txt"]


def test_odd_names_land_exactly_through_the_per_file_path(sshd: SshServer, tmp_path: Path) -> None:
    ferry = ferry_with(tmp_path, alias_block(sshd, "tar"), known_line(sshd))
    src = tmp_path / "odd"
    nested_tree(src, 40)  # enough small files around them that batches form
    for name in ODD:
        (src / "a0" / name).write_bytes(name.encode("utf-8", "surrogateescape") * 10)
    want = file_digests(src)
    remote = sshd.mkdir()
    res = ferry("cp", "-r", "--json", src, f"tar:{remote}/")
    assert res.returncode == 0, describe(res)
    assert file_digests(remote / "odd") == want
    events = {k.rsplit("/", 1)[-1]: e for k, e in file_events(res.stdout).items() if e.get("kind", "file") == "file"}
    for name in ("new\nline.txt", "caf\udce9.bin", "back\\slash"):  # cannot be quoted beyond doubt: per file
        assert events[name]["state"] == "done" and events[name]["verified"].startswith("sha256 match"), events[name]
        assert UP not in events[name]["verified"]
    assert sum(UP in e["verified"] for e in events.values()) >= 20
    back = tmp_path / "back"
    res = ferry("cp", "-r", "--json", f"tar:{remote}/odd", back)
    assert res.returncode == 0, describe(res)
    assert file_digests(back) == want
    events = {k.rsplit("/", 1)[-1]: e for k, e in file_events(res.stdout).items() if e.get("kind", "file") == "file"}
    assert not any(DOWN in events[n]["verified"] for n in ("new\nline.txt", "caf\udce9.bin", "back\\slash"))
    assert sum(DOWN in e["verified"] for e in events.values()) >= 20
    assert not partials(remote) and not partials(back)


def test_no_tar_without_a_shell_and_when_switched_off(
    sshd_factory: Callable[..., SshServer], sshd: SshServer, tmp_path: Path
) -> None:
    """``ForceCommand internal-sftp``: the probe finds no tar, every file goes per file (and,
    with no remote hash either, is read back over SFTP). ``FERRY_SFTP_TAR=0`` turns batches off."""
    server = sshd_factory(extra_config=["ForceCommand internal-sftp"])
    ferry = ferry_with(tmp_path, alias_block(server, "jail"), known_line(server))
    src = tmp_path / "few"
    want = nested_tree(src, 30)
    remote = server.mkdir()
    res = ferry("cp", "-r", "--json", src, f"jail:{remote}/")
    assert res.returncode == 0, describe(res)
    files = [e for e in file_events(res.stdout).values() if e.get("kind", "file") == "file"]
    assert len(files) == 30 and all(e["state"] == "done" and e["level"] == "checksum" for e in files)
    assert all(e["evidence"] == ["read-back"] for e in files)  # small files: read back, no remote tool
    assert file_digests(remote / "few") == want
    back = tmp_path / "back"
    res = ferry("cp", "-r", "--json", f"jail:{remote}/few", back)
    assert res.returncode == 0, describe(res)
    files = [e for e in file_events(res.stdout).values() if e.get("kind", "file") == "file"]
    assert files and not any(DOWN in e["verified"] for e in files)
    assert file_digests(back) == want

    ferry = ferry_with(tmp_path / "off", alias_block(sshd, "tar"), known_line(sshd))
    ferry.extra_env["FERRY_SFTP_TAR"] = "0"
    remote = sshd.mkdir()
    res = ferry("cp", "-r", "--json", src, f"tar:{remote}/")
    assert res.returncode == 0, describe(res)
    files = [e for e in file_events(res.stdout).values() if e.get("kind", "file") == "file"]
    assert len(files) == 30 and all(e["verified"] == "sha256 match" for e in files), files
    assert file_digests(remote / "few") == want


# ---- the engine in-process: one batch at a time ----


@pytest.fixture
def backend(sshd: SshServer, tmp_path: Path):  # type: ignore[no-untyped-def]
    config = sshd.ssh_config(tmp_path / "ssh_config", "tarb")
    b = sftp_backend(sshd, config, "tarb")
    yield b
    sftp_mod.close_all()


def _ctx(src: Any, dst: Any, **options: Any) -> Any:
    from ferry.backends.local import LocalBackend
    from ferry.core.address import Address
    from ferry.core.progress import Accounting
    from ferry.transfers.bandwidth import Limiters
    from ferry.transfers.copy import CopyContext
    from ferry.transfers.options import JobOptions

    local = LocalBackend(Address("file", "/"))
    return CopyContext(
        src if src is not None else local,
        dst if dst is not None else local,
        JobOptions(**{"on_conflict": "ask", **options}),
        Accounting(),
        Limiters(),
    )


def _tasks(pairs: list[tuple[str, str, int]], first_id: int = 1) -> list[Any]:
    from ferry.core.outcomes import TaskState
    from ferry.transfers.store import Task

    unset = (None,) * 5  # hash_algo, hash, verified, error_kind, error
    return [
        Task(first_id + n, 1, "file", s, d, os.path.basename(d), size, None, None, TaskState.QUEUED, 0, False, *unset)
        for n, (s, d, size) in enumerate(pairs)
    ]


def test_a_source_vanishing_mid_batch_fails_only_that_file(backend: Any, sshd: SshServer, tmp_path: Path) -> None:
    from ferry.transfers import batch

    src = tmp_path / "src"
    src.mkdir()
    remote = sshd.mkdir()
    pairs = []
    for i in range(20):
        (src / f"f{i}").write_bytes(os.urandom(1000 + i))
        pairs.append((str(src / f"f{i}"), str(remote / f"f{i}"), 1000 + i))
    (src / "f7").unlink()
    before = batches.state(backend._host).uploads
    ctx = _ctx(None, backend)
    results = batch.run_batch(_tasks(pairs), ctx, CancelToken())
    assert isinstance(results[7][1], NotFound) and results[7][0] is None
    for i, (outcome, error) in enumerate(results):
        if i != 7:
            assert error is None and outcome is not None and UP in outcome.verified
            assert (remote / f"f{i}").read_bytes() == (src / f"f{i}").read_bytes()
    assert batches.state(backend._host).uploads - before == 19
    assert not (remote / "f7").exists() and not partials(remote)

    # Down: one remote file goes between the listing and the tar; the rest arrive.
    back = tmp_path / "back"
    back.mkdir()
    down = [(str(remote / f"f{i}"), str(back / f"f{i}"), 1000 + i) for i in range(20) if i != 7]
    (remote / "f3").unlink()
    results = batch.run_batch(_tasks(down, 100), _ctx(backend, None), CancelToken())
    for (s, d, _size), (outcome, error) in zip(down, results, strict=True):
        if s.endswith("/f3"):
            assert isinstance(error, NotFound) and "vanished" in str(error)
        else:
            assert error is None and outcome is not None and DOWN in outcome.verified
            assert Path(d).read_bytes() == Path(s).read_bytes()
    assert not partials(back)


@pytest.mark.parametrize("cut", ["mid-member", "between members"])
def test_an_archive_cut_short_leaves_nothing_on_the_server(
    backend: Any, sshd: SshServer, monkeypatch: pytest.MonkeyPatch, cut: str
) -> None:
    """The stream ends early (as when the connection drops and sshd's command sees EOF): the
    batch fails as a whole, and neither a partial file nor the staging folder is left behind,
    also when the cut falls exactly between two members (tar itself is content then)."""
    from datetime import UTC, datetime

    remote = sshd.mkdir()
    items = [(str(remote / f"c{i}"), os.urandom(5000 + i), f"{900 + i}", datetime.now(UTC)) for i in range(6)]
    host = backend._host
    real_run = host.shell.run

    def cut_short(command: bytes, timeout: float = 600, stdin: Any = None) -> Any:
        pieces = [bytes(p) for group in stdin for p in group]  # header, data, padding per member, then the end
        # two whole members, the third's header and a piece of its data; or three whole members
        # and no end-of-archive blocks
        sent = [*pieces[:7], pieces[7][:1000]] if cut == "mid-member" else pieces[:9]
        return real_run(command, timeout, sent)

    assert "sha256" in backend.capabilities.hashes  # the remote tools are known (as in a real run)
    monkeypatch.setattr(host.shell, "run", cut_short)
    results = batches.write_batch(backend, items, "sha256")
    assert all(isinstance(r, Transient) and "tar batch" in r.message for r in results), results
    assert not list(remote.iterdir()), list(remote.iterdir())  # no partial, no .ferry-batch.* folder

    monkeypatch.setattr(host.shell, "run", real_run)  # the same batch, whole: every file under its partial name
    results = batches.write_batch(backend, items, "sha256")
    assert results == [hashlib.sha256(data).hexdigest() for _f, data, _t, _m in items]
    assert sorted(p.name for p in remote.iterdir()) == sorted(temp_name(f"c{i}", f"{900 + i}") for i in range(6))


def test_cancelled_between_tar_and_rename_leaves_only_partials_and_resumes(
    backend: Any, sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped after the server extracted the batch but before any rename: nothing is under a
    final name (unverified files never are), every file is under its own partial name; the
    resumed tasks (interrupted, per file) complete each file exactly once."""
    from ferry.transfers import batch
    from ferry.transfers.copy import run_task

    src = tmp_path / "src"
    src.mkdir()
    remote = sshd.mkdir()
    pairs = []
    for i in range(30):
        (src / f"g{i}").write_bytes(os.urandom(3000 + i))
        pairs.append((str(src / f"g{i}"), str(remote / f"g{i}"), 3000 + i))
    token = CancelToken()
    real = batches.write_batch

    def extract_then_stop(*args: Any) -> Any:
        got = real(*args)
        token.cancel("pause")
        return got

    monkeypatch.setattr(batches, "write_batch", extract_then_stop)
    tasks = _tasks(pairs, 500)
    results = batch.run_batch(tasks, _ctx(None, backend), token)
    assert all(outcome is None and isinstance(error, Cancelled) for outcome, error in results)
    assert not any((remote / f"g{i}").exists() for i in range(30))
    assert len(partials(remote)) == 30
    monkeypatch.setattr(batches, "write_batch", real)

    from dataclasses import replace

    ctx = _ctx(None, backend)
    for t in tasks:
        outcome = run_task(replace(t, interrupted=True), ctx, CancelToken())
        assert outcome.state == "done" and outcome.verified.startswith("sha256 match")
    assert file_digests(remote) == file_digests(src)
    assert not partials(remote)


def test_cancel_of_a_running_ferry_cp_then_queue_run_finishes_every_file_once(sshd: SshServer, tmp_path: Path) -> None:
    """A ``ferry cp`` of many small files killed mid-way, then ``ferry queue run``: every file
    done exactly once, verified, no partial left."""
    import signal
    import time

    ferry = ferry_with(tmp_path, alias_block(sshd, "tar"), known_line(sshd))
    src = tmp_path / "tree"
    want = nested_tree(src, 600)
    remote = sshd.mkdir()
    proc = ferry.popen("cp", "-r", "--json", "--bwlimit", "400K", src, f"tar:{remote}/")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list((remote / "tree").rglob("f*.dat"))) < 50:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    # The batch cut by the kill removes its staging folder on the server once sshd's command
    # sees the stream end (a moment after our connection is gone).
    wait_until(lambda: not staging_folders(remote), 10, what="staging folders removed")
    landed = {rel: d for rel, d in file_digests(remote / "tree").items() if not rel.endswith(".ferry-part")}
    assert 0 < len(landed) < 600
    for rel, digest in landed.items():  # whatever is under a final name is complete and right
        assert want[rel] == digest
    res = ferry("queue", "run", timeout=300)
    assert res.returncode == 0, describe(res)
    assert file_digests(remote / "tree") == want
    assert not partials(remote)
    rows = [r for r in task_rows(tmp_path) if r[0] == "file"]
    assert len(rows) == 600 and all(state == "done" and digest for _k, state, digest, _v in rows)
    # Each verified: by tar batches before the kill, per file after it (claimed tasks come back
    # interrupted), or found complete after the restart and hashed on both sides.
    assert all((verified or "").startswith("sha256 match") for *_x, verified in rows), rows


def test_size_only_uploads_check_the_servers_sizes(backend: Any, sshd: SshServer, tmp_path: Path) -> None:
    """``--verify size``: the batch checks each extracted file's size on the server (``wc -c``)
    before the rename, and records it as the per-file copy does."""
    from ferry.transfers import batch

    src = tmp_path / "src"
    src.mkdir()
    remote = sshd.mkdir()
    pairs = []
    for i in range(12):
        (src / f"s{i}").write_bytes(os.urandom(500 * i))
        pairs.append((str(src / f"s{i}"), str(remote / "new" / f"s{i}"), 500 * i))
    before = batches.state(backend._host).uploads
    results = batch.run_batch(_tasks(pairs, 900), _ctx(None, backend, verify="size"), CancelToken())
    assert all(e is None and o is not None and o.verified == "size only" for o, e in results), results
    assert batches.state(backend._host).uploads - before == 12
    assert file_digests(remote / "new") == file_digests(src)
    assert batches._parse_sizes(b"  5 ./a\n 12 ./b c\n 17 total\n", ["./a", "./b c"]) == ["size:5", "size:12"]
    assert batches._parse_sizes(b"5 ./a\n", ["./b"]) is None  # a line for another file: not trusted


def test_tar_batches_under_a_tight_max_sessions(sshd_factory: Callable[..., SshServer], tmp_path: Path) -> None:
    """MaxSessions 2 and eight workers: tar streams take session slots like every other channel,
    so batches still run (none waits forever for a session) and every file is exact."""
    server = sshd_factory(max_sessions=2)
    ferry = ferry_with(tmp_path, alias_block(server, "tight"), known_line(server))
    src = tmp_path / "tree"
    want = nested_tree(src, 200)
    remote = server.mkdir()
    res = ferry("cp", "-r", "--json", "--parallel", "8", src, f"tight:{remote}/", timeout=180)
    assert res.returncode == 0, describe(res)
    files = [e for e in file_events(res.stdout).values() if e.get("kind", "file") == "file"]
    assert len(files) == 200 and all(e["state"] == "done" and "sha256 match" in e["verified"] for e in files)
    assert sum(UP in e["verified"] for e in files) >= 100, describe(res)
    assert file_digests(remote / "tree") == want
    back = tmp_path / "back"
    res = ferry("cp", "-r", "--json", "--parallel", "8", f"tight:{remote}/tree", back, timeout=180)
    assert res.returncode == 0, describe(res)
    files = [e for e in file_events(res.stdout).values() if e.get("kind", "file") == "file"]
    assert sum(DOWN in e["verified"] for e in files) >= 100
    assert file_digests(back) == want
    assert server.log_text().count("Accepted publickey") == 2  # one login per command


def test_tar_streams_through_many_rekeys_keep_the_connection(backend: Any, sshd: SshServer) -> None:
    """The client asks for new keys every 256 KiB while tar batches keep closing exec channels:
    a CLOSE from the server that arrives during the key exchange must not stall the transport
    thread (paramiko #822: it waited for the exchange it alone could finish, then dropped the
    connection; 1,000 x 1 MiB down took 41 s instead of 8). Same connection, every byte, in time."""
    import time

    remote = sshd.mkdir()
    blobs = {f"f{i}.bin": os.urandom(96 << 10) for i in range(4)}
    for name, data in blobs.items():
        (remote / name).write_bytes(data)
    sshd.chown(remote)
    host = backend._host
    transport = host.transport()
    generation = host.pool.generation
    transport.packetizer.REKEY_BYTES = 256 << 10  # paramiko's is 512 MiB: a rekey every batch or two
    transport.clear_to_send_timeout = 5.0  # a stall fails in seconds, not paramiko's 30
    paths = [str(remote / name) for name in blobs]
    start = time.monotonic()
    for _ in range(40):
        got = batches.read_batch(backend, paths)
        assert [r[1] if isinstance(r, tuple) else r for r in got] == list(blobs.values())
    assert host.pool.generation == generation and transport.is_active()
    assert time.monotonic() - start < 60


@pytest.mark.parametrize("fastpath", ["1", "0"])
def test_tar_stream_reader_takes_each_member_exactly(
    backend: Any, sshd: SshServer, monkeypatch: pytest.MonkeyPatch, fastpath: str
) -> None:
    """Ferry reads the tar stream itself (into each file's buffer, no tarfile): sizes on and
    around block boundaries, an empty file, a name past ustar's 100 bytes (GNU tar's long-name
    member before it), a link (never taken: per file), a missing file; with the lean channel
    path and with paramiko's (FERRY_SSH_FASTPATH=0)."""
    monkeypatch.setenv("FERRY_SSH_FASTPATH", fastpath)
    remote = sshd.mkdir()
    deep = remote / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    blobs = {remote / f"s{n}": os.urandom(n) for n in (0, 1, 511, 512, 513, 70_000)}
    blobs[deep / ("long-" + "n" * 80)] = os.urandom(3000)
    for i, (path, data) in enumerate(blobs.items()):
        path.write_bytes(data)
        os.utime(path, (1_600_000_000 + i, 1_600_000_000 + i))
    (remote / "link").symlink_to(remote / "s1")
    sshd.chown(remote)
    asked = [*map(str, blobs), str(remote / "link"), str(remote / "missing")]
    got = batches.read_batch(backend, asked)
    for i, (path, data) in enumerate(blobs.items()):
        item = got[i]
        assert isinstance(item, tuple), item
        entry, body = item
        assert bytes(body) == data and entry.size == len(data) and entry.path == str(path)
        assert entry.mtime is not None and entry.mtime.timestamp() == 1_600_000_000 + i
    assert isinstance(got[-2], BaseException) and isinstance(got[-1], NotFound)
