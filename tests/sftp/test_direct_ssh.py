"""Site to site (issue 22): one SSH host copies straight to another (``backends/sftp/direct_ssh.py``).

Two OpenSSH sshd servers on loopback are hosts A and B (the same login account, each with its own
``authorized_keys``). Host A's own ``ssh`` reads an ssh config we give it through sshd's
``SetEnv FERRY_SSH_CONFIG``: with a key of its own authorized on B (trust), or without one. Ferry
runs in a child process whose SFTP readers and writers count their use, so a test can say no byte
passed through Ferry.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ferry.backends.sftp.direct_ssh import forget_pair_probes
from helpers import Ferry, describe, file_events, result_event
from sftp.tcp_proxy import TcpProxy
from sftp.test_cli_sftp import url, user_home
from sftp.test_direct_s3 import byte_paths_used, counting_ferry, seed_remote
from sshd import SshServer


@pytest.fixture(autouse=True)
def _fresh_probes() -> Iterator[None]:
    forget_pair_probes()
    yield
    forget_pair_probes()


@pytest.fixture
def pair(sshd_factory: Callable[..., SshServer]) -> Iterator[Callable[..., tuple[SshServer, SshServer]]]:
    """``pair(trust=True)``: hosts A and B; with ``trust``, A's ssh has a key of its own for B."""
    made: list[Path] = []

    def start(*, trust: bool, b_path: Path | None = None, a_ssh_delay: float = 0.0) -> tuple[SshServer, SshServer]:
        b = sshd_factory(extra_config=[f"SetEnv PATH={b_path}"] if b_path else [])
        folder = Path(tempfile.mkdtemp(prefix="ferry-hosta-", dir="/tmp"))
        made.append(folder)
        folder.chmod(0o755)
        key = folder / "id_ed25519"
        if trust:
            shutil.copy(b.client_key, key)  # b's client key is authorized on b
        config = folder / "config"
        config.write_text(
            "Host *\n"
            f"  IdentityFile {key}\n"
            "  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {b.known_hosts}\n"
            "  GlobalKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking yes\n"
        )
        b.chown(folder)
        if trust:
            key.chmod(0o600)
        config.chmod(0o600)
        env = f"SetEnv FERRY_SSH_CONFIG={config}"
        if a_ssh_delay:  # A's PATH: the few tools the route uses, and an ssh that waits first
            bin_a = folder / "bin"
            bin_a.mkdir(mode=0o755)
            for tool in ("sh", "cat", "rm", "wc", "sha256sum", "env", "sleep", "mkdir", "mv"):
                found = shutil.which(tool)
                assert found, tool
                (bin_a / tool).symlink_to(found)
            (bin_a / "ssh").write_text(f'#!/bin/sh\nsleep {a_ssh_delay}\nexec {shutil.which("ssh")} "$@"\n')
            (bin_a / "ssh").chmod(0o755)
            env += f" PATH={bin_a}"
        a = sshd_factory(extra_config=[env])
        return a, b

    yield start
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


def ferry_for(a: SshServer, b: SshServer, tmp_path: Path) -> Ferry:
    """``ferry`` with a home whose key logs in to both hosts and whose known_hosts knows both."""
    home = user_home(a, tmp_path)
    with (home / ".ssh" / "known_hosts").open("a") as f:
        f.write(b.known_hosts.read_text())
    b.authorize(a.client_key.with_suffix(".pub").read_text())
    return Ferry(home=tmp_path, cwd=tmp_path, extra_env={"HOME": str(home), "SSH_AUTH_SOCK": ""})


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_cp_r_host_to_host_goes_direct_verified_without_bytes_through_ferry(
    pair: Callable[..., tuple[SshServer, SshServer]], tmp_path: Path
) -> None:
    a, b = pair(trust=True)
    src, dst = a.mkdir(), b.mkdir()
    want = seed_remote(src / "run42", a)
    ferry = ferry_for(a, b, tmp_path)
    res = counting_ferry(ferry, "cp", "-r", "--json", url(a, f"{src}/run42"), url(b, f"{dst}/"))
    assert res.returncode == 0, describe(res)
    assert byte_paths_used(res.stderr) == 0, res.stderr
    assert tree(dst / "run42") == want
    assert not [p for p in dst.rglob("*") if ".ferry" in p.name or "direct" in p.name]  # no partial left
    result = result_event(res.stdout)
    assert result["route"] == "direct", result
    files = {k: v for k, v in file_events(res.stdout).items() if v.get("kind", "file") == "file"}
    assert len(files) == len(want), files
    assert {e["level"] for e in files.values()} == {"checksum"}, files
    for path, e in files.items():
        assert e["evidence"] == ["host-tool"], e
        assert (e["hash_algo"], e["hash"]) == ("sha256", hashlib.sha256(want[path[len("run42/") :]]).hexdigest()), e


