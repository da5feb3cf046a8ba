"""The site picker's slower entries: AWS profiles (read off the UI thread) and Globus
collections (only when logged in), beside local places, saved sites and ssh_config hosts."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.ui.main_window import MainWindow
from ferry.ui.sites_menu import AWS_PROFILE_PREFIX, aws_profiles, globus_collections


@pytest.fixture
def aws_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cfg = tmp_path / "aws_config"
    cfg.write_text("[default]\nregion = eu-west-1\n\n[profile lab]\nregion = us-east-1\n")
    creds = tmp_path / "aws_credentials"
    creds.write_text("[archive]\naws_access_key_id = AKIAEXAMPLE\naws_secret_access_key = not-a-real-secret\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(cfg))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return cfg


def test_aws_profiles_come_from_the_config_and_credentials_files(aws_files: Path) -> None:
    places = aws_profiles()
    assert [p.address for p in places] == [AWS_PROFILE_PREFIX + n for n in ("archive", "default", "lab")]
    assert all(p.group == "aws" and "not-a-real-secret" not in p.tooltip for p in places)


def test_no_aws_files_means_no_profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none2"))
    assert aws_profiles() == []


def test_globus_collections_are_not_looked_up_when_logged_out(monkeypatch: pytest.MonkeyPatch) -> None:
    from ferry.credentials import globus_auth

    globus_auth.reset_shared_auth()
    calls: list[str] = []
    monkeypatch.setattr(globus_auth.GlobusAuth, "logged_in", lambda self: False)
    monkeypatch.setattr(globus_auth.GlobusAuth, "transfer_client", lambda self: calls.append("tc"))
    assert globus_collections() == [] and calls == []


def test_picker_lists_profiles_beside_local_places_and_ssh_hosts_and_a_profile_opens_a_site(  # type: ignore[no-untyped-def]
    qtbot, aws_files: Path, ferry_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ferry_home.mkdir(parents=True, exist_ok=True)
    (ferry_home / "ssh_config").write_text("Host hpc\n  HostName 127.0.0.1\n")
    from ferry.ui.settings import TransferSettings

    w = MainWindow(restore=False, start_queue=False)
    w.transfer_settings = TransferSettings(confirm_drops=False)
    qtbot.addWidget(w)
    with qtbot.waitSignal(w.slow_places_loaded, timeout=30_000):
        w.show()
    try:
        combo = w.left.site
        labels = [combo.itemText(i) for i in range(combo.count())]
        assert "This computer (home)" in labels and "hpc" in labels
        assert {"AWS profile default", "AWS profile lab", "AWS profile archive"} <= set(labels)
        assert labels.index("AWS profile lab") > labels.index("hpc")  # after ssh hosts, grouped

        asked: list[str] = []

        def ask(title: str, label: str, text: str = "") -> str:
            asked.append(title)
            return "lab-bucket/run42"

        monkeypatch.setattr(w, "ask_text", ask)
        went: list[str] = []

        def navigate(target: object, **kw: object) -> bool:
            went.append(str(target))
            return True

        monkeypatch.setattr(w.left, "navigate", navigate)
        w._set_active(w.left)
        combo.setCurrentIndex(labels.index("AWS profile lab"))
        combo.activated.emit(labels.index("AWS profile lab"))  # as a click on the entry
        qtbot.waitUntil(lambda: went == ["aws-lab:"])
        assert asked == ["AWS profile lab"]
        from ferry.credentials.sites import SiteStore

        site = SiteStore().get("aws-lab")
        assert site is not None and site.address == "s3://lab-bucket/run42" and dict(site.options) == {"profile": "lab"}
        # Chosen again: the saved site is reused, nothing asked.
        w.open_aws_profile("lab")
        assert went == ["aws-lab:", "aws-lab:"] and asked == ["AWS profile lab"]
    finally:
        w.shutdown()


def test_globus_collections_of_a_logged_in_user_are_listed_from_the_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against the local fake of the Globus services (``GLOBUS_SDK_SERVICE_URL_*``), as a client
    credential, which counts as logged in."""
    from ferry.credentials import globus_auth
    from globus.fake_globus import FakeGlobusServer

    with FakeGlobusServer() as server:
        for k, v in server.env(client=True).items():
            monkeypatch.setenv(k, v)
        globus_auth.reset_shared_auth()
        try:
            mine = server.fake.add_collection(name="Ada's laptop", owner_string="researcher@example.org")
            other = server.fake.add_collection(name="Beamline archive")
            places = globus_collections()
        finally:
            globus_auth.reset_shared_auth()
    by_address = {p.address: p for p in places}
    assert set(by_address) == {f"globus://{mine}/~/", f"globus://{other}/~/"}  # each once
    assert by_address[f"globus://{mine}/~/"].label == "Ada's laptop"
    assert all(p.group == "globus" for p in places)


def test_the_picker_shows_the_place_the_pane_is_in_and_never_one_it_has_left(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, tmp_path: Path
) -> None:
    from ferry.ui.sites_menu import Place
    from ui.helpers_ui import fill_memory

    data = tmp_path / "data"
    (data / "inner" / "deeper").mkdir(parents=True)
    fill_memory("picker", "/shared", 2)
    pane = window.active
    pane.extra_places = [
        Place("Data", str(data), "demo"),
        Place("Data, inner", str(data / "inner"), "demo"),
        Place("Remote store", "memory://picker/shared", "demo"),
    ]
    pane.reload_places()
    pane.navigate(str(data / "inner" / "deeper"))
    assert pane.site.currentText() == "Data, inner"  # the closest place that holds it
    pane.navigate(str(data))
    assert pane.site.currentText() == "Data"
    pane.navigate("memory://picker/shared")
    assert pane.site.currentText() == "Remote store"
    pane.navigate("memory://elsewhere/x")
    assert pane.site.currentIndex() == -1 and pane.site.placeholderText() == "Other location"
