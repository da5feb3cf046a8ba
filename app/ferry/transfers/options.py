"""What the user chose for a job: verification, conflict policy, move, limits and timing."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from typing import Any

from ferry.core.errors import ConflictUnanswered as ConflictUnanswered  # defined in core: backends raise it too
from ferry.core.errors import UsageError
from ferry.core.hashing import VERIFY_MODES, VerifyMode


class ConflictPolicy(StrEnum):
    """What to do with a file already at the destination (the same strings in the queue)."""

    ASK = "ask"
    SKIP = "skip"
    OVERWRITE = "overwrite"
    NEWER = "newer"
    DIFFERENT = "different"
    RENAME = "rename"
    RESUME = "resume"


CONFLICT_POLICIES = tuple(p.value for p in ConflictPolicy)

CONFLICT_HELP = {
    "ask": "files already there with the same size and modification time are skipped as identical; "
    "for the others ask (on a terminal; elsewhere they fail, with one line saying how many)",
    "skip": "keep the existing file",
    "overwrite": "replace the existing file",
    "newer": "replace only if the source is newer",
    "different": "replace if size or modification time differ",
    "rename": "keep both: the copy gets a name like 'data (1).csv'",
    "resume": "continue a shorter existing file from where it ends (verified as a whole)",
}

# The answer a person gave "for all remaining conflicts" of one job, kept with that job (the
# queue's job_values), so it survives a restart of the job and never reaches another job.
CONFLICT_ANSWER_KEY = "conflict_answer"

# What the person chooses from when ask meets a file that differs (said once per run, not per file).
CHOOSE_POLICY_HINT = "--on-conflict skip|overwrite|newer|different|rename"


class Route(StrEnum):
    """How a job's bytes travel between its two sites (``--route``; the same strings in the queue).

    ``auto``: site to site when one of the sites offers it for the pair (a service or the store
    moves the bytes: Globus, S3 server-side copy), else through Ferry. ``direct``: site to site or
    not at all. ``relay``: always through Ferry (it reads and writes every byte). A job records the
    route it took (``direct`` or ``relay``), and why it relayed where a direct route was possible.
    """

    AUTO = "auto"
    DIRECT = "direct"
    RELAY = "relay"


ROUTES = tuple(r.value for r in Route)

ROUTE_HELP = (
    "how the bytes travel: direct (site to site: the store or service copies them, e.g. S3 server-side copy "
    "within one endpoint, Globus between collections; an error if that is not possible), relay (through "
    "this computer), auto (direct where possible, else relay, saying why; the default)"
)


_UNVERIFIED_MOVE = {
    "size": "--verify size compares sizes only",
    "none": "--verify none checks nothing",
}


@dataclass
class JobOptions:
    recursive: bool = False
    # Given as plain strings or enum members; a VerifyMode / ConflictPolicy after __post_init__.
    verify: str = VerifyMode.SHA256
    on_conflict: str = ConflictPolicy.ASK
    bwlimit: int | None = None  # bytes/s for this job (the runner may add a global one)
    window: str | None = None  # "HH:MM-HH:MM", local time
    start_at: float | None = None  # epoch seconds
    preserve_mtime: bool = True
    # Permission bits as they are at the source (cp -p); False: as a new file gets them at the
    # destination (the source's bits less the destination's umask, as cp without -p).
    preserve_permissions: bool = True
    xattrs: bool = False  # extended attributes and POSIX ACLs, between local disks
    label: str = ""
    # Move: each source is deleted by the engine once its copy reached checksum level and the
    # source still hashes the same; folders once everything in them was moved.
    move: bool = False
    # The person accepted that a move deletes sources whose copy was checked below checksum
    # level (by size, or by a service such as Globus), after comparing sizes once more.
    allow_unverified_move: bool = False
    # Seconds to keep retrying transient failures (network down, server restarting) from the
    # first of them; None: what the runner chooses (an hour for 'ferry queue run').
    patience: float | None = None
    route: str = Route.AUTO  # a Route after __post_init__

    def __post_init__(self) -> None:
        if self.route not in ROUTES:
            raise UsageError(f"Unknown route '{self.route}' (choose from {', '.join(ROUTES)})")
        self.route = Route(self.route)
        if self.verify not in VERIFY_MODES:
            raise UsageError(f"Unknown verification '{self.verify}' (choose from {', '.join(VERIFY_MODES)})")
        if self.on_conflict not in CONFLICT_POLICIES:
            raise UsageError(
                f"Unknown conflict policy '{self.on_conflict}' (choose from {', '.join(CONFLICT_POLICIES)})"
            )
        self.verify = VerifyMode(self.verify)
        self.on_conflict = ConflictPolicy(self.on_conflict)
        if self.move and self.verify in _UNVERIFIED_MOVE and not self.allow_unverified_move:
            raise UsageError(
                f"A move deletes each source only after a checksum check of its copy, and "
                f"{_UNVERIFIED_MOVE[self.verify]}: use --verify sha256 or blake3, or add --allow-unverified-move "
                "to delete sources after a size check"
            )

    @property
    def hash_algo(self) -> str | None:
        return VerifyMode(self.verify).hash_algo

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> JobOptions:
        data: dict[str, Any] = json.loads(text)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
