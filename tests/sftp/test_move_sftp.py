"""``ferry mv`` and re-runs against a real OpenSSH sshd: sources are deleted on either side only
after a checksum-level copy, and a second ``ferry cp`` finds the files identical within SFTP's
one-second modification times."""

from __future__ import annotations

import os
import re
from pathlib import Path

from helpers import describe, file_digests, partials, result_event
from sftp.test_cli_sftp import ferry_as, url, user_home
from sshd import SshServer


def seed(folder: Path) -> dict[str, str]:
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_bytes(b"alpha\n")
    (folder / "sub" / "b.bin").write_bytes(os.urandom(300_000))
    (folder / "sub" / "c.dat").write_bytes(os.urandom(2 << 20))
    return file_digests(folder)


def test_mv_up_then_back_down_deletes_each_side_only_after_its_checksum(sshd: SshServer, tmp_path: Path) -> None:
    ferry = ferry_as(tmp_path, user_home(sshd, tmp_path))
    src = tmp_path / "results"
    want = seed(src)
    remote = sshd.mkdir()
    res = ferry("mv", "-r", "--json", src, url(sshd, f"{remote}/"))
    assert res.returncode == 0, describe(res)
    assert result_event(res.stdout)["move"]["moved"] == len(want)
    assert file_digests(remote / "results") == want and not src.exists()
    # And back: the remote sources are re-hashed on the host (sha256sum) and removed over SFTP.
    res = ferry("mv", "-r", url(sshd, f"{remote}/results"), tmp_path / "back")
    assert res.returncode == 0, describe(res)
    assert file_digests(tmp_path / "back") == want
    assert not (remote / "results").exists()
    assert f"moved {len(want)} file(s) and 2 folder(s)" in res.stderr
    assert not partials(tmp_path) and not partials(remote)


def test_rerun_over_sftp_skips_identical_files(sshd: SshServer, tmp_path: Path) -> None:
    ferry = ferry_as(tmp_path, user_home(sshd, tmp_path))
    src = tmp_path / "results"
    want = seed(src)
    remote = sshd.mkdir()
    ferry.ok("cp", "-r", src, url(sshd, f"{remote}/"))
    res = ferry("cp", "-r", src, url(sshd, f"{remote}/"))
    assert res.returncode == 0, describe(res)
    assert re.search(rf"\b{len(want)} skipped \(({len(want)} )?identical\)", res.stderr), res.stderr
    (src / "a.txt").write_bytes(b"alpha, edited\n")
    res = ferry("cp", "-r", src, url(sshd, f"{remote}/"))
    assert res.returncode == 1, describe(res)
    assert "1 file(s) differ from what is already at the destination" in res.stderr
    assert (remote / "results" / "a.txt").read_bytes() == b"alpha\n"
