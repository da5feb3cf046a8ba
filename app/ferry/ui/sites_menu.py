"""What a pane's site picker offers: local places, saved sites, ssh_config hosts (no Qt)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ferry.core.errors import FerryError


@dataclass(frozen=True)
class Place:
    label: str
    address: str
    group: str  # local, site, ssh
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
