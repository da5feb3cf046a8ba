"""Site to site (issue 22): an SSH host and an S3 bucket move the bytes themselves, through the
host's ``curl`` with URLs Ferry signs (``backends/sftp/direct.py``).

Everything is real and on loopback: the OpenSSH sshd fixture is the host, the moto server the
store, and the host's ``curl`` reaches the store directly (both on 127.0.0.1). Ferry runs as the
``ferry`` command in a child process whose SFTP and S3 readers and writers count their use, so a
test can say no byte passed through Ferry. The host's ``PATH`` is a folder of our own (sshd's
``SetEnv``): a ``curl`` that waits a little before it runs (so ``ps`` sees it), or none at all.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ferry.backends.base import NoDirectRoute
from ferry.backends.sftp.direct import forget_probes
from helpers import Ferry, describe, file_events, result_event, stop
from s3.conftest import make_backend
from s3.prefix_gate import PrefixGate
from s3.servers import S3Server, shared_server
from sftp.conformance_site import sftp_backend
from sftp.tcp_proxy import TcpProxy
from sftp.test_cli_sftp import url, user_home
from sshd import SshServer, _descendants

# Runs ``ferry`` with every byte path of the SFTP and S3 backends counted: at exit it prints how
# many times any of them was used (zero when the host moved everything).
_COUNTING = """
import atexit, sys
from ferry.backends.sftp.backend import SFTPBackend, ConfinedSFTP
from ferry.backends.s3.backend import S3Backend
used = []
def counted(cls, name):
    real = cls.__dict__.get(name)
    if real is None:
        return
    def wrapper(self, *a, **k):
        used.append(cls.__name__ + "." + name)
        return real(self, *a, **k)
    setattr(cls, name, wrapper)
for cls in (SFTPBackend, ConfinedSFTP, S3Backend):
    for name in ("open_read", "open_write", "read_batch", "write_batch", "server_copy"):
        counted(cls, name)
atexit.register(lambda: print("BYTE-PATHS-USED", len(used), *sorted(set(used)), file=sys.stderr))
from ferry.__main__ import main
sys.exit(main(sys.argv[1:]))
"""

_TOOLS = ("sh", "cat", "rm", "wc", "sha256sum", "md5sum", "sleep", "mv", "mkdir", "env", "tail", "head")


@pytest.fixture(autouse=True)
def _fresh_probes() -> Iterator[None]:
    forget_probes()
    yield
    forget_probes()


@pytest.fixture
def moto() -> S3Server:
    try:
        return shared_server("moto")
    except RuntimeError as exc:
        pytest.skip(f"moto S3 server unavailable: {exc}")


def host_path(folder: Path, *, curl: bool, delay: float = 0.0) -> Path:
    """A folder for the host's PATH: the few tools the route uses, and ``curl`` (waiting ``delay``
    seconds first, so a test sees it in ``ps``) only if asked."""
    folder.chmod(0o755)
    for tool in _TOOLS:
        found = shutil.which(tool)
        assert found, tool
        if tool == "sha256sum":  # counts its runs in sha256sum.log
            log = folder / "sha256sum.log"
            log.touch(mode=0o666)
            log.chmod(0o666)
            (folder / tool).write_text(f'#!/bin/sh\necho run >> {log}\nexec {found} "$@"\n')
            (folder / tool).chmod(0o755)
            continue
        (folder / tool).symlink_to(found)
    if curl:
        real = shutil.which("curl")
        assert real, "curl"
        script = folder / "curl"
        log = folder / "curl.log"  # one line per run: its arguments (never a URL: that is on stdin)
        log.touch(mode=0o666)
        log.chmod(0o666)
        script.write_text(f'#!/bin/sh\necho "$*" >> {log}\nsleep {delay}\nexec {real} "$@"\n')
        script.chmod(0o755)
    return folder


@pytest.fixture
def host(sshd_factory: Callable[..., SshServer]) -> Iterator[Callable[..., SshServer]]:
    """``host(curl=True, delay=0.3)``: an sshd whose sessions get a PATH of our own (in /tmp,
    where the login user can reach it)."""
    made: list[Path] = []

    def start(*, curl: bool = True, delay: float = 0.0) -> SshServer:
        folder = Path(tempfile.mkdtemp(prefix="ferry-hostbin-", dir="/tmp"))
        made.append(folder)
        host_path(folder, curl=curl, delay=delay)
        return sshd_factory(extra_config=[f"SetEnv PATH={folder}"])

    yield start
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


def host_bin(server: SshServer) -> Path:
    """The folder ``host`` made the server's PATH."""
    line = next(x for x in server.extra_config if x.startswith("SetEnv PATH="))
    return Path(line.split("=", 1)[1])


