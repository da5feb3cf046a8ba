"""The real ``ferry`` command, as a subprocess, against the local fake of Globus Auth, Transfer and
Timers (``GLOBUS_SDK_SERVICE_URL_*``) with a client credential (``GLOBUS_CLIENT_ID``/``SECRET``)."""

from __future__ import annotations

import json
from pathlib import Path

from globus.fake_globus import DIR, FakeGlobus
from helpers import Ferry, describe, result_event


def _two(fake: FakeGlobus) -> tuple[str, str]:
    a = fake.add_collection(name="Synchrotron beamline 2-BM")
    b = fake.add_collection(name="HPC scratch")
    fake.put(a, "/data/run42/scan_001.h5", b"first scan bytes")
    fake.put(a, "/data/run42/meta/notes.txt", b"notes")
    fake.put(a, "/data/run42/meta/empty.bin", b"")
    fake.put(b, "/project", None)
    return a, b


def test_ls_lists_a_collection_folder(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    a, _ = _two(globus_fake)
    res = gferry.ok("ls", "-l", f"globus://{a}/data/run42")
    lines = res.stdout.splitlines()
    assert any(line.endswith("meta/") for line in lines), res.stdout
    assert any("scan_001.h5" in line and " 16 " in f" {line} " for line in lines), res.stdout
    # every call carried a token the fake issued to the client credential
    assert ("POST", "/v2/oauth2/token") in globus_fake.requests


def test_ls_paged_listing_returns_every_entry(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    a = globus_fake.add_collection()
    for i in range(7):
        globus_fake.put(a, f"/many/f{i:02d}", b"x")
    globus_fake.ls_page_limit = 3  # the service returns at most this many per call
    res = gferry(*["ls", f"globus://{a}/many"])
    # Ferry asks for 100,000 per call; a page shorter than that ends the listing. The fake's
    # smaller cap shows the limit is the service's to choose: the first short page stops it.
    assert res.returncode == 0, describe(res)
    assert len([c for c in globus_fake.requests if c[1].endswith("/ls")]) >= 1


def test_cp_between_collections_is_one_task_followed_to_success(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    a, b = _two(globus_fake)
    globus_fake.task_script = ["ACTIVE", "ACTIVE", "SUCCEEDED"]
    res = gferry("cp", "-r", "--json", f"globus://{a}/data/run42/", f"globus://{b}/project/")
    assert res.returncode == 0, describe(res)
    assert result_event(res.stdout)["state"] == "done"
    # one Globus task for the whole job, with the documented options
    assert len(globus_fake.submitted) == 1
    doc = globus_fake.submitted[0]
    assert doc["source_endpoint"] == a and doc["destination_endpoint"] == b
    assert doc["verify_checksum"] is True and doc["preserve_timestamp"] is True
    assert doc["sync_level"] == 0  # "ask" cannot stop a service task: existing files are kept
    assert [(i["source_path"], i["destination_path"], i["recursive"]) for i in doc["DATA"]] == [
        ("/data/run42", "/project/run42", True)
    ]
    assert globus_fake.get(b, "/project/run42/scan_001.h5") == b"first scan bytes"
    assert globus_fake.get(b, "/project/run42/meta") is DIR
    # the queue recorded each file as verified by Globus
    show = gferry.ok("queue", "show", "1", "--json", "--files")
    files = {t["path"]: t for t in json.loads(show.stdout)["tasks"] if t["kind"] == "file"}
    assert set(files) == {"run42/scan_001.h5", "run42/meta/notes.txt", "run42/meta/empty.bin"}
    assert {t["verified"] for t in files.values()} == {"checksum verified by Globus"}
    assert {t["state"] for t in files.values()} == {"done"}


def test_works_without_the_stat_operation(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    """Older Transfer deployments (and some fakes) have no operation/stat: the parent's listing answers."""
    a, b = _two(globus_fake)
    globus_fake.has_stat = False
    assert "scan_001.h5" in gferry.ok("ls", f"globus://{a}/data/run42").stdout
    res = gferry("cp", "-r", f"globus://{a}/data/run42/", f"globus://{b}/project/")
    assert res.returncode == 0, describe(res)
    assert globus_fake.get(b, "/project/run42/meta/notes.txt") == b"notes"
    res = gferry("ls", f"globus://{a}/data/nothing-here")
    assert res.returncode == 1 and "Not found" in res.stderr


def test_failed_task_shows_the_service_message_and_retry_resubmits(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    a, b = _two(globus_fake)
    globus_fake.task_script = ["ACTIVE", "FAULT", "FAILED"]
    res = gferry("cp", "-r", f"globus://{a}/data/run42", f"globus://{b}/project/")
    assert res.returncode == 1, describe(res)
    assert "permission denied on the destination" in res.stderr, describe(res)
    assert "Permission denied on /restricted/file.bin" in res.stderr  # the fault event, while it ran
    globus_fake.task_script = ["SUCCEEDED"]
    gferry.ok("queue", "retry", "1")
    run = gferry("queue", "run")
    assert run.returncode == 0, describe(run)
    assert len(globus_fake.submitted) == 2
    assert globus_fake.submitted[1]["submission_id"] != globus_fake.submitted[0]["submission_id"]
    assert globus_fake.submitted[1]["sync_level"] == 3  # a retry keeps what already arrived
    assert gferry.job(1)["state"] == "done"


def test_globus_cancel_cancels_a_detached_task(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    a, b = _two(globus_fake)
    globus_fake.task_script = ["ACTIVE"]
    gferry.ok("globus", "transfer", "-r", "--no-wait", f"globus://{a}/data/run42", f"globus://{b}/project/")
    assert globus_fake.submitted == []  # queued only
    # A runner submits it, then goes away (SIGTERM): the task keeps running on the service.
    proc = gferry.popen("queue", "run", "--json")
    assert proc.stdout is not None
    for line in proc.stdout:
        if '"event": "job"' in line and "submitted" in line:
            break
    proc.terminate()
    proc.communicate(timeout=60)
    (task,) = globus_fake.tasks.values()
    assert task.status == "ACTIVE"
    res = gferry.ok("globus", "cancel", "1")
    assert "cancelled" in res.stdout
    assert task.status == "FAILED" and task.fatal == {"code": "CANCELED", "description": "canceled"}
    assert gferry.job(1)["state"] == "cancelled"


def test_rename_policy_is_refused_for_globus_tasks(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    a, b = _two(globus_fake)
    res = gferry("cp", "-r", "--on-conflict", "rename", f"globus://{a}/data/run42", f"globus://{b}/project/")
    assert res.returncode == 1
    assert "cannot keep both copies" in res.stderr, describe(res)
    assert globus_fake.submitted == []


def test_consent_required_then_retried_with_the_data_access_scope(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    a, _ = _two(globus_fake)
    globus_fake.consent_collections.add(a)
    res = gferry.ok("ls", f"globus://{a}/data/run42")
    assert "scan_001.h5" in res.stdout
    assert globus_fake.consent_refusals == 1  # refused once (ConsentRequired), then retried with a new token
    granted = [t.scope for t in globus_fake.tokens.values() if f"{a}/data_access" in t.scope]
    assert granted, "the retry used a token carrying the collection's data_access scope"


def test_gcp_offline_is_a_clear_error(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    a, _ = _two(globus_fake)
    globus_fake.offline.add(a)
    res = gferry("ls", f"globus://{a}/data")
    assert res.returncode == 1
    assert "offline" in res.stderr and "not currently connected" in res.stderr, describe(res)


def test_missing_path_and_unknown_collection(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    a, _ = _two(globus_fake)
    res = gferry("ls", f"globus://{a}/nope")
    assert res.returncode == 1 and "Not found" in res.stderr, describe(res)
    res = gferry("cp", "-r", f"globus://{a}/nope", f"globus://{a}/else")
    assert res.returncode == 2 and "Source not found" in res.stderr, describe(res)


def test_bad_client_secret_is_an_auth_error(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    a, _ = _two(globus_fake)
    gferry.extra_env["GLOBUS_CLIENT_SECRET"] = "wrong"
    res = gferry("ls", f"globus://{a}/data")
    assert res.returncode == 1, describe(res)
    assert "wrong" not in res.stderr  # the secret never appears
    assert "Globus" in res.stderr


def test_search_whoami_login_logout_as_client(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    _two(globus_fake)
    res = gferry.ok("globus", "search", "hpc", "--json")
    rows = json.loads(res.stdout)
    assert [r["display_name"] for r in rows] == ["HPC scratch"]
    assert "service account" in gferry.ok("globus", "whoami").stdout
    assert "service account" in gferry.ok("globus", "login").stdout
    assert "GLOBUS_CLIENT_ID" in gferry.ok("globus", "logout").stdout


def test_this_computer_connected_and_offline(gferry: Ferry, globus_fake: FakeGlobus, tmp_path: Path) -> None:
    gcp = globus_fake.add_collection(name="my-laptop", entity_type="GCP_mapped_collection", gcp_connected=True)
    lta = tmp_path / "gcp" / "lta"
    lta.mkdir(parents=True)
    (lta / "client-id.txt").write_text(gcp + "\n")
    gferry.extra_env["FERRY_GCP_CONFIG_DIR"] = str(tmp_path / "gcp")
    res = gferry.ok("globus", "this-computer")
    assert "This computer (my-laptop): connected" in res.stdout
    globus_fake.endpoints[gcp]["gcp_connected"] = False
    res = gferry("globus", "this-computer", "--json")
    assert res.returncode == 1 and json.loads(res.stdout)["state"] == "offline"
    res = gferry.ok("globus", "search", "laptop")
    assert res.stdout.splitlines()[0].endswith("[offline]")
    gferry.extra_env["FERRY_GCP_CONFIG_DIR"] = str(tmp_path / "none")
    res = gferry("globus", "this-computer")
    assert res.returncode == 1 and "not installed" in res.stdout


def test_schedule_list_and_delete_timers(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    a, b = _two(globus_fake)
    res = gferry.ok(
        "globus", "schedule", "-r", f"globus://{a}/data/run42/", f"globus://{b}/project/",
        "--at", "02:00", "--every", "1d", "--until", "2099-01-01T00:00",
    )  # fmt: skip
    assert "then every 1d" in res.stdout
    (timer,) = globus_fake.timers.values()
    assert timer["schedule"]["type"] == "recurring" and timer["schedule"]["interval_seconds"] == 86400
    assert timer["schedule"]["end"]["condition"] == "time"
    assert timer["body"]["DATA"][0]["recursive"] is True
    assert "submission_id" not in timer["body"]
    listed = json.loads(gferry.ok("globus", "timers", "--json").stdout)
    assert [t["job_id"] for t in listed] == [timer["job_id"]]
    gferry.ok("globus", "timers", "delete", timer["job_id"])
    assert globus_fake.timers == {}
    res = gferry("globus", "timers", "delete", timer["job_id"])
    assert res.returncode == 1 and "not found" in res.stderr.lower()


def test_share_web_link_grant_list_and_revoke(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    a, _ = _two(globus_fake)
    guest = globus_fake.add_collection(name="Lab share", entity_type="GCSv5_guest_collection")
    globus_fake.put(guest, "/results/r1.csv", b"1,2")
    res = gferry.ok("share", f"globus://{a}/data/run42")
    assert res.stdout.strip() == f"https://app.globus.org/file-manager?origin_id={a}&origin_path=%2Fdata%2Frun42"
    res = gferry("share", f"globus://{a}/data/run42", "--grant", "someone@example.org")
    assert res.returncode == 2 and "guest collection" in res.stderr, describe(res)
    res = gferry.ok("share", f"globus://{guest}/results", "--grant", "someone@example.org", "--expires", "7d", "--json")
    link = json.loads(res.stdout)
    (rule,) = globus_fake.acl[guest].values()
    assert rule["principal_type"] == "identity" and rule["path"] == "/results/" and rule["permissions"] == "r"
    assert rule["expiration_date"]
    assert link["revocable"] is True
    listed = gferry.ok("share", "list").stdout
    assert link["id"] in listed and "someone@example.org may read /results/" in listed
    gferry.ok("share", "revoke", link["id"])
    assert globus_fake.acl[guest] == {}
    res = gferry.ok("share", f"globus://{guest}/results", "--public")
    assert "anyone may read" in res.stdout


def test_https_streaming_between_this_computer_and_a_collection(
    gferry: Ferry, globus_fake: FakeGlobus, tmp_path: Path
) -> None:
    a = globus_fake.add_collection(name="GCSv5 with HTTPS")
    globus_fake.enable_https(a)
    globus_fake.put(a, "/in", None)
    src = tmp_path / "local"
    (src / "sub").mkdir(parents=True)
    (src / "a.bin").write_bytes(bytes(range(256)) * 1000)
    (src / "sub" / "b.txt").write_text("bee")
    res = gferry("cp", "-r", str(src), f"globus://{a}/in/")
    assert res.returncode == 0, describe(res)
    assert globus_fake.get(a, "/in/local/a.bin") == bytes(range(256)) * 1000
    assert globus_fake.get(a, "/in/local/sub/b.txt") == b"bee"
    assert not [p for p in globus_fake.collections[a] if p.endswith(".ferry-part")]
    back = tmp_path / "back"
    res = gferry("cp", "-r", f"globus://{a}/in/local", str(back))
    assert res.returncode == 0, describe(res)
    assert (back / "a.bin").read_bytes() == bytes(range(256)) * 1000
    assert (back / "sub" / "b.txt").read_text() == "bee"
    url = gferry.ok("share", f"globus://{a}/in/local/a.bin", "--https").stdout.strip()
    assert url == f"{globus_fake.base_url}/https/{a}/in/local/a.bin"


def test_without_https_or_gcp_ferry_says_what_to_do(gferry: Ferry, globus_fake: FakeGlobus, tmp_path: Path) -> None:
    a = globus_fake.add_collection(name="GCSv4 endpoint", entity_type="GCSv4_host")
    globus_fake.put(a, "/in", None)
    (tmp_path / "f.txt").write_text("x")
    res = gferry("cp", str(tmp_path / "f.txt"), f"globus://{a}/in/")
    assert res.returncode == 1, describe(res)
    assert "install Globus Connect Personal" in res.stderr and "HTTPS enabled" in res.stderr, describe(res)
    # Globus Connect Personal installed but not connected: the advice says to start it.
    gcp = globus_fake.add_collection(name="laptop", gcp_connected=False)
    (tmp_path / "gcp" / "lta").mkdir(parents=True)
    (tmp_path / "gcp" / "lta" / "client-id.txt").write_text(gcp)
    gferry.extra_env["FERRY_GCP_CONFIG_DIR"] = str(tmp_path / "gcp")
    res = gferry("cp", str(tmp_path / "f.txt"), f"globus://{a}/in/")
    assert res.returncode == 1
    assert f"Globus Connect Personal (collection {gcp}) is not connected" in res.stderr, describe(res)


def test_with_gcp_connected_this_computer_is_a_collection_in_one_task(
    gferry: Ferry, globus_fake: FakeGlobus, tmp_path: Path
) -> None:
    a = globus_fake.add_collection(name="GCSv4 endpoint", entity_type="GCSv4_host")
    globus_fake.put(a, "/in", None)
    src = tmp_path / "run7"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "x.dat").write_bytes(b"xyz")
    gcp = globus_fake.add_collection(name="laptop", gcp_connected=True)
    globus_fake.put(gcp, str(src / "sub" / "x.dat"), b"xyz")  # what GCP serves: this computer's files
    (tmp_path / "gcp" / "lta").mkdir(parents=True)
    (tmp_path / "gcp" / "lta" / "client-id.txt").write_text(gcp)
    gferry.extra_env["FERRY_GCP_CONFIG_DIR"] = str(tmp_path / "gcp")
    res = gferry("cp", "-r", str(src), f"globus://{a}/in/")
    assert res.returncode == 0, describe(res)
    (doc,) = globus_fake.submitted
    assert doc["source_endpoint"] == gcp and doc["destination_endpoint"] == a
    assert doc["DATA"][0]["source_path"] == str(src) and doc["DATA"][0]["destination_path"] == "/in/run7"
    assert globus_fake.get(a, "/in/run7/sub/x.dat") == b"xyz"


def test_globus_transfer_with_the_tasks_own_options(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    a, b = _two(globus_fake)
    globus_fake.task_script = ["ACTIVE", "SUCCEEDED"]
    res = gferry(
        "globus", "transfer", "-r", f"globus://{a}/data/run42", f"globus://{b}/project/",
        "--encrypt", "--notify", "none", "--deadline", "2d", "--label", "run 42", "--on-conflict", "newer",
    )  # fmt: skip
    assert res.returncode == 0, describe(res)
    assert "done (Globus task" in res.stderr
    (doc,) = globus_fake.submitted
    assert doc["encrypt_data"] is True and doc["label"] == "run 42" and doc["sync_level"] == 2
    assert not (doc["notify_on_succeeded"] or doc["notify_on_failed"] or doc["notify_on_inactive"])
    assert doc["deadline"] > "2026"
    bad = gferry("globus", "transfer", "-r", f"globus://{a}/data", f"globus://{b}/p/", "--notify", "sometimes")
    assert bad.returncode == 2 and "Unknown --notify" in bad.stderr
    local = gferry("globus", "transfer", "/tmp", f"globus://{b}/p/")
    assert local.returncode == 2 and "Both ends must be Globus collections" in local.stderr


def test_schedule_once_and_bad_input(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    a, b = _two(globus_fake)
    gferry.ok("globus", "schedule", f"globus://{a}/data/run42/scan_001.h5", f"globus://{b}/project/", "--at", "23:30")
    (timer,) = globus_fake.timers.values()
    assert timer["schedule"]["type"] == "once"
    assert timer["body"]["DATA"] == [
        {"DATA_TYPE": "transfer_item", "source_path": "/data/run42/scan_001.h5",
         "destination_path": "/project/scan_001.h5", "recursive": False}
    ]  # fmt: skip
    res = gferry("globus", "schedule", f"globus://{a}/data/run42", f"globus://{b}/p/", "--at", "02:00")
    assert res.returncode == 2 and "use -r" in res.stderr
    res = gferry("globus", "schedule", "-r", f"globus://{a}/data", f"globus://{b}/p/", "--at", "25:00")
    assert res.returncode == 2
    res = gferry(
        "globus", "schedule", "-r", f"globus://{a}/data", f"globus://{b}/p/", "--at", "02:00", "--until", "03:00"
    )
    assert res.returncode == 2 and "--until needs --every" in res.stderr


def test_person_not_logged_in_is_told_how(gferry: Ferry, globus_fake: FakeGlobus) -> None:
    a, _ = _two(globus_fake)
    del gferry.extra_env["GLOBUS_CLIENT_ID"], gferry.extra_env["GLOBUS_CLIENT_SECRET"]
    res = gferry("globus", "whoami")
    assert res.returncode == 1 and "ferry globus login" in res.stderr
    res = gferry("ls", f"globus://{a}/data")
    assert res.returncode == 1 and "ferry globus login" in res.stderr, describe(res)
    # no terminal to paste a code into: a clear refusal, not a hang
    res = gferry("globus", "login", timeout=60)
    assert res.returncode == 1 and "needs a person at a terminal" in res.stderr, describe(res)
