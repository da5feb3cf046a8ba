"""``ferry cp`` / ``ls`` / ``hash`` against a real OpenSSH sshd, run as subprocesses the way a
user types them: ``sftp://user@127.0.0.1:PORT/path`` with keys and known_hosts in ``~/.ssh``, and
ssh_config aliases (``cluster:/scratch/me``)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from helpers import Ferry, describe, file_digests, file_events, partials, result_event, sha256_file
from sshd import SshServer


def user_home(server: SshServer, tmp_path: Path, *, known: bool = True, config: str = "") -> Path:
    """A fresh ``$HOME`` with ``~/.ssh/id_ed25519``, ``known_hosts`` and optionally a config."""
    home = tmp_path / "home"
    ssh = home / ".ssh"
    ssh.mkdir(parents=True, mode=0o700)
    shutil.copy(server.client_key, ssh / "id_ed25519")
    (ssh / "id_ed25519").chmod(0o600)
    if known:
        shutil.copy(server.known_hosts, ssh / "known_hosts")
    if config:
        (ssh / "config").write_text(config)
    return home


def ferry_as(tmp_path: Path, home: Path) -> Ferry:
    env = {"HOME": str(home), "SSH_AUTH_SOCK": ""}
    return Ferry(home=tmp_path, cwd=tmp_path, extra_env=env)


def url(server: SshServer, path: Path | str) -> str:
    return f"sftp://{server.user}@{server.host}:{server.port}{path}"


def seed(folder: Path) -> dict[str, str]:
    (folder / "sub" / "deeper").mkdir(parents=True)
    (folder / "a.txt").write_bytes(b"alpha\n")
    (folder / "sub" / "b.bin").write_bytes(os.urandom(300_000))
    (folder / "sub" / "deeper" / "c.dat").write_bytes(os.urandom(3 << 20))
    (folder / "empty").write_bytes(b"")
    return file_digests(folder)


def test_cp_up_and_down_by_url_verified(sshd: SshServer, tmp_path: Path) -> None:
    ferry = ferry_as(tmp_path, user_home(sshd, tmp_path))
    src = tmp_path / "results"
    src.mkdir()
    want = seed(src)
    remote = sshd.mkdir()
    res = ferry.ok("cp", "-r", "--json", src, url(sshd, f"{remote}/"))
    assert result_event(res.stdout)["state"] == "done", describe(res)
    files = file_events(res.stdout)
    assert all(e["state"] == "done" for e in files.values()), files
    # Remote sha256sum on the server agrees with the stream hash, so each file says so.
    assert {e.get("verified") for e in files.values() if e.get("kind", "file") == "file"} <= {
        "sha256 match",
        None,
    }
    assert file_digests(remote / "results") == want
    assert not partials(remote)

    back = tmp_path / "back"
    res = ferry.ok("cp", "-r", url(sshd, f"{remote}/results"), back)
    assert file_digests(back) == want
    assert not partials(back)


def test_alias_from_ssh_config(sshd: SshServer, tmp_path: Path) -> None:
    block = sshd.ssh_config_block("cluster").replace(str(sshd.client_key), "~/.ssh/id_ed25519")
    ferry = ferry_as(tmp_path, user_home(sshd, tmp_path, config=block))
    remote = sshd.mkdir()
    (tmp_path / "one.txt").write_bytes(b"one file\n")
    ferry.ok("cp", tmp_path / "one.txt", f"cluster:{remote}/")
    assert (remote / "one.txt").read_bytes() == b"one file\n"

    listing = json.loads(ferry.ok("ls", "--json", f"cluster:{remote}").stdout)
    assert [(e["name"], e["size"]) for e in listing] == [("one.txt", 9)]

    out = ferry.ok("hash", f"cluster:{remote}/one.txt").stdout
    assert out.split()[0] == sha256_file(tmp_path / "one.txt")

    ferry.ok("cp", f"cluster:{remote}/one.txt", tmp_path / "copy.txt")
    assert (tmp_path / "copy.txt").read_bytes() == b"one file\n"


def test_ls_shows_links_and_sizes(sshd: SshServer, tmp_path: Path) -> None:
    ferry = ferry_as(tmp_path, user_home(sshd, tmp_path))
    remote = sshd.mkdir()
    (remote / "f").write_bytes(b"12345")
    (remote / "d").mkdir()
    os.symlink("f", remote / "link")
    sshd.chown(remote)
    listing = {e["name"]: e for e in json.loads(ferry.ok("ls", "--json", url(sshd, remote)).stdout)}
    assert listing["f"]["size"] == 5
    assert listing["d"]["kind"] == "dir"
    assert listing["link"]["kind"] == "link"


def test_unknown_host_key_is_refused_without_anyone_to_ask(sshd: SshServer, tmp_path: Path) -> None:
    ferry = ferry_as(tmp_path, user_home(sshd, tmp_path, known=False))
    remote = sshd.mkdir()
    (tmp_path / "x").write_bytes(b"x")
    res = ferry("cp", tmp_path / "x", url(sshd, f"{remote}/"))
    assert res.returncode != 0, describe(res)
    fingerprints = list(sshd.host_key_fingerprints.values())
    assert any(fp in res.stderr for fp in fingerprints), res.stderr
    assert "not trusted" in res.stderr
    assert list(remote.iterdir()) == []
    assert not (tmp_path / "home" / ".ssh" / "known_hosts").exists()  # never saved silently


def test_changed_host_key_is_refused_naming_file_and_line(sshd: SshServer, tmp_path: Path) -> None:
    home = user_home(sshd, tmp_path, known=False)
    known = home / ".ssh" / "known_hosts"
    # Line 2 claims another key for this host, for every key type the server has.
    other = paramiko_key_lines(f"[{sshd.host}]:{sshd.port}")
    unrelated = "example.org ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n"
    known.write_text(unrelated + other)
    ferry = ferry_as(tmp_path, home)
    remote = sshd.mkdir()
    res = ferry("ls", url(sshd, remote))
    assert res.returncode != 0, describe(res)
    assert "CHANGED" in res.stderr and str(known) in res.stderr and "line 2" in res.stderr, res.stderr


def paramiko_key_lines(name: str) -> str:
    import paramiko

    key = paramiko.Ed25519Key.from_private_key_file(str(_fresh_key()))
    return f"{name} {key.get_name()} {key.get_base64()}\n"


def _fresh_key() -> Path:
    import subprocess
    import tempfile

    folder = Path(tempfile.mkdtemp())
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / "k")], check=True)
    return folder / "k"


def test_missing_remote_path_is_a_clear_error(sshd: SshServer, tmp_path: Path) -> None:
    ferry = ferry_as(tmp_path, user_home(sshd, tmp_path))
    res = ferry("ls", url(sshd, "/no/such/folder"))
    assert res.returncode != 0
    assert "No such file or folder" in res.stderr, res.stderr


@pytest.mark.parametrize("as_alias", [False, True])
def test_hostile_remote_names_stay_inside_the_destination(sshd: SshServer, tmp_path: Path, as_alias: bool) -> None:
    config = sshd.ssh_config_block("cluster") if as_alias else ""
    ferry = ferry_as(tmp_path, user_home(sshd, tmp_path, config=config))
    remote = sshd.mkdir()
    tree = remote / "tree"
    tree.mkdir()
    odd = {
        b"new\nline": b"1",
        b"latin1-\xe9t\xe9": b"2",  # not UTF-8
        b"-rf": b"3",
        b"..data": b"4",
        b"back\\slash": b"5",
    }
    for name, data in odd.items():
        with open(os.fsencode(tree) + b"/" + name, "wb") as f:
            f.write(data)
    os.symlink("../../../../etc/passwd", tree / "escape-link")
    sshd.chown(remote)
    dest = tmp_path / "dest"
    dest.mkdir()
    before = set(os.listdir(tmp_path)) | {"data"}  # data: ferry's own queue
    source = f"cluster:{tree}" if as_alias else url(sshd, tree)
    res = ferry("cp", "-r", "--json", source, dest)
    assert set(os.listdir(tmp_path)) <= before  # nothing written beside the destination
    got = {}
    for folder, _dirs, files in os.walk(os.fsencode(dest)):
        for name in files:
            p = os.path.join(folder, name)
            assert os.path.realpath(p).startswith(os.fsencode(dest.resolve()) + b"/") or os.path.islink(p)
            if not os.path.islink(p):
                got[name] = Path(os.fsdecode(p)).read_bytes()
    # Every name arrives exactly (Linux takes any bytes but '/' and NUL), or is reported as failed.
    failed = {e["path"] for e in file_events(res.stdout).values() if e["state"] == "failed"}
    for name, data in odd.items():
        assert got.get(name) == data or any(os.fsdecode(name) in f for f in failed), (name, got, describe(res))
    link = dest / "tree" / "escape-link"
    if link.is_symlink():  # links are copied as links, never followed out of the source tree
        assert os.readlink(link) == "../../../../etc/passwd"


def test_saved_site_for_an_ssh_host(sshd: SshServer, tmp_path: Path) -> None:
    ferry = ferry_as(tmp_path, user_home(sshd, tmp_path))
    remote = sshd.mkdir()
    ferry.ok("sites", "add", "lab", url(sshd, remote))
    (tmp_path / "notes.txt").write_bytes(b"saved site\n")
    ferry.ok("cp", tmp_path / "notes.txt", "lab:inbox/")
    assert (remote / "inbox" / "notes.txt").read_bytes() == b"saved site\n"
    listing = json.loads(ferry.ok("ls", "--json", "lab:inbox").stdout)
    assert [e["name"] for e in listing] == ["notes.txt"]


NO_B3SUM = "b3sum is not installed on this machine (the test sshd's host); scripts/system-packages.sh installs it"


@pytest.mark.skipif(shutil.which("b3sum") is None, reason=NO_B3SUM)
def test_blake3_is_checked_by_the_servers_b3sum(sshd: SshServer, tmp_path: Path) -> None:
    """``--verify blake3`` both ways: uploads checked by the server's own ``b3sum`` (small files
    in a tar batch, the 3 MiB one after it closes), downloads by the local read-back."""
    ferry = ferry_as(tmp_path, user_home(sshd, tmp_path))
    src = tmp_path / "results"
    src.mkdir()
    want = seed(src)
    remote = sshd.mkdir()
    res = ferry.ok("cp", "-r", "--json", "--verify", "blake3", src, url(sshd, f"{remote}/"))
    files = {k: e for k, e in file_events(res.stdout).items() if e.get("kind", "file") == "file"}
    assert len(files) == 4 and all(e["state"] == "done" for e in files.values()), files
    assert all(e["level"] == "checksum" and e["evidence"] for e in files.values()), files
    assert result_event(res.stdout)["size_only"] == 0
    assert file_digests(remote / "results") == want
    back = tmp_path / "back"
    res = ferry.ok("cp", "-r", "--verify", "blake3", url(sshd, f"{remote}/results"), back)
    assert file_digests(back) == want
    assert "blake3-checked" in res.stderr and "size only" not in res.stderr


def test_blake3_where_the_server_has_no_b3sum(sshd: SshServer, sshd_factory: Any, tmp_path: Path) -> None:
    """Most clusters have no ``b3sum``. A file too big to read back is then checked by its size,
    not failed after the whole upload; its record says why, and so does the summary."""
    tools = sshd.mkdir("bin-")  # every command of /usr/bin except b3sum, for the next server's PATH
    for exe in Path("/usr/bin").iterdir():
        if exe.name != "b3sum" and exe.resolve().is_file():  # not /usr/bin/X11 -> . (a folder)
            (tools / exe.name).symlink_to(exe)
    tools.chmod(0o755)
    server = sshd_factory(extra_config=[f"SetEnv PATH={tools}:/usr/sbin:/sbin"])
    ferry = ferry_as(tmp_path, user_home(server, tmp_path))
    (tmp_path / "big.bin").write_bytes(os.urandom(3 << 20))
    (tmp_path / "small.txt").write_bytes(b"read back and hashed here\n")
    remote = server.mkdir()
    res = ferry.ok(
        "cp", "--json", "--verify", "blake3", tmp_path / "big.bin", tmp_path / "small.txt", url(server, f"{remote}/")
    )
    files = {Path(k).name: e for k, e in file_events(res.stdout).items()}
    assert files["big.bin"]["state"] == "done", files
    assert files["big.bin"]["level"] == "size" and files["big.bin"]["evidence"] == []
    assert files["big.bin"]["verified"] == "size only (the server has no b3sum to check blake3)"
    assert files["small.txt"]["level"] == "checksum"
    assert files["small.txt"]["evidence"] == ["read-back"]  # read back over SFTP, hashed here
    assert result_event(res.stdout)["size_only"] == 1
    assert (remote / "big.bin").read_bytes() == (tmp_path / "big.bin").read_bytes()
    assert (remote / "small.txt").read_bytes() == (tmp_path / "small.txt").read_bytes()
    (remote / "big.bin").unlink()
    (remote / "small.txt").unlink()
    res = ferry.ok("cp", "--verify", "blake3", tmp_path / "big.bin", tmp_path / "small.txt", url(server, f"{remote}/"))
    assert "2 copied: 1 blake3-checked, 1 size only;" in res.stderr, res.stderr
    assert "(ferry queue show" in res.stderr, res.stderr
