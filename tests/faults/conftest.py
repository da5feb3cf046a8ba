"""Fixtures for the fault suite: real servers on loopback (OpenSSH sshd, moto's S3) behind a
:class:`~faults.proxy.FaultProxy` the test controls, and ``ferry`` pointed at the proxy."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from faults.proxy import FaultProxy
from helpers import Ferry
from s3.servers import S3Server, shared_server
from sshd import SshServer, require_sshd


@pytest.fixture(scope="session")
def sshd() -> Iterator[SshServer]:
    require_sshd()
    with SshServer() as server:
        yield server


@dataclass
class SftpSite:
    """``flaky:PATH`` reaches ``server`` through ``proxy`` (an ssh_config alias), for ``ferry``."""

    server: SshServer
    proxy: FaultProxy
    ferry: Ferry
    remote: Path  # a fresh folder on the server, the login user's

    def url(self, rel: str = "") -> str:
        return f"flaky:{self.remote}/{rel}"


@pytest.fixture
def sftp_site(sshd: SshServer, tmp_path: Path) -> Iterator[SftpSite]:
    proxy = FaultProxy((sshd.host, sshd.port))
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "config").write_text(
        f"Host flaky\n  HostName {sshd.host}\n  Port {proxy.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.client_key}\n  IdentitiesOnly yes\n"
    )
    known = sshd.known_hosts.read_text().replace(f"]:{sshd.port} ", f"]:{proxy.port} ")
    (home / ".ssh" / "known_hosts").write_text(known)
    ferry = Ferry(home=tmp_path, cwd=tmp_path, extra_env={"HOME": str(home), "SSH_AUTH_SOCK": ""})
    try:
        yield SftpSite(sshd, proxy, ferry, sshd.mkdir())
    finally:
        proxy.close()


@dataclass
class S3Site:
    """``s3://BUCKET/`` on moto, reached through ``proxy`` (``AWS_ENDPOINT_URL``), for ``ferry``."""

    server: S3Server
    proxy: FaultProxy
    ferry: Ferry
    bucket: str

    def url(self, key: str = "") -> str:
        return f"s3://{self.bucket}/{key}"


@pytest.fixture
def s3_site(tmp_path: Path) -> Iterator[S3Site]:
    try:
        server = shared_server("moto")
    except RuntimeError as exc:
        pytest.skip(f"moto S3 server unavailable: {exc}")
    proxy = FaultProxy(("127.0.0.1", server.port))
    ferry = Ferry(home=tmp_path, cwd=tmp_path, extra_env=server.env(proxy.endpoint))
    try:
        yield S3Site(server, proxy, ferry, server.new_bucket())
    finally:
        proxy.close()
