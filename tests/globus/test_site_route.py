"""The Globus route between saved sites (issue 22): an SSH or S3 site names the Globus collection
serving its storage (``ferry sites add ... --globus-collection UUID --globus-path SITE=COLL``), and a
job between two such sites goes as ONE Globus task between the two collections with the mapped
paths, checked by the service, shown as ``direct: globus cluster -> store``.

The sites are real SSH sites on a loopback OpenSSH sshd (Ferry lists and stats through them, and
relays through them when the route is not taken); the collections are the local Globus fake, which
holds the same files (it "serves the same storage").
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.core.errors import UsageError
from ferry.credentials.sites import Site, globus_link
from ferry.transfers.store import Store
from globus.fake_globus import FakeGlobus, FakeGlobusServer
from helpers import Ferry, describe, file_events, result_event
from sftp.test_cli_sftp import url, user_home
from sshd import SshServer, require_sshd

FILES = {"run42/a.txt": b"alpha\n", "run42/sub/b.bin": os.urandom(70_000)}


@pytest.fixture(scope="module")
def sshd() -> Iterator[SshServer]:
    require_sshd()
    with SshServer() as server:
        yield server


def _ferry(tmp_path: Path, sshd: SshServer, server: FakeGlobusServer, *, logged_in: bool = True) -> Ferry:
    home = user_home(sshd, tmp_path)
    env = {**server.env(client=logged_in), "HOME": str(home), "SSH_AUTH_SOCK": ""}
    return Ferry(home=tmp_path, cwd=tmp_path, extra_env=env)


def _two_sites(
    ferry: Ferry, sshd: SshServer, fake: FakeGlobus, *, cluster_map: str | None = None
) -> tuple[Path, Path, str, str]:
    """Sites ``cluster`` (files under run42/) and ``store`` (empty), each on its own folder of
    the sshd host, naming collections A (at /data) and B (at /proj) that hold the same files."""
    ra, rb = sshd.mkdir(), sshd.mkdir()
    a, b = fake.add_collection(name="cluster"), fake.add_collection(name="store")
    for rel, data in FILES.items():
        (ra / rel).parent.mkdir(parents=True, exist_ok=True)
        (ra / rel).write_bytes(data)
        fake.put(a, f"/data/{rel}", data)
    fake.put(b, "/proj", None)
    sshd.chown(ra)
    ferry.ok(
        "sites",
        "add",
        "cluster",
        url(sshd, ra),
        "--globus-collection",
        a,
        "--globus-path",
        cluster_map or f"{ra}=/data",
    )
    ferry.ok("sites", "add", "store", url(sshd, rb), "--globus-collection", b, "--globus-path", f"{rb}=/proj")
    return ra, rb, a, b


def _transfers(fake: FakeGlobus) -> list[dict[str, object]]:
    return [t.doc for t in fake.tasks.values() if t.kind == "TRANSFER"]


def test_cp_between_sites_is_one_globus_task_with_mapped_paths(
    tmp_path: Path, sshd: SshServer, globus_server: FakeGlobusServer
) -> None:
    fake = globus_server.fake
    ferry = _ferry(tmp_path, sshd, globus_server)
    _ra, rb, a, b = _two_sites(ferry, sshd, fake)
    res = ferry("cp", "-r", "--json", "--on-conflict", "overwrite", "cluster:run42", "store:")
    assert res.returncode == 0, describe(res)
    assert "not used by SFTP" not in res.stderr, res.stderr  # the Globus options are the site's, not SSH's
    tasks = _transfers(fake)
    assert len(tasks) == 1, tasks
    task = tasks[0]
    assert (task["source_endpoint"], task["destination_endpoint"]) == (a, b)
    items = [(i["source_path"], i["destination_path"], i["recursive"]) for i in task["DATA"]]  # type: ignore[attr-defined]
    assert items == [("/data/run42", "/proj/run42", True)]
    assert task["verify_checksum"] is True
    # The service moved the bytes: they are in collection B, and not on the host's folder for
    # 'store' (which the fake does not share): nothing went through Ferry.
    assert fake.get(b, "/proj/run42/sub/b.bin") == FILES["run42/sub/b.bin"]
    assert not (rb / "run42").exists()
    result = result_event(res.stdout)
    assert (result["route"], result["route_reason"]) == ("direct", "globus cluster -> store"), result
    # Each file recorded in the site's own paths, checked by the service (never by Ferry).
    files = file_events(res.stdout)
    assert {rel: e["state"] for rel, e in files.items() if e["kind"] == "file"} == dict.fromkeys(FILES, "done"), files
    show = ferry.ok("queue", "show", str(result["job"]), "--files")
    assert "route:    direct: globus cluster -> store" in show.stdout, show.stdout
    assert show.stdout.count("checksum verified by Globus") >= len(FILES), show.stdout
    store = Store(tmp_path / "data" / "queue.db")
    try:
        rows = {t.dst for t in store.tasks(int(str(result["job"]))) if t.kind == "file"}
    finally:
        store.close()
    assert rows == {str(rb / rel) for rel in FILES}, rows  # the site's paths, not the collection's


def test_route_relay_never_submits_a_task(tmp_path: Path, sshd: SshServer, globus_server: FakeGlobusServer) -> None:
    fake = globus_server.fake
    ferry = _ferry(tmp_path, sshd, globus_server)
    _ra, rb, _a, _b = _two_sites(ferry, sshd, fake)
    res = ferry("cp", "-r", "--json", "--route", "relay", "cluster:run42", "store:")
    assert res.returncode == 0, describe(res)
    assert _transfers(fake) == []
    assert result_event(res.stdout)["route"] == "relay"
    for rel, data in FILES.items():
        assert (rb / rel).read_bytes() == data


def test_path_outside_the_mapping_relays_saying_why(
    tmp_path: Path, sshd: SshServer, globus_server: FakeGlobusServer
) -> None:
    fake = globus_server.fake
    ferry = _ferry(tmp_path, sshd, globus_server)
    ra, rb, _a, _b = _two_sites(ferry, sshd, fake, cluster_map="/elsewhere=/data")
    res = ferry("cp", "-r", "--json", "cluster:run42", "store:")
    assert res.returncode == 0, describe(res)
    assert _transfers(fake) == []
    result = result_event(res.stdout)
    assert result["route"] == "relay", result
    reason = str(result["route_reason"])
    assert "is outside the folders saved sites map to Globus (cluster: /elsewhere, store: " in reason, reason
    for rel, data in FILES.items():
        assert (rb / rel).read_bytes() == data
    # --route direct says the same sentence and fails, copying nothing more.
    again = ferry("cp", "-r", "--json", "--route", "direct", "cluster:run42", "store:other/")
    assert again.returncode != 0, describe(again)
    assert "is outside the folders saved sites map to Globus" in again.stdout + again.stderr, describe(again)
    assert _transfers(fake) == []
    assert not (rb / "other" / "run42").exists()
    del ra


def test_not_logged_in_relays_in_one_sentence(tmp_path: Path, sshd: SshServer, globus_server: FakeGlobusServer) -> None:
    fake = globus_server.fake
    ferry = _ferry(tmp_path, sshd, globus_server, logged_in=False)
    _ra, rb, _a, _b = _two_sites(ferry, sshd, fake)
    res = ferry("cp", "-r", "--json", "cluster:run42", "store:")
    assert res.returncode == 0, describe(res)
    assert _transfers(fake) == []
    result = result_event(res.stdout)
    assert result["route"] == "relay", result
    assert str(result["route_reason"]).startswith("not logged in to Globus"), result
    assert (rb / "run42" / "a.txt").read_bytes() == FILES["run42/a.txt"]


def test_queue_add_takes_the_globus_route_and_queue_show_says_so(
    tmp_path: Path, sshd: SshServer, globus_server: FakeGlobusServer
) -> None:
    fake = globus_server.fake
    ferry = _ferry(tmp_path, sshd, globus_server)
    _ra, _rb, _a, b = _two_sites(ferry, sshd, fake)
    added = ferry.ok("queue", "add", "-r", "--json", "--on-conflict", "overwrite", "cluster:run42/", "store:copy/")
    job = json.loads(added.stdout)["id"]
    ferry.ok("queue", "run")
    tasks = _transfers(fake)
    assert len(tasks) == 1, tasks
    items = [(i["source_path"], i["destination_path"]) for i in tasks[0]["DATA"]]  # type: ignore[attr-defined]
    assert items == [("/data/run42", "/proj/copy/run42")]
    assert fake.get(b, "/proj/copy/run42/a.txt") == FILES["run42/a.txt"]
    show = ferry.ok("queue", "show", str(job))
    assert "route:    direct: globus cluster -> store" in show.stdout, show.stdout


def test_site_globus_options_are_checked() -> None:
    def link(address: str, **opts: str) -> object:
        return globus_link(Site("s1", address, options=opts))

    cid = "6c54cade-bde5-45c1-bdea-f4bd71dba2cc"
    assert link("sftp://me@h/x") is None
    with pytest.raises(UsageError, match="not a Globus collection UUID"):
        link("sftp://me@h/x", globus_collection="nope")
    with pytest.raises(UsageError, match="SITE_PATH=COLLECTION_PATH"):
        link("sftp://me@h/x", globus_collection=cid, globus_path="/home/me")
    with pytest.raises(UsageError, match="only SSH"):
        link("/tmp/x", globus_collection=cid)
    ssh = globus_link(Site("s1", "sftp://me@h", options={"globus_collection": cid, "globus_path": "/home/me=/~/"}))
    assert ssh is not None
    assert ssh.to_collection("/home/me/run42/a") == "/~/run42/a"
    assert ssh.to_collection("/home/me") == "/~/"
    assert ssh.to_collection("/home/other") is None
    assert ssh.to_collection("/home/me/../other") is None
    assert ssh.from_collection("/~/run42/a") == "/home/me/run42/a"
    plain = globus_link(Site("s1", "sftp://me@h", options={"globus_collection": cid}))
    assert plain is not None
    assert (plain.to_collection("run42"), plain.to_collection("/scratch/x")) == ("/~/run42", "/scratch/x")
    assert (plain.from_collection("/~/run42"), plain.from_collection("/scratch/x")) == ("run42", "/scratch/x")
    s3 = globus_link(Site("b1", "s3://bucket/pre", options={"globus_collection": cid}))
    assert s3 is not None
    assert s3.to_collection("pre/k.dat") == "/bucket/pre/k.dat"
    assert s3.from_collection("/bucket/pre/k.dat") == "pre/k.dat"


def test_s3_site_to_ssh_site_maps_keys_under_the_bucket(
    tmp_path: Path, sshd: SshServer, globus_server: FakeGlobusServer
) -> None:
    from s3.servers import shared_server

    s3 = shared_server("moto")
    bucket = s3.new_bucket()
    for rel, data in FILES.items():
        s3.client().put_object(Bucket=bucket, Key=rel, Body=data)
    fake = globus_server.fake
    ferry = _ferry(tmp_path, sshd, globus_server)
    ferry.extra_env.update(s3.env())
    lake, hpc = fake.add_collection(name="lake"), fake.add_collection(name="hpc")
    for rel, data in FILES.items():
        fake.put(lake, f"/{bucket}/{rel}", data)  # how a Globus S3 collection shows the bucket
    remote = sshd.mkdir()
    fake.put(hpc, "/scratch", None)
    ferry.ok("sites", "add", "lake", f"s3://{bucket}", "--globus-collection", lake)
    ferry.ok(
        "sites", "add", "hpc", url(sshd, remote), "--globus-collection", hpc, "--globus-path", f"{remote}=/scratch"
    )
    res = ferry("cp", "-r", "--json", "--on-conflict", "overwrite", "lake:run42", "hpc:")
    assert res.returncode == 0, describe(res)
    tasks = _transfers(fake)
    assert len(tasks) == 1, tasks
    items = [(i["source_path"], i["destination_path"]) for i in tasks[0]["DATA"]]  # type: ignore[attr-defined]
    assert items == [(f"/{bucket}/run42", "/scratch/run42")]
    assert (tasks[0]["source_endpoint"], tasks[0]["destination_endpoint"]) == (lake, hpc)
    assert fake.get(hpc, "/scratch/run42/sub/b.bin") == FILES["run42/sub/b.bin"]
    result = result_event(res.stdout)
    assert (result["route"], result["route_reason"]) == ("direct", "globus lake -> hpc"), result


def test_sync_between_sites_is_one_globus_task_with_the_sync_level(
    tmp_path: Path, sshd: SshServer, globus_server: FakeGlobusServer
) -> None:
    fake = globus_server.fake
    ferry = _ferry(tmp_path, sshd, globus_server)
    _ra, rb, a, b = _two_sites(ferry, sshd, fake)
    (rb / "mirror").mkdir()
    (rb / "mirror" / "extra.txt").write_bytes(b"not in the source")
    sshd.chown(rb)
    fake.put(b, "/proj/mirror", None)
    res = ferry("sync", "--json", "--delete", "--max-delete", "1", "cluster:run42", "store:mirror")
    assert res.returncode == 0, describe(res)
    tasks = _transfers(fake)
    assert len(tasks) == 1, tasks
    task = tasks[0]
    assert (task["source_endpoint"], task["destination_endpoint"]) == (a, b)
    items = [(i["source_path"], i["destination_path"]) for i in task["DATA"]]  # type: ignore[attr-defined]
    assert items == [("/data/run42", "/proj/mirror")], items
    assert task["sync_level"] in (2, "mtime"), task
    assert fake.get(b, "/proj/mirror/sub/b.bin") == FILES["run42/sub/b.bin"]
    assert not (rb / "mirror" / "a.txt").exists()  # nothing went through Ferry
    # --delete is Ferry's, made after the task verified every file: level service, not refused.
    result = result_event(res.stdout)
    assert (result["route_reason"], result["deleted"], result.get("refused")) == ("globus cluster -> store", 1, None)
    assert not (rb / "mirror" / "extra.txt").exists()


def test_sync_with_a_path_outside_the_mapping_relays_saying_why(
    tmp_path: Path, sshd: SshServer, globus_server: FakeGlobusServer
) -> None:
    fake = globus_server.fake
    ferry = _ferry(tmp_path, sshd, globus_server)
    _ra, rb, _a, _b = _two_sites(ferry, sshd, fake, cluster_map="/elsewhere=/data")
    res = ferry("sync", "--json", "cluster:run42", "store:mirror")
    assert res.returncode == 0, describe(res)
    assert _transfers(fake) == []
    result = result_event(res.stdout)
    assert result["route"] == "relay", result
    assert "is outside the folders saved sites map to Globus (cluster: /elsewhere" in str(result["route_reason"])
    for rel, data in FILES.items():
        assert (rb / "mirror" / rel.split("/", 1)[1]).read_bytes() == data


def test_the_task_goes_on_with_ferry_gone_and_the_next_run_reattaches(
    tmp_path: Path, sshd: SshServer, globus_server: FakeGlobusServer
) -> None:
    fake = globus_server.fake
    ferry = _ferry(tmp_path, sshd, globus_server)
    _ra, rb, _a, b = _two_sites(ferry, sshd, fake)
    fake.task_script = ["ACTIVE"]
    ferry.ok("queue", "add", "-r", "--on-conflict", "overwrite", "cluster:run42", "store:")
    # A runner submits the task, then goes away (the laptop closes): the service keeps working.
    proc = ferry.popen("queue", "run", "--json")
    assert proc.stdout is not None
    for line in proc.stdout:
        if '"event": "job"' in line and "submitted" in line:
            break
    proc.terminate()
    proc.communicate(timeout=60)
    (task,) = fake.tasks.values()
    assert task.status == "ACTIVE"
    task.script, task.polls = ["SUCCEEDED"], 0  # it finishes while Ferry is away
    ferry.ok("queue", "run")
    assert len(fake.tasks) == 1  # reattached, never submitted twice
    assert fake.get(b, "/proj/run42/a.txt") == FILES["run42/a.txt"]
    show = ferry.ok("queue", "show", "1", "--files")
    assert "route:    direct: globus cluster -> store" in show.stdout, show.stdout
    assert "files:    2 done, 0 skipped, 0 failed, 0 to go" in show.stdout, show.stdout
    store = Store(tmp_path / "data" / "queue.db")
    try:
        rows = {t.dst: t.state for t in store.tasks(1) if t.kind == "file"}
    finally:
        store.close()
    assert rows == {str(rb / rel): "done" for rel in FILES}, rows
