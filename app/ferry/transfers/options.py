"""What the user chose for a job: verification, conflict policy, limits and timing."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from ferry.core.errors import UsageError
from ferry.core.hashing import VERIFY_MODES

CONFLICT_POLICIES = ("ask", "skip", "overwrite", "newer", "different", "rename", "resume")

CONFLICT_HELP = {
    "ask": "ask for each existing file (on a terminal; elsewhere the file fails and says so)",
    "skip": "keep the existing file",
    "overwrite": "replace the existing file",
    "newer": "replace only if the source is newer",
    "different": "replace if size or modification time differ",
    "rename": "keep both: the copy gets a name like 'data (1).csv'",
    "resume": "continue a shorter existing file from where it ends (verified as a whole)",
}


@dataclass
class JobOptions:
    recursive: bool = False
    verify: str = "sha256"
    on_conflict: str = "ask"
    bwlimit: int | None = None  # bytes/s for this job (the runner may add a global one)
    window: str | None = None  # "HH:MM-HH:MM", local time
    start_at: float | None = None  # epoch seconds
    preserve_mtime: bool = True
    label: str = ""

    def __post_init__(self) -> None:
        if self.verify not in VERIFY_MODES:
            raise UsageError(f"Unknown verification '{self.verify}' (choose from {', '.join(VERIFY_MODES)})")
        if self.on_conflict not in CONFLICT_POLICIES:
            raise UsageError(
                f"Unknown conflict policy '{self.on_conflict}' (choose from {', '.join(CONFLICT_POLICIES)})"
            )

    @property
    def hash_algo(self) -> str | None:
        return self.verify if self.verify in ("sha256", "blake3") else None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> JobOptions:
        data: dict[str, Any] = json.loads(text)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