def seed_remote(folder: Path, server: SshServer) -> dict[str, bytes]:
    files = {
        "a.txt": b"alpha\n",
        "empty": b"",
        "sub/b.bin": os.urandom(300_000),
        "sub/deeper/c.dat": os.urandom(3 << 20),
    }
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    server.chown(folder)
    return files


def bucket_files(server: S3Server, bucket: str, prefix: str, *, markers: bool = False) -> dict[str, bytes]:
    """Objects under ``prefix`` by the rest of their key; folder markers (``sub/``) only if asked."""
    client = server.client()
    out = {}
    for obj in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []):
        rest = obj["Key"][len(prefix) :]
        if markers or (rest and not rest.endswith("/")):
            out[rest] = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
    return out


def byte_paths_used(stderr: str) -> int:
    line = next(x for x in stderr.splitlines() if x.startswith("BYTE-PATHS-USED"))
    return int(line.split()[1])


def ferry_for(server: SshServer, store: S3Server, tmp_path: Path, **env: str) -> Ferry:
    """``ferry`` with a home that knows the host (key, known_hosts) and the store's variables."""
    home = tmp_path / "home"
    if not home.exists():
        user_home(server, tmp_path)
    extra = {"HOME": str(home), "SSH_AUTH_SOCK": "", **store.env(), **env}
    return Ferry(home=tmp_path, cwd=tmp_path, extra_env=extra)


def counting_ferry(ferry: Ferry, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _COUNTING, *args],
        cwd=ferry.cwd,
        env=ferry.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class ProcessWatch:
    """Polls ``ps`` (the sshd fixture's sessions are this machine's processes) for command lines
    holding ``needle``, and for ``curl`` runs, while a transfer goes on."""

    def __init__(self, needle: str) -> None:
        self.needle = needle
        self.leaks: list[str] = []
        self.curls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ProcessWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
            for line in out.splitlines():
                if "curl" in line and "--fail" in line:
                    self.curls += 1
                if self.needle in line:
                    self.leaks.append(line)
            time.sleep(0.05)


def queue_db_text(ferry: Ferry) -> bytes:
    db = ferry.home / "data" / "queue.db"
    con = sqlite3.connect(db)
    try:
        con.execute("PRAGMA wal_checkpoint(FULL)")
    finally:
        con.close()
    return b"".join(p.read_bytes() for p in db.parent.glob("queue.db*"))


def test_cp_r_host_folder_to_s3_goes_direct_verified_without_bytes_through_ferry(
    host: Callable[..., SshServer], moto: S3Server, tmp_path: Path
) -> None:
    server = host(delay=0.3)
    bucket = moto.new_bucket()
    remote = server.mkdir()
    want = seed_remote(remote / "run42", server)
    ferry = ferry_for(server, moto, tmp_path)
    with ProcessWatch("X-Amz-Signature") as ps:
        res = counting_ferry(ferry, "cp", "-r", "--json", url(server, f"{remote}/run42"), f"s3://{bucket}/run42/")
    assert res.returncode == 0, describe(res)
    assert byte_paths_used(res.stderr) == 0, res.stderr
    landed = bucket_files(moto, bucket, "run42/run42/", markers=True)  # into the folder, as cp -r does
    assert {k: v for k, v in landed.items() if not k.endswith("/") and k} == want
    # Folders as the relay leaves them: a marker for each (so an empty one is not lost).
    assert {k for k in landed if k.endswith("/") or not k} == {"", "sub/", "sub/deeper/"}
    files = {k: v for k, v in file_events(res.stdout).items() if v.get("kind", "file") == "file"}
    assert len(files) == len(want), files
    assert {e["level"] for e in files.values()} == {"checksum"}, files
    for e in files.values():
        assert {"host-tool", "s3-etag-md5"} <= set(e["evidence"]), e
    assert result_event(res.stdout)["state"] == "done"
    # The host's SHA-256 and the file's time are kept with each object, as a relayed upload keeps them.
    head = moto.client().head_object(Bucket=bucket, Key="run42/run42/sub/b.bin")
    assert head["Metadata"]["ferry-sha256"] == hashlib.sha256(want["sub/b.bin"]).hexdigest()
    kept = float(head["Metadata"]["mtime"])
    assert kept == int((remote / "run42" / "sub" / "b.bin").stat().st_mtime)  # SFTP's whole seconds
    # The signed URLs never showed in the host's process list, nor in the queue.
    assert ps.curls > 0, "the watch never saw the host's curl: it proves nothing"
    assert ps.leaks == []
    assert b"X-Amz-Signature" not in queue_db_text(ferry)
    assert b"X-Amz-Signature" not in (res.stdout + res.stderr).encode()


