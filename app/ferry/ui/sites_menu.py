"""What a pane's site picker offers (no Qt): local places, saved sites, ssh_config hosts, and,
found on a worker thread after start-up (:func:`slow_places`), AWS profiles and the Globus
collections of a logged-in user."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ferry.core.errors import FerryError

log = logging.getLogger(__name__)
AWS_PROFILE_PREFIX = "aws-profile:"  # not an address: choosing one asks for a bucket (see the pane)


@dataclass(frozen=True)
class Place:
    label: str
    address: str
    group: str  # demo, local, site, ssh, aws, globus
    tooltip: str = ""


def local_places() -> list[Place]:
    home = Path.home()
    out = [Place("This computer (home)", str(home), "local", str(home))]
    for name in ("Desktop", "Documents", "Downloads"):
        p = home / name
        if p.is_dir():
            out.append(Place(name, str(p), "local", str(p)))
    out.append(Place("Whole disk (/)", os.sep, "local", os.sep))
    return out


def saved_sites() -> list[Place]:
    from ferry.credentials.sites import SiteStore

    try:
        sites = SiteStore().list()
    except FerryError:
        return []
    return [
        Place(s.name, f"{s.name}:", "site", s.address + (f" — {s.description}" if s.description else "")) for s in sites
    ]


def ssh_hosts() -> list[str]:
    """Literal ``Host`` names from ssh_config (wildcard patterns are not places to go)."""
    from ferry.credentials.ssh_config import config_paths

    hosts: list[str] = []
    for path in config_paths():
        if not path.exists():
            continue
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            parts = line.strip().split()
            if len(parts) >= 2 and parts[0].lower() == "host":
                hosts += [h for h in parts[1:] if not any(c in h for c in "*?!") and h not in hosts]
        break  # as ssh does: the first config file found is the user's
    return hosts


def all_places() -> list[Place]:
    places = local_places() + saved_sites()
    taken = {p.label for p in places}
    places += [Place(h, f"{h}:", "ssh", f"ssh_config host {h}") for h in ssh_hosts() if h not in taken]
    return places


def aws_profiles() -> list[Place]:
    """Profiles of ``~/.aws/config`` and ``~/.aws/credentials`` (or ``AWS_CONFIG_FILE`` /
    ``AWS_SHARED_CREDENTIALS_FILE``). botocore is imported here, lazily: it costs a few tenths of
    a second, which start-up must not pay on the UI thread."""
    try:
        import botocore.session

        names = list(botocore.session.Session().available_profiles)
    except Exception as exc:  # a broken config must not break the picker
        log.info("AWS profiles not read: %s", exc)
        return []
    return [
        Place(f"AWS profile {n}", AWS_PROFILE_PREFIX + n, "aws", f"S3 with the AWS profile '{n}'")
        for n in sorted(set(names))
    ]


def globus_collections(limit: int = 25) -> list[Place]:
    """The user's recently used and own Globus collections; nothing (and no network, no login
    prompt) unless already logged in."""
    try:
        from ferry.credentials.globus_auth import shared_auth

        auth = shared_auth()
        if not auth.logged_in():
            return []
        tc = auth.transfer_client()
        out: list[Place] = []
        seen: set[str] = set()
        for scope, why in (("recently-used", "used recently"), ("my-endpoints", "yours")):
            for d in tc.endpoint_search(filter_scope=scope, limit=limit).get("DATA") or []:
                cid = str(d.get("id") or "")
                if not cid or cid in seen:
                    continue
                seen.add(cid)
                name = str(d.get("display_name") or d.get("canonical_name") or cid)
                out.append(Place(name, f"globus://{cid}/~/", "globus", f"Globus collection {cid} ({why})"))
        return out
    except Exception as exc:  # offline, expired login: the picker simply has no Globus entries
        log.info("Globus collections not listed: %s", exc)
        return []


def slow_places() -> list[Place]:
    """The entries that need a library import or the network: call on a worker thread."""
    return aws_profiles() + globus_collections()