def test_without_trust_relays_and_says_why_and_direct_is_refused(
    pair: Callable[..., tuple[SshServer, SshServer]], tmp_path: Path
) -> None:
    a, b = pair(trust=False)
    src, dst = a.mkdir(), b.mkdir()
    want = seed_remote(src / "run", a)
    ferry = ferry_for(a, b, tmp_path)
    res = ferry("cp", "-r", "--json", url(a, f"{src}/run"), url(b, f"{dst}/"))
    assert res.returncode == 0, describe(res)
    assert tree(dst / "run") == want
    result = result_event(res.stdout)
    sentence = "the host 127.0.0.1 cannot log in to 127.0.0.1 by itself"
    assert result["route"] == "relay" and sentence in result["route_reason"], result
    res = ferry("cp", "-r", "--route", "direct", url(a, f"{src}/run"), url(b, f"{dst}/again/"))
    assert res.returncode == 2 and sentence in res.stderr, describe(res)
    assert not (dst / "again").exists()


def test_conflict_policy_skip_keeps_the_file_on_b(
    pair: Callable[..., tuple[SshServer, SshServer]], tmp_path: Path
) -> None:
    a, b = pair(trust=True)
    src, dst = a.mkdir(), b.mkdir()
    (src / "run").mkdir()
    (src / "run" / "same.txt").write_bytes(b"same\n")
    (src / "run" / "changed.txt").write_bytes(b"new\n")
    (src / "run" / "fresh.txt").write_bytes(os.urandom(1000))
    a.chown(src)
    (dst / "run").mkdir()
    (dst / "run" / "same.txt").write_bytes(b"same\n")
    (dst / "run" / "changed.txt").write_bytes(b"old, kept\n")
    b.chown(dst)
    ferry = ferry_for(a, b, tmp_path)
    res = counting_ferry(ferry, "cp", "-r", "--json", "--on-conflict", "skip", url(a, f"{src}/run"), url(b, f"{dst}/"))
    assert res.returncode == 0, describe(res)
    assert byte_paths_used(res.stderr) == 0, res.stderr
    assert (dst / "run" / "changed.txt").read_bytes() == b"old, kept\n"
    assert (dst / "run" / "fresh.txt").read_bytes() == (src / "run" / "fresh.txt").read_bytes()
    events = file_events(res.stdout)
    states = {Path(k).name: v["state"] for k, v in events.items() if v.get("kind", "file") == "file"}
    assert states == {"same.txt": "done", "changed.txt": "skipped", "fresh.txt": "done"}, events


def test_mv_between_hosts_relays_under_auto(pair: Callable[..., tuple[SshServer, SshServer]], tmp_path: Path) -> None:
    """A move deletes each source only after Ferry's own checksum check of the bytes it read,
    which the host-to-host route never gives: under --route auto it relays (as before the route
    existed) and removes the source; --route direct is refused before anything changes."""
    a, b = pair(trust=True)
    src, dst = a.mkdir(), b.mkdir()
    want = seed_remote(src / "run", a)
    ferry = ferry_for(a, b, tmp_path)
    res = ferry("mv", "-r", "--json", url(a, f"{src}/run"), url(b, f"{dst}/"))
    assert res.returncode == 0, describe(res)
    assert result_event(res.stdout)["route"] == "relay"
    assert tree(dst / "run") == want
    assert not (src / "run").exists()
    more = seed_remote(src / "more", a)
    res = ferry("mv", "-r", "--route", "direct", url(a, f"{src}/more"), url(b, f"{dst}/"))
    assert res.returncode == 2, describe(res)
    assert tree(src / "more") == more and not (dst / "more").exists()