def test_cp_r_s3_to_host_goes_direct_checked_against_the_store(
    host: Callable[..., SshServer], moto: S3Server, tmp_path: Path
) -> None:
    server = host()
    bucket = moto.new_bucket()
    client = moto.client()
    plain = os.urandom(1 << 20)
    summed = os.urandom(200_000)
    client.put_object(Bucket=bucket, Key="in/plain.bin", Body=plain)  # single-part ETag: its MD5
    client.put_object(Bucket=bucket, Key="in/sub/summed.bin", Body=summed, ChecksumAlgorithm="SHA256")
    remote = server.mkdir()
    ferry = ferry_for(server, moto, tmp_path)
    res = counting_ferry(ferry, "cp", "-r", "--json", f"s3://{bucket}/in", url(server, f"{remote}/"))
    assert res.returncode == 0, describe(res)
    assert byte_paths_used(res.stderr) == 0, res.stderr
    assert (remote / "in" / "plain.bin").read_bytes() == plain
    assert (remote / "in" / "sub" / "summed.bin").read_bytes() == summed
    files = file_events(res.stdout)
    by_name = {Path(k).name: v for k, v in files.items() if v.get("kind", "file") == "file"}
    assert by_name["plain.bin"]["level"] == "checksum" and "s3-etag-md5" in by_name["plain.bin"]["evidence"]
    assert by_name["summed.bin"]["level"] == "checksum" and "s3-checksum" in by_name["summed.bin"]["evidence"]
    # The SHA-256 the host computed and the store confirmed is the file's recorded hash (manifests).
    manifest = ferry.ok("queue", "show", "1", "--manifest").stdout
    assert f"{hashlib.sha256(summed).hexdigest()}  in/sub/summed.bin" in manifest, manifest
    assert not [p for p in remote.rglob("*") if p.name.endswith(".ferry-part")]


def test_a_host_without_curl_has_no_direct_route_and_says_why(
    host: Callable[..., SshServer], moto: S3Server, tmp_path: Path
) -> None:
    server = host(curl=False)
    config = server.ssh_config(tmp_path / "ssh_config", "nocurl")
    sftp = sftp_backend(server, config, "nocurl")
    store = make_backend(moto, moto.new_bucket())
    try:
        with pytest.raises(NoDirectRoute) as info:
            sftp.delegation(sftp, store)
        assert info.value.reason == "the host nocurl has no curl"
        with pytest.raises(NoDirectRoute):
            sftp.delegation(store, sftp)
    finally:
        store.close()


def test_a_host_that_cannot_reach_the_store_has_no_direct_route(
    host: Callable[..., SshServer], moto: S3Server, tmp_path: Path
) -> None:
    server = host()
    config = server.ssh_config(tmp_path / "ssh_config", "cut-off")
    sftp = sftp_backend(server, config, "cut-off")
    closed = TcpProxy(("127.0.0.1", 9))  # an endpoint nothing answers behind
    closed.close()
    store = make_backend(moto, moto.new_bucket(), endpoint=f"http://127.0.0.1:{closed.port}")
    try:
        with pytest.raises(NoDirectRoute) as info:
            sftp.delegation(sftp, store)
        assert info.value.reason == f"the host cut-off cannot reach http://127.0.0.1:{closed.port}"
    finally:
        store.close()


def test_checksum_digests_match_what_the_bucket_holds(moto: S3Server) -> None:
    # Sanity for the evidence the tests above read: moto's single-part ETag is the body's MD5.
    bucket = moto.new_bucket()
    body = b"etag check"
    etag = moto.client().put_object(Bucket=bucket, Key="k", Body=body)["ETag"].strip('"')
    assert etag == hashlib.md5(body).hexdigest()


def test_an_expired_url_fails_its_files_and_a_retry_redoes_them(host: Callable[..., SshServer], tmp_path: Path) -> None:
    try:
        store = shared_server("rclone")  # moto takes any signature, expired or not
    except RuntimeError as exc:
        pytest.skip(f"rclone serve s3 unavailable: {exc}")
    server = host(delay=2.5)  # the host's curl starts 2.5 s after its URL was signed
    bucket = store.new_bucket()
    remote = server.mkdir()
    want = seed_remote(remote / "run", server)
    short = ferry_for(server, store, tmp_path, FERRY_DIRECT_URL_TTL="1", FERRY_DIRECT_STREAMS="4")
    res = short("cp", "-r", "--json", url(server, f"{remote}/run"), f"s3://{bucket}/run/")
    assert res.returncode == 1, describe(res)
    files = {k: v for k, v in file_events(res.stdout).items() if v.get("kind", "file") == "file"}
    assert files and {e["state"] for e in files.values()} == {"failed"}, files
    assert all("a signed URL lasts 1 s" in e["error"] for e in files.values()), files
    assert bucket_files(store, bucket, "") == {}  # no file half-written under a final name
    assert "X-Amz-Signature" not in res.stdout + res.stderr
    job = short.jobs()[-1]["id"]
    later = ferry_for(server, store, tmp_path)  # URLs last ten minutes again
    later.ok("queue", "retry", str(job))
    res = later("queue", "run", "--json")
    assert res.returncode == 0, describe(res)
    assert bucket_files(store, bucket, "run/run/") == want
    assert later.job(job)["state"] == "done"


