"""The share framework that S3 and Globus plug into: the ledger of issued links and ``ferry share``.

The backends' own links are tested against real servers in ``tests/s3`` and ``tests/globus``;
here: links are recorded privately, listed with their expiry, refused where a site cannot share.
"""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ferry.backends.sharing import create_share, revoke_share
from ferry.core.errors import NotFound, Unsupported
from ferry.sharing import ledger
from ferry.sharing.types import Link, ShareRequest
from helpers import Ferry


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "data"
    monkeypatch.setenv("FERRY_DATA_DIR", str(d))
    return d


def _link(**kw: object) -> Link:
    defaults: dict[str, object] = {
        "kind": "download",
        "target": "s3://bucket/key",
        "url": "https://example.invalid/bucket/key?X-Amz-Signature=secret",
        "scheme": "s3",
        "expires": datetime.now(UTC) + timedelta(hours=2),
    }
    defaults.update(kw)
    return Link(**defaults)  # type: ignore[arg-type]


def test_ledger_round_trip_is_owner_only(data_dir: Path) -> None:
    link = _link(warnings=("temporary credentials",), extra={"curl": "curl -o key URL"})
    ledger.add(link)
    path = ledger.ledger_path()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # URLs in it are bearer secrets
    (again,) = ledger.links()
    assert again == link
    assert ledger.get(link.id) == link
    ledger.remove(link.id)
    assert ledger.links() == []
    with pytest.raises(NotFound):
        ledger.get(link.id)


def test_expired_links_are_hidden_and_forgotten(data_dir: Path) -> None:
    old = _link(expires=datetime.now(UTC) - timedelta(seconds=1))
    new = _link()
    grant = _link(kind="grant", expires=None, scheme="globus", revocable=True)
    for link in (old, new, grant):
        ledger.add(link)
    assert old.expired() and not new.expired() and not grant.expired()
    assert {link.id for link in ledger.links(include_expired=False)} == {new.id, grant.id}
    assert ledger.forget_expired() == 1
    assert {link.id for link in ledger.links()} == {new.id, grant.id}


def test_sites_that_cannot_share_say_so(data_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(Unsupported, match="cannot make share links"):
        create_share(str(tmp_path / "f"), ShareRequest())
    assert ledger.links() == []


def test_revoke_refuses_links_the_service_cannot_take_back(data_dir: Path) -> None:
    link = _link(revoke_note="rotate the access key that signed it")
    ledger.add(link)
    with pytest.raises(Unsupported, match="rotate the access key"):
        revoke_share(link.id)
    assert ledger.get(link.id) == link  # still listed: it still works until it expires


def test_cli_share_list_and_errors(ferry: Ferry, tmp_path: Path) -> None:
    r = ferry.ok("share", "list")
    assert "No links issued" in r.stdout
    r = ferry("share", str(tmp_path))
    assert r.returncode == 2
    assert "cannot make share links" in r.stderr
    r = ferry("share", "revoke")
    assert r.returncode == 2 and "ferry share revoke ID" in r.stderr
    r = ferry("share", "revoke", "nosuchid")
    assert r.returncode == 1 and "No issued link" in r.stderr
    r = ferry("share", "s3://b/k", "--max-size", "10M")
    assert r.returncode == 2 and "--upload" in r.stderr
    r = ferry("share", "s3://b/k", "--expires", "soon")
    assert r.returncode == 2 and "Malformed duration" in r.stderr


def test_cli_share_list_shows_expiry_and_the_revocation_caveat(ferry: Ferry, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRY_DATA_DIR", ferry.env["FERRY_DATA_DIR"])  # write where the command reads
    link = _link()
    ledger.add(link)
    ledger.add(_link(expires=datetime.now(UTC) - timedelta(minutes=1)))
    r = ferry.ok("share", "list")
    line = next(x for x in r.stdout.splitlines() if x.startswith(link.id))
    assert "download" in line and "s3://bucket/key" in line
    assert " in 1:59:" in line or " in 2:00:00" in line
    assert "cannot be revoked early" in r.stdout
    assert r.stdout.count("download") == 1  # the expired one is hidden...
    rows = json.loads(ferry.ok("share", "list", "--all", "--json").stdout)
    assert len(rows) == 2  # ...unless asked for
    assert {row["id"] for row in rows} >= {link.id}
    assert all(row["url"].startswith("https://") for row in rows)


def test_the_s3_revoke_note_reads_as_one_sentence_after_the_prefix() -> None:
    """QA (issue 20): the dialog said 'cannot be revoked early: S3 pre-signed links cannot be
    revoked early: …'. A link's revoke_note is a clause the callers put after that prefix."""
    from ferry.backends.s3.share import REVOKE_REASON

    assert "revoked" not in REVOKE_REASON and REVOKE_REASON[0].islower()
