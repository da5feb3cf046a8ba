"""The window's site manager keeps an SSH or S3 site's Globus collection and path mapping (issue 22):
shown when the site is loaded, saved from the form, and never dropped by an edit of something else."""

from __future__ import annotations

from pathlib import Path

from ferry.credentials.sites import SiteStore
from ferry.ui.dialogs.site_manager import SiteManagerDialog

CID = "6c54cade-bde5-45c1-bdea-f4bd71dba2cc"


def test_sftp_site_keeps_its_globus_collection_through_an_edit(qtbot, ferry_home: Path) -> None:  # type: ignore[no-untyped-def]
    SiteStore().add(
        "cluster",
        "sftp://me@login.hpc.edu/home/me",
        {"identity_file": "~/.ssh/id_ed25519", "globus_collection": CID, "globus_path": "/home/me=/~/"},
    )
    dlg = SiteManagerDialog()
    qtbot.addWidget(dlg)
    dlg.list.setCurrentRow(0)
    assert (dlg.sftp_globus.text(), dlg.sftp_globus_path.text()) == (CID, "/home/me=/~/")
    dlg.jump.setText("bastion.hpc.edu")  # an edit of something else
    assert dlg.save(), dlg.message.text()
    site = SiteStore().get("cluster")
    assert site is not None
    assert dict(site.options) == {
        "identity_file": "~/.ssh/id_ed25519",
        "proxy_jump": "bastion.hpc.edu",
        "globus_collection": CID,
        "globus_path": "/home/me=/~/",
    }
    # A malformed mapping is one sentence in the dialog, nothing saved.
    dlg.sftp_globus_path.setText("/home/me")
    assert not dlg.save()
    assert "SITE_PATH=COLLECTION_PATH" in dlg.message.text()
    assert SiteStore().get("cluster") == site


def test_s3_site_form_saves_the_globus_collection(qtbot, ferry_home: Path) -> None:  # type: ignore[no-untyped-def]
    dlg = SiteManagerDialog()
    qtbot.addWidget(dlg)
    dlg.kind.setCurrentIndex(dlg.kind.findData("s3"))
    dlg.name.setText("store")
    dlg.bucket.setText("lab-archive")
    dlg.s3_globus.setText(CID)
    assert dlg.save(), dlg.message.text()
    site = SiteStore().get("store")
    assert site is not None and dict(site.options) == {"globus_collection": CID}