def test_a_dropped_ssh_session_fails_only_the_files_in_flight(
    host: Callable[..., SshServer], moto: S3Server, tmp_path: Path
) -> None:
    server = host(delay=1.0)
    bucket = moto.new_bucket()
    remote = server.mkdir()
    folder = remote / "run"
    folder.mkdir()
    want = {f"f{i}.bin": os.urandom(10_000 + i) for i in range(8)}
    for name, data in want.items():
        (folder / name).write_bytes(data)
    server.chown(folder)
    proxy = TcpProxy((server.host, server.port))
    try:
        home = user_home(server, tmp_path, known=False)
        known = server.known_hosts.read_text().replace(f"]:{server.port} ", f"]:{proxy.port} ")
        (home / ".ssh" / "known_hosts").write_text(known)
        ferry = ferry_for(server, moto, tmp_path, FERRY_DIRECT_STREAMS="2")
        address = f"sftp://{server.user}@{server.host}:{proxy.port}{folder}"
        proc = ferry.popen("cp", "-r", "--json", address, f"s3://{bucket}/run/")
        deadline = time.monotonic() + 60
        while len(bucket_files(moto, bucket, "")) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        proxy.cut()  # the SSH session drops while two files are in flight
        out, err = proc.communicate(timeout=120)
    finally:
        proxy.close()
    assert proc.returncode == 1, err
    files = {Path(k).name: v for k, v in file_events(out).items() if v.get("kind", "file") == "file"}
    failed = [n for n, e in files.items() if e["state"] == "failed"]
    assert 1 <= len(failed) <= 2, files  # the files in flight, and only those
    assert all(e["state"] == "done" and e["level"] == "checksum" for n, e in files.items() if n not in failed)
    assert len(files) == len(want)
    # The next run (over a new session) redoes the failed files.
    job = ferry.jobs()[-1]["id"]
    ferry.ok("queue", "retry", str(job))
    ferry.ok("queue", "run")
    assert bucket_files(moto, bucket, "run/run/") == want
    assert ferry.job(job)["state"] == "done"


def test_pause_keeps_finished_files_and_the_next_run_sends_only_the_rest(
    host: Callable[..., SshServer], moto: S3Server, tmp_path: Path
) -> None:
    server = host(delay=0.7)
    log = host_bin(server) / "curl.log"
    bucket = moto.new_bucket()
    remote = server.mkdir()
    folder = remote / "run"
    folder.mkdir()
    want = {f"f{i}.bin": os.urandom(5_000 + i) for i in range(6)}
    for name, data in want.items():
        (folder / name).write_bytes(data)
    server.chown(folder)
    ferry = ferry_for(server, moto, tmp_path, FERRY_DIRECT_STREAMS="1")
    proc = ferry.popen("cp", "-r", "--json", url(server, str(folder)), f"s3://{bucket}/run/")
    deadline = time.monotonic() + 60
    while not bucket_files(moto, bucket, "") and time.monotonic() < deadline:
        time.sleep(0.05)
    ferry.ok("queue", "pause", "1")
    proc.communicate(timeout=60)
    assert ferry.job(1)["state"] == "paused"
    first = bucket_files(moto, bucket, "run/run/")
    assert 1 <= len(first) < len(want), sorted(first)
    ferry.ok("queue", "resume", "1")
    res = ferry("queue", "run", "--json")
    assert res.returncode == 0, describe(res)
    assert bucket_files(moto, bucket, "run/run/") == want
    assert ferry.job(1)["state"] == "done"
    # Every file went up once: what was finished before the pause was not sent again.
    uploads = [line for line in log.read_text().splitlines() if " -T " in line]
    assert sorted(Path(line.split(" -T ")[1].strip("'")).name for line in uploads) == sorted(want)
    # ... nor even hashed again: the next run took the job's open rows, not a new walk.
    assert len((host_bin(server) / "sha256sum.log").read_text().splitlines()) == len(want)


