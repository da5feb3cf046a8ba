"""What real networks and real servers do to a transfer: MaxSessions smaller than Ferry's
parallelism, jump hosts (ProxyJump chains), and a connection cut in the middle of a big file."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from helpers import Ferry, describe, file_digests, file_events, partials, result_event, sha256_file, write_random
from sftp.tcp_proxy import TcpProxy
from sshd import SshServer


def alias_block(server: SshServer, alias: str, *, port: int | None = None, extra: str = "") -> str:
    return (
        f"Host {alias}\n  HostName {server.host}\n  Port {port or server.port}\n  User {server.user}\n"
        f"  IdentityFile {server.client_key}\n  IdentitiesOnly yes\n{extra}"
    )


def known_line(server: SshServer, port: int | None = None) -> str:
    """The server's host keys under ``[127.0.0.1]:port`` (the proxy's port when going through it)."""
    text = server.known_hosts.read_text()
    return text.replace(f"]:{server.port} ", f"]:{port or server.port} ")


def ferry_with(tmp_path: Path, config: str, known: str) -> Ferry:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "config").write_text(config)
    (home / ".ssh" / "known_hosts").write_text(known)
    return Ferry(home=tmp_path, cwd=tmp_path, extra_env={"HOME": str(home), "SSH_AUTH_SOCK": ""})


def small_tree(root: Path, count: int) -> dict[str, str]:
    for i in range(count):
        sub = root / f"d{i % 4}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{i:03d}").write_bytes(os.urandom(1000 + i))
    return file_digests(root)


def test_max_sessions_smaller_than_parallelism_adapts(sshd_factory: Callable[..., SshServer], tmp_path: Path) -> None:
    server = sshd_factory(max_sessions=2)
    ferry = ferry_with(tmp_path, alias_block(server, "tight"), known_line(server))
    src = tmp_path / "many"
    want = small_tree(src, 40)
    remote = server.mkdir()
    res = ferry.ok("cp", "-r", "--json", "--parallel", "8", src, f"tight:{remote}/")
    assert result_event(res.stdout)["state"] == "done", describe(res)
    files = [e for e in file_events(res.stdout).values() if e.get("kind", "file") == "file"]
    assert len(files) == 40 and all(e["state"] == "done" for e in files)
    assert file_digests(remote / "many") == want
    back = tmp_path / "back"
    ferry.ok("cp", "-r", "--parallel", "8", f"tight:{remote}/many", back)
    assert file_digests(back) == want
    # One login for all of it: the server saw exactly two connections (one per command).
    assert server.log_text().count("Accepted publickey") == 2


def test_proxyjump_chain_through_a_jump_host(sshd_factory: Callable[..., SshServer], tmp_path: Path) -> None:
    jump, target = sshd_factory(), sshd_factory()
    config = (
        alias_block(jump, "bastion")
        + alias_block(target, "inner", extra="  ProxyJump bastion,bastion\n")
        + alias_block(target, "direct", extra="  ProxyJump none\n")
    )
    ferry = ferry_with(tmp_path, config, known_line(jump) + known_line(target))
    (tmp_path / "f.txt").write_bytes(b"through the bastion\n")
    remote = target.mkdir()
    ferry.ok("cp", tmp_path / "f.txt", f"inner:{remote}/")
    assert (remote / "f.txt").read_bytes() == b"through the bastion\n"
    # Two hops through the bastion (the chain), then the inner host once.
    assert jump.log_text().count("Accepted publickey") == 2
    assert target.log_text().count("Accepted publickey") == 1
    listing = json.loads(ferry.ok("ls", "--json", f"direct:{remote}").stdout)
    assert [e["name"] for e in listing] == ["f.txt"]
    assert jump.log_text().count("Accepted publickey") == 2  # ProxyJump none: straight there


def test_unreachable_jump_host_is_a_clear_error(sshd_factory: Callable[..., SshServer], tmp_path: Path) -> None:
    target = sshd_factory()
    config = alias_block(target, "inner", extra="  ProxyJump nobody@127.0.0.1:1\n")
    ferry = ferry_with(tmp_path, config, known_line(target))
    res = ferry("ls", "inner:/")
    assert res.returncode != 0
    assert "Cannot connect to 127.0.0.1:1" in res.stderr, res.stderr


def _cut_once_after(proxy: TcpProxy, threshold: int, upstream: bool) -> None:
    state = {"done": False}

    def watch(p: TcpProxy) -> None:
        moved = p.upstream_bytes if upstream else p.downstream_bytes
        if not state["done"] and moved > threshold:
            state["done"] = True
            p.cut()

    proxy.on_bytes = watch


def test_connection_cut_mid_upload_reconnects_and_resumes(sshd: SshServer, tmp_path: Path) -> None:
    proxy = TcpProxy((sshd.host, sshd.port))
    try:
        ferry = ferry_with(tmp_path, alias_block(sshd, "flaky", port=proxy.port), known_line(sshd, proxy.port))
        big = tmp_path / "big.bin"
        digest = write_random(big, 48 << 20)
        remote = sshd.mkdir()
        _cut_once_after(proxy, 20 << 20, upstream=True)
        res = ferry("cp", "--json", "--bwlimit", "24M", big, f"flaky:{remote}/", timeout=180)
        assert res.returncode == 0, describe(res)
        assert proxy.connections >= 2  # it really reconnected
        assert sha256_file(remote / "big.bin") == digest
        assert not partials(remote)
        event = file_events(res.stdout)["big.bin"]
        assert event["state"] == "done" and "sha256 match" in event["verified"], event
        assert "resumed after" in event["verified"] and "prefix was checked" in event["verified"], event
        # Resumed, not restarted: well under two whole copies crossed the wire.
        assert proxy.upstream_bytes < (48 << 20) * 1.6
    finally:
        proxy.close()


def test_connection_cut_mid_download_reconnects_and_resumes(sshd: SshServer, tmp_path: Path) -> None:
    proxy = TcpProxy((sshd.host, sshd.port))
    try:
        ferry = ferry_with(tmp_path, alias_block(sshd, "flaky", port=proxy.port), known_line(sshd, proxy.port))
        remote = sshd.mkdir()
        digest = write_random(remote / "big.bin", 48 << 20)
        sshd.chown(remote)
        dest = tmp_path / "dest"
        dest.mkdir()
        _cut_once_after(proxy, 20 << 20, upstream=False)
        res = ferry("cp", "--json", "--bwlimit", "24M", f"flaky:{remote}/big.bin", dest, timeout=180)
        assert res.returncode == 0, describe(res)
        assert proxy.connections >= 2
        assert sha256_file(dest / "big.bin") == digest
        assert not partials(dest)
        assert "sha256 match" in file_events(res.stdout)["big.bin"]["verified"]
    finally:
        proxy.close()


def test_sftp_only_account_is_verified_by_size_and_says_so(
    sshd_factory: Callable[..., SshServer], tmp_path: Path
) -> None:
    """``ForceCommand internal-sftp``: no shell, so no remote checksums; small files are still
    read back over SFTP and hashed here (as the documentation says); bigger ones are checked by
    size and the record says so."""
    server = sshd_factory(extra_config=["ForceCommand internal-sftp"])
    ferry = ferry_with(tmp_path, alias_block(server, "jail"), known_line(server))
    src = tmp_path / "few"
    want = small_tree(src, 5)
    (src / "big.bin").write_bytes(os.urandom(200_000))
    want = file_digests(src)
    remote = server.mkdir()
    res = ferry.ok("cp", "-r", "--json", src, f"jail:{remote}/")
    events = file_events(res.stdout)
    big = events.pop("few/big.bin")
    assert big["state"] == "done" and big["level"] == "size" and not big["evidence"], big
    assert big["verified"].startswith("size only (the server has no sha256sum"), big
    files = [e for e in events.values() if e.get("kind", "file") == "file"]
    assert files and all(e["state"] == "done" and e["level"] == "checksum" for e in files), files
    assert all(e["evidence"] == ["read-back"] for e in files), files
    assert file_digests(remote / "few") == want
    res = ferry("hash", f"jail:{remote}/few/d0/f000")
    assert res.returncode != 0 and "cannot compute sha256" in res.stderr, describe(res)