def test_without_sha256sum_on_b_the_check_is_size_only_and_says_so(
    pair: Callable[..., tuple[SshServer, SshServer]], tmp_path: Path
) -> None:
    folder = Path(tempfile.mkdtemp(prefix="ferry-hostbin-", dir="/tmp"))
    try:
        folder.chmod(0o755)
        for tool in ("sh", "cat", "rm", "wc", "mv", "mkdir", "env"):  # no sha256sum
            found = shutil.which(tool)
            assert found, tool
            (folder / tool).symlink_to(found)
        a, b = pair(trust=True, b_path=folder)
        src, dst = a.mkdir(), b.mkdir()
        want = seed_remote(src / "run", a)
        ferry = ferry_for(a, b, tmp_path)
        res = counting_ferry(ferry, "cp", "-r", "--json", url(a, f"{src}/run"), url(b, f"{dst}/"))
        assert res.returncode == 0, describe(res)
        assert byte_paths_used(res.stderr) == 0, res.stderr
        assert tree(dst / "run") == want
        files = {k: v for k, v in file_events(res.stdout).items() if v.get("kind", "file") == "file"}
        assert len(files) == len(want), files
        assert {e["level"] for e in files.values()} == {"size"}, files
        assert {e["verified"] for e in files.values()} == {"size only: 127.0.0.1 has no sha256sum"}, files
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_link_below_the_destination_on_b_is_never_followed(
    pair: Callable[..., tuple[SshServer, SshServer]], tmp_path: Path
) -> None:
    a, b = pair(trust=True)
    src, dst, outside = a.mkdir(), b.mkdir(), b.mkdir("outside-")
    seed_remote(src / "run", a)
    (dst / "run").mkdir()
    (dst / "run" / "sub").symlink_to(outside)  # a link where a folder goes
    (dst / "run" / "a.txt").symlink_to(outside / "target.txt")  # a link where a file goes
    b.chown(dst)
    ferry = ferry_for(a, b, tmp_path)
    res = counting_ferry(ferry, "cp", "-r", "--json", url(a, f"{src}/run"), url(b, f"{dst}/"))
    assert byte_paths_used(res.stderr) == 0, res.stderr
    assert list(outside.iterdir()) == [], describe(res)  # nothing written through either link
    assert (dst / "run" / "sub").is_symlink() and (dst / "run" / "a.txt").is_symlink()  # both kept
    assert res.returncode == 1, describe(res)  # the files below the link failed, each counted
    states = {
        k: (v["state"], v["error_kind"]) for k, v in file_events(res.stdout).items() if v.get("kind", "file") == "file"
    }
    assert states == {
        "run/a.txt": ("failed", "conflict"),  # ask (the default), and no one to ask: as on the relay
        "run/empty": ("done", None),
        "run/sub/b.bin": ("failed", "link-in-the-way"),
        "run/sub/deeper/c.dat": ("failed", "link-in-the-way"),
    }, res.stdout


def test_within_one_account_there_is_no_pair_to_probe(
    pair: Callable[..., tuple[SshServer, SshServer]], tmp_path: Path
) -> None:
    """One account on one host is not a host pair: Ferry copies as before, no probe, no reason."""
    a, b = pair(trust=True)
    src, dst = a.mkdir(), a.mkdir()
    want = seed_remote(src / "run", a)
    ferry = ferry_for(a, b, tmp_path)
    res = ferry("cp", "-r", "--json", url(a, f"{src}/run"), url(a, f"{dst}/"))
    assert res.returncode == 0, describe(res)
    assert tree(dst / "run") == want
    result = result_event(res.stdout)
    assert result["route"] == "relay" and not result.get("route_reason"), result