def test_cancel_ends_every_planned_file_and_starts_no_more(
    host: Callable[..., SshServer], moto: S3Server, tmp_path: Path
) -> None:
    from ferry.core.outcomes import TaskState
    from ferry.transfers.store import Store

    server = host(delay=0.7)
    log = host_bin(server) / "curl.log"
    bucket = moto.new_bucket()
    remote = server.mkdir()
    folder = remote / "run"
    folder.mkdir()
    for i in range(6):
        (folder / f"f{i}.bin").write_bytes(os.urandom(4_000 + i))
    server.chown(folder)
    ferry = ferry_for(server, moto, tmp_path, FERRY_DIRECT_STREAMS="1")
    proc = ferry.popen("cp", "-r", "--json", url(server, str(folder)), f"s3://{bucket}/run/")
    deadline = time.monotonic() + 60
    while not bucket_files(moto, bucket, "") and time.monotonic() < deadline:
        time.sleep(0.05)
    ferry.ok("queue", "cancel", "1")
    proc.communicate(timeout=60)
    sent = [line for line in log.read_text().splitlines() if " -T " in line]
    time.sleep(1.5)  # a file started after the cancel would show in the log by now
    assert [line for line in log.read_text().splitlines() if " -T " in line] == sent
    assert 1 <= len(sent) < 6, sent
    store = Store(ferry.home / "data" / "queue.db")
    try:
        states = sorted(t.state for t in store.tasks(1, kinds=["file"]))
    finally:
        store.close()
    # Nothing silent: each of the six planned files ended, copied or cancelled.
    assert len(states) == 6 and set(states) <= {"done", "cancelled"}, states
    assert states.count(TaskState.DONE) == len(bucket_files(moto, bucket, "run/run/"))
    assert ferry.job(1)["state"] == "cancelled"


def test_a_file_over_the_single_put_limit_goes_up_in_parts_signed_one_by_one(
    host: Callable[..., SshServer], moto: S3Server, tmp_path: Path
) -> None:
    # The limit is lowered for the test (5 GiB in use): 12 MiB goes up as three 5 MiB parts.
    server = host()
    bucket = moto.new_bucket()
    remote = server.mkdir()
    folder = remote / "run"
    folder.mkdir()
    big, small = os.urandom(12 << 20), b"small\n"
    (folder / "big.bin").write_bytes(big)
    (folder / "small.txt").write_bytes(small)
    server.chown(folder)
    ferry = ferry_for(
        server, moto, tmp_path, FERRY_DIRECT_MULTIPART_OVER=str(6 << 20), FERRY_DIRECT_PART_SIZE=str(5 << 20)
    )
    with ProcessWatch("X-Amz-Signature") as ps:
        res = counting_ferry(ferry, "cp", "-r", "--json", url(server, str(folder)), f"s3://{bucket}/run/")
    assert res.returncode == 0, describe(res)
    assert byte_paths_used(res.stderr) == 0, res.stderr
    assert bucket_files(moto, bucket, "run/run/") == {"big.bin": big, "small.txt": small}
    files = {Path(k).name: v for k, v in file_events(res.stdout).items() if v.get("kind", "file") == "file"}
    assert files["big.bin"]["level"] == "checksum", files
    assert {"host-tool", "s3-multipart-etag"} <= set(files["big.bin"]["evidence"])
    assert "s3-etag-md5" in files["small.txt"]["evidence"]
    head = moto.client().head_object(Bucket=bucket, Key="run/run/big.bin")
    assert head["ETag"].strip('"').endswith("-3")
    assert head["Metadata"]["ferry-sha256"] == hashlib.sha256(big).hexdigest()
    assert ps.leaks == []
    assert moto.client().list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_a_download_never_writes_through_a_link_below_the_destination(
    host: Callable[..., SshServer], moto: S3Server, tmp_path: Path
) -> None:
    server = host()
    bucket = moto.new_bucket()
    client = moto.client()
    client.put_object(Bucket=bucket, Key="in/top.bin", Body=b"top")
    client.put_object(Bucket=bucket, Key="in/sub/x.bin", Body=b"must not leave the destination")
    remote = server.mkdir()
    outside = server.mkdir("outside-")
    (remote / "in").mkdir()
    (remote / "in" / "sub").symlink_to(outside)  # a link where the job needs a folder
    server.chown(remote)
    ferry = ferry_for(server, moto, tmp_path)
    res = counting_ferry(ferry, "cp", "-r", "--json", f"s3://{bucket}/in", url(server, f"{remote}/"))
    assert res.returncode == 1, describe(res)
    assert byte_paths_used(res.stderr) == 0, res.stderr  # the direct route, not the relay
    assert list(outside.iterdir()) == []  # nothing written through the link
    assert (remote / "in" / "top.bin").read_bytes() == b"top"
    files = {Path(k).name: v for k, v in file_events(res.stdout).items() if v.get("kind", "file") == "file"}
    assert files["top.bin"]["state"] == "done" and files["x.bin"]["state"] == "failed", files
    assert not [p for p in remote.rglob("*") if p.name.endswith(".ferry-part")]


