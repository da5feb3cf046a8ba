"""What the window remembers (QSettings): transfer defaults, geometry, panes, sorts, theme."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from PySide6.QtCore import QSettings

from ferry.core.errors import UsageError
from ferry.core.schedule import parse_start_at, parse_window
from ferry.core.units import parse_size
from ferry.transfers.options import CONFLICT_POLICIES, JobOptions
from ferry.transfers.scheduler import DEFAULT_PATIENCE, RunConfig
from ferry.transfers.tuning import AUTO_MAX

WHEN_DONE = ("nothing", "notify", "quit")


@dataclass
class TransferSettings:
    parallel: int = 0  # 0: auto (tuned while running, tuning.Tuner)
    bwlimit: str = ""  # "" or a size per second such as "50M"
    verify: str = "sha256"
    on_conflict: str = "ask"
    window: str = ""  # "HH:MM-HH:MM"
    start_at: str = ""  # "HH:MM" or an ISO date
    keep_awake: bool = True
    when_done: str = "notify"
    confirm_drops: bool = True

    def validate(self) -> None:
        """Raise UsageError with a sentence for the first bad field."""
        if not 0 <= self.parallel <= 64:
            raise UsageError("Parallel files must be Auto or between 1 and 64")
        if self.bwlimit:
            parse_size(self.bwlimit)
        if self.verify not in ("sha256", "blake3", "size", "none"):
            raise UsageError(f"Unknown verification '{self.verify}'")
        if self.on_conflict not in CONFLICT_POLICIES:
            raise UsageError(f"Unknown conflict policy '{self.on_conflict}'")
        if self.window:
            parse_window(self.window)
        if self.start_at:
            parse_start_at(self.start_at)
        if self.when_done not in WHEN_DONE:
            raise UsageError(f"Unknown action '{self.when_done}'")

    def job_options(self, *, recursive: bool = True, on_conflict: str | None = None) -> JobOptions:
        return JobOptions(
            recursive=recursive,
            verify=self.verify,
            on_conflict=on_conflict or self.on_conflict,
            window=str(parse_window(self.window)) if self.window else None,
            start_at=parse_start_at(self.start_at).timestamp() if self.start_at else None,
        )

    def run_config(self) -> RunConfig:
        # The window runs the queue overnight as 'ferry queue run' does: outages are waited out.
        return RunConfig(
            parallel=self.parallel or AUTO_MAX,
            auto_parallel=self.parallel == 0,
            bwlimit=parse_size(self.bwlimit) if self.bwlimit else None,
            patience=DEFAULT_PATIENCE,
        )


def settings() -> QSettings:
    return QSettings("Ferry", "Ferry")


def load_transfer_settings(s: QSettings | None = None) -> TransferSettings:
    s = s or settings()
    out = TransferSettings()
    for f in fields(TransferSettings):
        raw: Any = s.value(f"transfers/{f.name}", None)
        if raw is None:
            continue
        default = getattr(out, f.name)
        try:
            if isinstance(default, bool):
                value: Any = raw if isinstance(raw, bool) else str(raw).lower() in ("1", "true", "yes")
            elif isinstance(default, int):
                value = int(raw)
            else:
                value = str(raw)
        except (TypeError, ValueError):
            continue
        setattr(out, f.name, value)
    try:
        out.validate()
    except UsageError:
        return TransferSettings()  # a hand-edited bad value must not stop the window
    return out


def save_transfer_settings(ts: TransferSettings, s: QSettings | None = None) -> None:
    s = s or settings()
    for k, v in asdict(ts).items():
        s.setValue(f"transfers/{k}", v)
    s.sync()