def test_a_dropped_session_to_a_fails_only_the_files_in_flight(
    pair: Callable[..., tuple[SshServer, SshServer]], tmp_path: Path
) -> None:
    a, b = pair(trust=True, a_ssh_delay=1.0)
    src, dst = a.mkdir(), b.mkdir()
    folder = src / "run"
    folder.mkdir()
    want = {f"f{i}.bin": os.urandom(10_000 + i) for i in range(8)}
    for name, data in want.items():
        (folder / name).write_bytes(data)
    a.chown(folder)
    proxy = TcpProxy((a.host, a.port))
    try:
        ferry = ferry_for(a, b, tmp_path)
        home = tmp_path / "home"
        known = a.known_hosts.read_text().replace(f"]:{a.port} ", f"]:{proxy.port} ")
        with (home / ".ssh" / "known_hosts").open("a") as f:
            f.write(known)
        ferry.extra_env["FERRY_DIRECT_STREAMS"] = "2"
        proc = ferry.popen("cp", "-r", "--json", f"sftp://{a.user}@{a.host}:{proxy.port}{folder}", url(b, f"{dst}/"))
        deadline = time.monotonic() + 60
        while len(list((dst / "run").glob("f*.bin"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        proxy.cut()  # the session to host A drops while files are in flight
        out, err = proc.communicate(timeout=120)
    finally:
        proxy.close()
    assert proc.returncode == 1, err
    assert result_event(out)["route"] == "direct", out
    files = {Path(k).name: v for k, v in file_events(out).items() if v.get("kind", "file") == "file"}
    failed = [n for n, e in files.items() if e["state"] == "failed"]
    assert 1 <= len(failed) <= 2, files  # the files in flight, and only those
    assert all(e["state"] == "done" and e["level"] == "checksum" for n, e in files.items() if n not in failed)
    assert len(files) == len(want)
    job = ferry.jobs()[-1]["id"]
    ferry.ok("queue", "retry", str(job))
    ferry.ok("queue", "run")
    assert tree(dst / "run") == want
    # A's copy of a file in flight may outlive the dropped session and leave its partial file on
    # B; the retry writes the same partial name afresh and renames it into place.
    assert sorted(p.name for p in (dst / "run").iterdir()) == sorted(want)


def test_cancel_ends_every_planned_file_and_starts_no_more(
    pair: Callable[..., tuple[SshServer, SshServer]], tmp_path: Path
) -> None:
    from ferry.core.outcomes import TaskState
    from ferry.transfers.store import Store

    a, b = pair(trust=True, a_ssh_delay=0.7)
    src, dst = a.mkdir(), b.mkdir()
    folder = src / "run"
    folder.mkdir()
    for i in range(6):
        (folder / f"f{i}.bin").write_bytes(os.urandom(4_000 + i))
    a.chown(folder)
    ferry = ferry_for(a, b, tmp_path)
    ferry.extra_env["FERRY_DIRECT_STREAMS"] = "1"
    proc = ferry.popen("cp", "-r", "--json", url(a, str(folder)), url(b, f"{dst}/"))
    deadline = time.monotonic() + 60
    while not list(dst.rglob("f*.bin")) and time.monotonic() < deadline:
        time.sleep(0.05)
    ferry.ok("queue", "cancel", "1")
    out, _err = proc.communicate(timeout=60)
    assert result_event(out)["route"] == "direct", out
    landed = sorted(p.name for p in dst.rglob("*"))
    time.sleep(1.5)  # a file started after the cancel would have landed by now
    assert sorted(p.name for p in dst.rglob("*")) == landed
    copied = [n for n in landed if n.startswith("f")]
    assert 1 <= len(copied) < 6, landed
    store = Store(ferry.home / "data" / "queue.db")
    try:
        states = sorted(t.state for t in store.tasks(1, kinds=["file"]))
    finally:
        store.close()
    # Nothing silent: each of the six planned files ended, copied or cancelled.
    assert len(states) == 6 and set(states) <= {"done", "cancelled"}, states
    assert states.count(TaskState.DONE) == len(copied)
    assert ferry.job(1)["state"] == "cancelled"