def test_a_multipart_object_without_a_checksum_is_checked_part_by_part_on_the_host(
    host: Callable[..., SshServer], moto: S3Server, tmp_path: Path
) -> None:
    server = host()
    bucket = moto.new_bucket()
    client = moto.client()
    parts = [os.urandom(5 << 20), os.urandom(5 << 20), os.urandom(1 << 20)]
    upload = client.create_multipart_upload(Bucket=bucket, Key="in/big.bin")["UploadId"]
    done = [
        {
            "ETag": client.upload_part(Bucket=bucket, Key="in/big.bin", UploadId=upload, PartNumber=n, Body=p)["ETag"],
            "PartNumber": n,
        }
        for n, p in enumerate(parts, 1)
    ]
    client.complete_multipart_upload(Bucket=bucket, Key="in/big.bin", UploadId=upload, MultipartUpload={"Parts": done})
    head = client.head_object(Bucket=bucket, Key="in/big.bin", ChecksumMode="ENABLED")
    assert "ChecksumSHA256" not in head and "ferry-sha256" not in head.get("Metadata", {}), head
    remote = server.mkdir()
    ferry = ferry_for(server, moto, tmp_path)
    res = counting_ferry(ferry, "cp", "--json", f"s3://{bucket}/in/big.bin", url(server, f"{remote}/"))
    assert res.returncode == 0, describe(res)
    assert byte_paths_used(res.stderr) == 0, res.stderr
    assert (remote / "big.bin").read_bytes() == b"".join(parts)
    (event,) = [v for v in file_events(res.stdout).values() if v.get("kind", "file") == "file"]
    assert event["level"] == "checksum" and "s3-multipart-etag" in event["evidence"], event


def host_and_bucket_in_conflict(
    host: Callable[..., SshServer], moto: S3Server
) -> tuple[SshServer, Path, str, Path]:
    """A host folder ``run`` with ``same.txt`` and ``changed.txt``, and a bucket already holding
    ``run/same.txt`` (the same bytes) and ``run/changed.txt`` (other bytes): (server, the host's
    curl log, bucket, folder)."""
    server = host()
    bucket = moto.new_bucket()
    client = moto.client()
    folder = server.mkdir() / "run"
    folder.mkdir()
    (folder / "same.txt").write_bytes(b"same\n")
    (folder / "changed.txt").write_bytes(b"new\n")
    server.chown(folder)
    client.put_object(Bucket=bucket, Key="run/same.txt", Body=b"same\n")
    client.put_object(Bucket=bucket, Key="run/changed.txt", Body=b"old\n")
    return server, host_bin(server) / "curl.log", bucket, folder


def test_objects_already_in_the_bucket_follow_the_conflict_policy_without_being_sent(
    host: Callable[..., SshServer], moto: S3Server, tmp_path: Path
) -> None:
    server, log, bucket, folder = host_and_bucket_in_conflict(host, moto)
    ferry = ferry_for(server, moto, tmp_path)
    res = ferry("cp", "-r", "--json", "--on-conflict", "skip", url(server, str(folder)), f"s3://{bucket}/")
    assert res.returncode == 0, describe(res)
    files = {Path(k).name: v for k, v in file_events(res.stdout).items() if v.get("kind", "file") == "file"}
    assert files["same.txt"]["state"] == "done" and files["same.txt"]["level"] == "checksum", files
    assert files["changed.txt"]["state"] == "skipped", files
    assert bucket_files(moto, bucket, "run/") == {"same.txt": b"same\n", "changed.txt": b"old\n"}
    assert [line for line in log.read_text().splitlines() if " -T " in line] == []  # nothing sent
    res = ferry("cp", "-r", "--json", "--on-conflict", "overwrite", url(server, str(folder)), f"s3://{bucket}/")
    assert res.returncode == 0, describe(res)
    assert bucket_files(moto, bucket, "run/") == {"same.txt": b"same\n", "changed.txt": b"new\n"}
    assert len([line for line in log.read_text().splitlines() if " -T " in line]) == 1  # only the changed file


def test_ferry_cp_from_a_host_without_curl_relays_and_says_why(
    host: Callable[..., SshServer], moto: S3Server, tmp_path: Path
) -> None:
    server = host(curl=False)
    bucket = moto.new_bucket()
    remote = server.mkdir()
    want = seed_remote(remote / "run", server)
    ferry = ferry_for(server, moto, tmp_path)
    res = ferry("cp", "-r", "--json", url(server, f"{remote}/run"), f"s3://{bucket}/run/")
    assert res.returncode == 0, describe(res)
    assert bucket_files(moto, bucket, "run/run/") == want
    result = result_event(res.stdout)
    assert result["route"] == "relay" and result["route_reason"] == "the host 127.0.0.1 has no curl", result
    # Asked for direct, the same host is refused before anything is queued, with the same sentence.
    res = ferry("cp", "-r", "--route", "direct", url(server, f"{remote}/run"), f"s3://{bucket}/again/")
    assert res.returncode == 2 and "the host 127.0.0.1 has no curl" in res.stderr, describe(res)
    assert bucket_files(moto, bucket, "again/") == {}


