"""A network that goes silent (packets dropped, no error to anyone) for a few seconds mid-file:
the transfer waits or times out and retries, and finishes verified (issue 18)."""

from __future__ import annotations

from pathlib import Path

from faults.conftest import SftpSite
from helpers import describe, file_events, sha256_file, write_random

MiB = 1 << 20


def test_sftp_upload_through_a_silent_network_finishes_verified(sftp_site: SftpSite, tmp_path: Path) -> None:
    site, ferry = sftp_site, sftp_site.ferry
    digest = write_random(tmp_path / "big.bin", 16 * MiB)
    site.proxy.after(4 * MiB, lambda: site.proxy.stall(4))
    res = ferry("cp", "--json", "--bwlimit", "8M", tmp_path / "big.bin", site.url(), timeout=120)
    assert res.returncode == 0, describe(res)
    assert site.proxy.stalls == 1
    assert sha256_file(site.remote / "big.bin") == digest
    assert "sha256 match" in file_events(res.stdout)["big.bin"]["verified"]