def test_ferry_mv_from_a_host_to_s3_relays_so_each_source_goes_only_after_ferrys_check(
    host: Callable[..., SshServer], moto: S3Server, tmp_path: Path
) -> None:
    """A move deletes a source only after Ferry's own checksum check of the bytes it read, which
    the host's curl never gives Ferry: under --route auto it relays (and works, as it did before
    routes existed), and --route direct is refused before anything changes."""
    server = host()
    bucket = moto.new_bucket()
    remote = server.mkdir()
    want = seed_remote(remote / "run", server)
    ferry = ferry_for(server, moto, tmp_path)
    res = ferry("mv", "-r", "--json", url(server, f"{remote}/run"), f"s3://{bucket}/run/")
    assert res.returncode == 0, describe(res)
    assert result_event(res.stdout)["route"] == "relay"
    assert bucket_files(moto, bucket, "run/run/") == want
    assert not (remote / "run").exists()  # the sources went, each after its copy verified
    again = seed_remote(remote / "more", server)
    res = ferry("mv", "-r", "--route", "direct", url(server, f"{remote}/more"), f"s3://{bucket}/more/")
    assert res.returncode == 2, describe(res)
    assert bucket_files(moto, bucket, "more/") == {} and (remote / "more").exists() and again


def test_a_direct_multipart_upload_killed_mid_file_keeps_its_parts_on_the_next_run(
    host: Callable[..., SshServer], moto: S3Server, tmp_path: Path
) -> None:
    """``kill -9`` of the runner while the host sends a big file in parts, then ``ferry queue
    run``: the parts the store already holds (checked against the host's MD5 of each) are kept,
    only the rest are sent, and the object is verified as a whole."""
    server = host(delay=0.4)  # each curl waits: the parts go up one by one, slowly enough to kill
    log = host_bin(server) / "curl.log"
    bucket = moto.new_bucket()
    client = moto.client()
    remote = server.mkdir()
    folder = remote / "run"
    folder.mkdir()
    big = os.urandom(26 << 20)  # six parts of 5 MiB (the last 1 MiB)
    (folder / "big.bin").write_bytes(big)
    server.chown(folder)
    ferry = ferry_for(
        server, moto, tmp_path, FERRY_DIRECT_MULTIPART_OVER=str(6 << 20), FERRY_DIRECT_PART_SIZE=str(5 << 20)
    )
    ferry.ok("queue", "add", "-r", "--route", "direct", url(server, str(folder)), f"s3://{bucket}/run/")
    proc = ferry.popen("queue", "run")

    def held() -> dict[int, str]:
        uploads = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
        if not uploads:
            return {}
        (up,) = uploads
        parts = client.list_parts(Bucket=bucket, Key=up["Key"], UploadId=up["UploadId"]).get("Parts", [])
        return {p["PartNumber"]: p["ETag"] for p in parts}

    deadline = time.monotonic() + 90
    while len(held()) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert len(held()) >= 2, "the host never sent two parts"
    stop(proc, signal.SIGKILL)
    # What the dead run's session was doing on the host (a part on its way, a curl just starting,
    # which outlives its session) ends one way or the other before the parts are counted.
    assert server.process is not None
    sshd_pid = server.process.pid

    def busy() -> bool:
        out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        return bool(_descendants(sshd_pid)) or any(
            str(host_bin(server)) in line or ("curl --fail" in line and " -T - " in line) for line in out.splitlines()
        )

    deadline = time.monotonic() + 60
    while busy() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not busy(), "the killed run's commands never ended on the host"
    kept = held()
    assert 2 <= len(kept) < 6, kept
    sent_before = len([line for line in log.read_text().splitlines() if " -T - " in line])
    res = ferry("queue", "run", "--json")
    assert res.returncode == 0, describe(res)
    assert bucket_files(moto, bucket, "run/run/") == {"big.bin": big}
    sent_after = len([line for line in log.read_text().splitlines() if " -T - " in line]) - sent_before
    (event,) = [v for v in file_events(res.stdout).values() if v.get("kind", "file") == "file"]
    assert event["state"] == "done" and event["level"] == "checksum", event
    assert "s3-multipart-etag" in event["evidence"], event
    # Every part the store held when the runner died was kept (one more may have landed after
    # that look: a part whose body was sent is stored by moto even when its curl was cut off).
    reused = re.search(r"; (\d+) kept from an earlier run", event["verified"])
    assert reused is not None, event
    assert len(kept) <= int(reused[1]) <= len(kept) + 1, (reused[1], kept)
    assert sent_after == 6 - int(reused[1]), (sent_after, reused[1])  # only the parts the store did not hold
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_ask_on_the_direct_route_fails_a_differing_file_as_a_conflict_said_once_and_sends_nothing(
    host: Callable[..., SshServer], moto: S3Server, tmp_path: Path
) -> None:
    """``--on-conflict ask`` (the default) where the host runs the copy: no one can be asked, so a
    file that differs from the one already there fails by the typed kind ``conflict`` (as on the
    relay with no one to ask), stays as it was, and the summary says it in one line; the same file
    already there is done; ``queue retry --on-conflict overwrite`` then sends it."""
    server, log, bucket, folder = host_and_bucket_in_conflict(host, moto)
    ferry = ferry_for(server, moto, tmp_path)
    res = ferry("cp", "-r", "--json", "--route", "direct", url(server, str(folder)), f"s3://{bucket}/")
    assert res.returncode == 1, describe(res)
    assert result_event(res.stdout)["route"].startswith("direct"), res.stdout
    files = {Path(k).name: v for k, v in file_events(res.stdout).items() if v.get("kind", "file") == "file"}
    assert files["same.txt"]["state"] == "done" and files["same.txt"]["level"] == "checksum", files
    assert files["changed.txt"]["state"] == "failed" and files["changed.txt"]["error_kind"] == "conflict", files
    assert bucket_files(moto, bucket, "run/") == {"same.txt": b"same\n", "changed.txt": b"old\n"}
    assert [line for line in log.read_text().splitlines() if " -T " in line] == []  # nothing sent
    # Without --json: one line for the conflicts, and how to decide.
    res = ferry("cp", "-r", "--route", "direct", url(server, str(folder)), f"s3://{bucket}/")
    assert res.returncode == 1, describe(res)
    out = res.stdout + res.stderr
    assert "1 file(s) differ from what is already at the destination; choose with --on-conflict" in out, out
    assert "failed: changed.txt" not in out, out  # not listed file by file
    ferry.ok("queue", "retry", "2", "--on-conflict", "overwrite")
    ferry("queue", "run")  # exit 1: job 1 (the --json run) is still failed
    assert ferry.job(2)["state"] == "done"
    assert bucket_files(moto, bucket, "run/") == {"same.txt": b"same\n", "changed.txt": b"new\n"}
    # The other way: a file on the host that differs from the object stays, failed as a conflict.
    dest = server.mkdir()
    (dest / "run").mkdir()
    (dest / "run" / "changed.txt").write_bytes(b"local\n")
    server.chown(dest)
    res = ferry("cp", "-r", "--json", "--route", "direct", f"s3://{bucket}/run", url(server, f"{dest}/"))
    assert res.returncode == 1, describe(res)
    files = {Path(k).name: v for k, v in file_events(res.stdout).items() if v.get("kind", "file") == "file"}
    assert files["changed.txt"]["error_kind"] == "conflict" and files["same.txt"]["state"] == "done", files
    assert (dest / "run" / "changed.txt").read_bytes() == b"local\n"


def test_keys_limited_to_a_prefix_go_direct_under_it_and_are_refused_in_one_line_outside(
    host: Callable[..., SshServer], tmp_path: Path
) -> None:
    """Keys limited to ``home/alice/``: a gate in front of ``rclone serve s3`` (which checks every
    signature, pre-signed ones too) refuses, as AWS does under such a grant, a HEAD on the bucket
    (s3:ListBucket's s3:prefix condition unmet) and a listing outside the prefix. moto with IAM
    enforced cannot stand in: it answers every pre-signed request with HTTP 500."""
    try:
        store = shared_server("rclone")
    except RuntimeError as exc:
        pytest.skip(f"rclone S3 server unavailable: {exc}")
    bucket, prefix = store.new_bucket(), "home/alice/"
    gate = PrefixGate(store.port, bucket, prefix)
    try:
        server = host()
        remote = server.mkdir()
        want = seed_remote(remote / "run", server)
        ferry = ferry_for(server, store, tmp_path, **store.env(gate.endpoint))
        res = counting_ferry(
            ferry, "cp", "-r", "--json", "--route", "direct", url(server, f"{remote}/run"), f"s3://{bucket}/{prefix}"
        )
        assert res.returncode == 0, describe(res)
        assert byte_paths_used(res.stderr) == 0, res.stderr
        assert result_event(res.stdout)["route"].startswith("direct"), res.stdout
        assert bucket_files(store, bucket, f"{prefix}run/") == want
        # Nothing asked outside the grant but the host's one probe of the bucket, which was refused.
        assert [(r.method, r.key) for r in gate.outside()] == [("HEAD", "")], gate.outside()
        # Outside the prefix Ferry's own check refuses the job in one line before anything is queued.
        res = ferry("cp", "-r", "--route", "direct", url(server, f"{remote}/run"), f"s3://{bucket}/home/bob/")
        assert res.returncode == 2, describe(res)
        assert res.stderr.strip().splitlines() == [
            f"ferry: Cannot write to s3://{bucket}/home/bob/: permission denied by S3 while checking "
            f"s3://{bucket}/home/bob/"
        ], describe(res)
        assert bucket_files(store, bucket, "home/bob/", markers=True) == {}
    finally:
        gate.close()
