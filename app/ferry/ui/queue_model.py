"""The transfers panel's model: one row per job, its files as children loaded page by page.

It holds only what the last :class:`~ferry.ui.queue_service.QueueSnapshot` said (jobs, plus the
loaded pages of expanded jobs), applies each snapshot as row inserts/removals and one
``dataChanged`` per changed range, and never asks the store anything itself, so 100,000 queued
files cost the UI thread nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import (
    QAbstractItemModel,
    QModelIndex,
    QModelRoleData,
    QModelRoleDataSpan,
    QPersistentModelIndex,
    Qt,
)
from PySide6.QtGui import QBrush, QColor, QFontMetrics

from ferry.core.errors import Action, action_for_kind
from ferry.core.hashing import VERIFY_MODES, VerifyMode
from ferry.core.outcomes import Level, OutcomeCounts, SkipReason, describe_counts
from ferry.core.units import format_duration, format_rate, format_size
from ferry.ui.queue_service import FileRow, JobRow, QueueSnapshot

Index = QModelIndex | QPersistentModelIndex
_ROOT = QModelIndex()  # the invisible root, as a default argument
COLUMNS = ("Transfer", "State", "Progress", "Bytes", "Files", "Speed", "ETA", "Verification")
TITLE, STATE, PROGRESS, BYTES, FILES, SPEED, ETA, VERIFY = range(len(COLUMNS))
JobRole = Qt.ItemDataRole.UserRole + 10
FileRole = Qt.ItemDataRole.UserRole + 11
FractionRole = Qt.ItemDataRole.UserRole + 12
PAGE = 500

FILTERS: dict[str, Callable[[JobRow], bool]] = {
    "all": lambda j: True,
    "active": lambda j: j.state == "running",
    "queued": lambda j: j.state in ("queued", "paused"),
    "failed": lambda j: j.state == "failed" or j.files_failed > 0,
    "done": lambda j: j.state in ("done", "cancelled"),
}

# An unfinished job has checked nothing yet: its row says what it will check, never "checked".
_WILL_VERIFY = {
    "sha256": "will check sha256",
    "blake3": "will check blake3",
    "size": "will check sizes",
    "none": "no check",
}


def gui_message(job_id: int, message: str | None) -> str | None:
    """The engine's job messages name CLI commands; in the window the buttons do that."""
    if not message:
        return message
    for cmd, button in ((f"'ferry queue retry {job_id}'", "Retry"),
                        ("'ferry queue resume' (or Resume in the window)", "Resume"),  # the pause line
                        ("'ferry queue resume'", "Resume"),
                        ("'ferry queue run'", "Resume")):  # fmt: skip
        message = message.replace(cmd, button)
    return message


def watch_text(j: JobRow, col: int) -> str:
    """A folder watch is a long-lived job: the counters lead its title (the paths are in the
    tooltip) and its state names the folder, so both fit a 1280-pixel window."""
    w = j.watch
    assert w is not None
    if col == STATE:
        live = w.state in ("starting", "watching", "draining") and j.state in ("queued", "running")
        state = w.state if live else j.state
        msg = gui_message(j.id, j.message)
        if msg and j.state in ("failed", "paused"):
            return f"{state}: {msg}"
        folder = j.sources[0].rstrip("/").rsplit("/", 1)[-1] if j.sources else ""
        return f"{state} {folder}/" if live and folder else state
    return (
        f"seen {w.seen:,} · shipped {w.shipped:,} · verified {w.verified:,} · deleted {w.deleted:,} · "
        f"failed {w.failed:,}" + (f" ({w.pending:,} settling)" if w.pending else "")
    )


_FIX_WORDS = {
    Action.TRUST_HOST_KEY: "Trust key…",
    Action.LOGIN: "Log in again",
    Action.FREE_SPACE: "Free space, then retry",
    Action.CHECK_PERMISSIONS: "Check permissions, then retry",
    Action.CONSENT: "Give consent…",
    Action.CHOOSE_POLICY: "Choose what to do…",
    Action.RETRY: "Retry",
}


def fix_for(action: Action | None, failed: bool = True) -> tuple[Action, str] | None:
    """The button for a stopped job's suggested action (a value the engine stored, never its words)."""
    if action is None or action is Action.NONE:
        return (Action.RETRY, _FIX_WORDS[Action.RETRY]) if failed else None
    return action, _FIX_WORDS.get(action, "Retry")


# ---- what a finished job did, from its typed outcomes (never from its message) ----

_COPIED_WORDS = {
    Level.CHECKSUM: "verified",
    Level.SERVICE: "verified by the service",
    Level.SIZE: "size-checked",
    Level.NONE: "copied unchecked",
}
_SKIPPED_WORDS = {
    SkipReason.IDENTICAL: "identical",
    SkipReason.POLICY: "kept existing",
    SkipReason.UNSAFE_NAME: "unsafe name",
    SkipReason.UNREPRESENTABLE: "name not possible there",
    SkipReason.UNSUPPORTED_TYPE: "not a file",
}


def outcome_words(c: OutcomeCounts) -> str:
    """A finished job in a few words: ``25 verified``, ``25 skipped (identical)``, ``3 failed``.
    "verified" only for files whose checksum (or the transfer service's) matched."""
    parts = [f"{c.copied[lv]:,} {w}" for lv, w in _COPIED_WORDS.items() if c.copied.get(lv)]
    parts += [f"{n:,} skipped ({_SKIPPED_WORDS.get(r, r.value)})" for r, n in sorted(c.skipped.items()) if n]
    for n, what in ((c.failed_total, "failed"), (c.cancelled, "cancelled"), (c.open, "not finished")):
        if n:
            parts.append(f"{n:,} {what}")
    return ", ".join(parts)


def took(j: JobRow) -> float | None:
    """Seconds from the job's first start to its end (wall time, pauses included)."""
    if j.finished is None or j.started is None or j.finished < j.started:
        return None
    return j.finished - j.started


def average_speed(j: JobRow) -> float | None:
    """Bytes copied (not skipped) per second of :func:`took`."""
    seconds = took(j)
    return j.bytes_copied / seconds if seconds and j.bytes_copied else None


def advice(kind: str | None) -> str:
    """What to do about a failure of this kind (the engine's action for it, in the window's words)."""
    action = action_for_kind(kind)
    return "" if action is Action.NONE else _FIX_WORDS.get(action, "Retry").rstrip("…").lower()


def problem_text(j: JobRow) -> str:
    """The first failed file's cause and what to do, shown at once (the job may still be running)."""
    if not j.problem:
        return ""
    what = advice(j.problem_kind)
    return f"{j.problem}" + (f" ({what})" if what else "")


# ---- a job row's text, one function per column ----


def _job_title(j: JobRow) -> str:
    if j.watch is not None:  # the counters first: the paths are in the tooltip
        return f"#{j.id}  {watch_text(j, TITLE)}"
    return f"#{j.id}  {_route_prefix(j)}{j.title}"


def _route_prefix(j: JobRow) -> str:
    """``direct: `` for a job whose bytes go site to site (the store or a service moves them)."""
    return "direct: " if j.route == "direct" else ""


def _job_state(j: JobRow) -> str:
    if j.watch is not None:
        return watch_text(j, STATE)
    problem = problem_text(j)
    if j.outcomes is not None:  # finished: what happened, from the typed outcomes
        words = outcome_words(j.outcomes)
        if words:
            return f"{j.state}: {words}" + (f" — {problem}" if problem else "")
    state = j.state + (" (planning)" if not j.planned and j.state == "running" else "")
    if problem and j.state in ("running", "queued"):  # a file failed; the others go on
        return f"{state} · {j.files_failed:,} failed: {problem}"
    msg = gui_message(j.id, j.message)
    return f"{state}: {msg}" if msg and j.state in ("failed", "paused") else state


def _job_speed(j: JobRow) -> str:
    if j.state == "running":
        return format_rate(j.speed)
    avg = average_speed(j) if j.outcomes is not None else None
    return f"avg {format_rate(avg)}" if avg else ""


def _job_eta(j: JobRow) -> str:
    if j.outcomes is not None:
        seconds = took(j)
        return f"took {format_duration(seconds)}" if seconds is not None else ""
    return format_duration(j.eta) if j.eta is not None else ""


def _job_files(j: JobRow) -> str:
    failed = f", {j.files_failed:,} failed" if j.files_failed else ""
    return f"{j.files_done:,} / {j.files_total:,}{'' if j.planned else '+'}{failed}"


def _job_verification(j: JobRow) -> str:
    if j.outcomes is None:  # not finished: what the job will check
        return _WILL_VERIFY.get(j.verify, j.verify)
    # Finished: what was reached, from the typed outcomes; which modes hash is the engine's to say.
    algo = VerifyMode(j.verify).hash_algo if j.verify in VERIFY_MODES else None
    return describe_counts(j.outcomes, algo)


_JOB_TEXT: dict[int, Callable[[JobRow], str]] = {
    TITLE: _job_title,
    STATE: _job_state,
    PROGRESS: lambda j: f"{j.fraction * 100:.0f}%",
    BYTES: lambda j: f"{format_size(j.bytes_done)} / {format_size(j.bytes_total)}",
    FILES: _job_files,
    SPEED: _job_speed,
    ETA: _job_eta,
    VERIFY: _job_verification,
}


def _finished_lines(j: JobRow) -> list[str]:
    if j.outcomes is None:
        return []
    algo = VerifyMode(j.verify).hash_algo if j.verify in VERIFY_MODES else None
    lines = [describe_counts(j.outcomes, algo)]
    seconds, avg = took(j), average_speed(j)
    if seconds is not None:
        lines.append(f"took {format_duration(seconds)}" + (f", {format_rate(avg)} on average" if avg else ""))
    return lines


def _state_tooltip(j: JobRow) -> str | None:
    lines = _finished_lines(j)
    if j.problem:
        lines.append(f"First failure: {j.problem}")
        what = advice(j.problem_kind)
        if what:
            lines.append(f"What to do: {what}")
    if j.message:
        lines.append(str(gui_message(j.id, j.message)))
    return "\n".join(lines) or None


def elide_path(text: str, metrics: QFontMetrics, width: int) -> str:
    """``text`` in ``width`` pixels, elided in the middle, keeping its last part (a file or
    folder name) whole when that fits: ``/home/me/…/run42.h5``, ``sftp://cluster/…/incoming/``."""
    if metrics.horizontalAdvance(text) <= width:
        return text
    cut = text.rstrip("/").rfind("/")
    tail = text[cut + 1 :] if cut > 0 else ""
    if not tail or metrics.horizontalAdvance("…/" + tail) >= width:
        return metrics.elidedText(text, Qt.TextElideMode.ElideMiddle, width)
    head = text[: cut + 1]
    lo, hi = 0, len(head)
    while lo < hi:  # the longest beginning that still fits
        mid = (lo + hi + 1) // 2
        if metrics.horizontalAdvance(head[:mid] + "…/" + tail) <= width:
            lo = mid
        else:
            hi = mid - 1
    return head[:lo] + "…/" + tail


def _least(text: str, metrics: QFontMetrics) -> int:
    """The width of ``…/name``: the least :func:`elide_path` needs to keep the name whole."""
    cut = text.rstrip("/").rfind("/")
    return metrics.horizontalAdvance("…/" + text[cut + 1 :]) + 1


def elided_title(j: JobRow, metrics: QFontMetrics, width: int) -> str:
    """The Transfer cell in ``width`` pixels: source and destination each elided in the middle
    (their beginnings and their ends, the file and folder names, stay), the short one whole."""
    full = _job_title(j)
    if j.watch is not None or metrics.horizontalAdvance(full) <= width:
        return full
    prefix, arrow = f"#{j.id}  {_route_prefix(j)}", " → "
    sources, dest = j.shown_sources or j.sources, j.shown_dest or j.dest
    first = sources[0] if sources else "?"
    src = first + (f" (+{len(sources) - 1})" if len(sources) > 1 else "")
    room = max(0, width - metrics.horizontalAdvance(prefix + arrow))
    need_src, need_dst = metrics.horizontalAdvance(src), metrics.horizontalAdvance(dest)
    least_src, least_dst = min(need_src, _least(src, metrics)), min(need_dst, _least(dest, metrics))
    if least_src + least_dst <= room:  # both names whole; the rest of the room shared
        spare = room - least_src - least_dst
        src_room = least_src + min(need_src - least_src, max(spare // 2, spare - (need_dst - least_dst)))
    elif least_src <= room * 3 // 4:  # the file's name whole, the destination elided
        src_room = least_src
    else:
        src_room = need_src if need_src <= room // 2 else max(room // 2, room - need_dst)
    dst_room = room - min(src_room, need_src)
    return prefix + elide_path(src, metrics, src_room) + arrow + elide_path(dest, metrics, dst_room)


def _job_tooltip(j: JobRow, col: int) -> str | None:
    if col == STATE:
        return _state_tooltip(j)
    if col == SPEED:
        if j.route == "direct":
            return DIRECT_SPEED_TIP
        return f"How it moves: {j.tuning}" if j.tuning else None
    if col == TITLE:
        lines = [*j.sources, f"→ {j.dest}"]
        if j.watch is not None:
            lines.insert(0, "Folder watch: " + watch_text(j, TITLE))
        route = route_text(j)
        if route:
            lines.append(route)
        return "\n".join(lines)
    if col in (BYTES, FILES, VERIFY) and j.watch is None:
        # Cut short in a narrow column ("1,500 / …", "7 copied: 7 s…"): read whole on hover.
        return _JOB_TEXT[col](j)
    return None


DIRECT_SPEED_TIP = "Files at once: the direct route's own (the far end moves the files; --parallel does not apply)"


def route_text(j: JobRow) -> str:
    """The Transfer cell's tooltip line on how the bytes travel, from the route the engine
    recorded: direct (site to site), or relayed with the one sentence saying why not direct."""
    if j.route == "direct":
        return "Route: direct (site to site: the bytes do not pass through this computer)"
    if j.route == "relay" and j.route_reason:
        return f"Route: through this computer ({j.route_reason})"
    return ""


class QueueModel(QAbstractItemModel):
    def __init__(self, parent: object | None = None) -> None:
        super().__init__(parent)  # type: ignore[arg-type]
        self._jobs: list[JobRow] = []
        self._all: list[JobRow] = []
        self._files: dict[int, list[FileRow]] = {}
        self._filter = "all"
        self.wanted: dict[int, int] = {}  # job id → files the view asked for (read by the poller)

    # ---- structure ----
    def index(self, row: int, column: int, parent: Index = _ROOT) -> QModelIndex:
        if not 0 <= column < len(COLUMNS):
            return QModelIndex()
        if not parent.isValid():
            if 0 <= row < len(self._jobs):
                return self.createIndex(row, column, 0)
            return QModelIndex()
        if parent.internalId() != 0:
            return QModelIndex()
        job = self._jobs[parent.row()]
        if 0 <= row < len(self._files.get(job.id, ())):
            return self.createIndex(row, column, job.id)
        return QModelIndex()

    def parent(self, child: Index = _ROOT) -> QModelIndex:  # type: ignore[override]
        if not child.isValid() or child.internalId() == 0:
            return QModelIndex()
        row = self._row_of(int(child.internalId()))
        return QModelIndex() if row is None else self.createIndex(row, 0, 0)

    def _row_of(self, job_id: int) -> int | None:
        for i, j in enumerate(self._jobs):
            if j.id == job_id:
                return i
        return None

    def rowCount(self, parent: Index = _ROOT) -> int:
        if not parent.isValid():
            return len(self._jobs)
        if parent.internalId() != 0 or parent.column() != 0:
            return 0
        return len(self._files.get(self._jobs[parent.row()].id, ()))

    def columnCount(self, parent: Index = _ROOT) -> int:
        return len(COLUMNS)

    def hasChildren(self, parent: Index = _ROOT) -> bool:
        if not parent.isValid():
            return bool(self._jobs)
        if parent.internalId() != 0 or parent.column() != 0:
            return False
        return self._jobs[parent.row()].files_total > 0

    def canFetchMore(self, parent: Index) -> bool:
        if not parent.isValid() or parent.internalId() != 0:
            return False
        job = self._jobs[parent.row()]
        return len(self._files.get(job.id, ())) < job.files_total and self.wanted.get(job.id, 0) <= len(
            self._files.get(job.id, ())
        )

    def fetchMore(self, parent: Index) -> None:
        """Ask the poller for the next page of this job's files (they arrive with the next read)."""
        if not parent.isValid() or parent.internalId() != 0:
            return
        job = self._jobs[parent.row()]
        self.wanted[job.id] = len(self._files.get(job.id, ())) + PAGE
        if self.fetch_requested is not None:
            self.fetch_requested()

    fetch_requested: Callable[[], object] | None = None

    def collapse(self, job_id: int) -> None:
        """The view collapsed a job: stop reading its files."""
        self.wanted.pop(job_id, None)
        row = self._row_of(job_id)
        files = self._files.get(job_id)
        if row is not None and files:
            self.beginRemoveRows(self.createIndex(row, 0, 0), 0, len(files) - 1)
            self._files[job_id] = []
            self.endRemoveRows()

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section] if 0 <= section < len(COLUMNS) else None
        return None

    def flags(self, index: Index) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        return Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable

    # ---- data ----
    def job(self, index: Index) -> JobRow | None:
        if not index.isValid():
            return None
        if index.internalId() == 0:
            return self._jobs[index.row()]
        row = self._row_of(int(index.internalId()))
        return None if row is None else self._jobs[row]

    def jobs(self) -> list[JobRow]:
        return list(self._jobs)

    def all_jobs(self) -> list[JobRow]:
        return list(self._all)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid():
            return None
        if index.internalId() == 0:
            if index.row() >= len(self._jobs):
                return None
            return self._job_data(self._jobs[index.row()], index.column(), role)
        files = self._files.get(int(index.internalId()), [])
        if index.row() >= len(files):
            return None
        return self._file_data(files[index.row()], index.column(), role)

    def multiData(self, index: Index, roleDataSpan: QModelRoleDataSpan | QModelRoleData, /) -> None:
        """All roles of one cell in one call. A view asks ~7 roles per cell while painting; each
        separate data() call is a trip from C++ into Python that must take the GIL (and wait for
        it while workers run), so answering them together keeps repaints short."""
        cells = [roleDataSpan] if isinstance(roleDataSpan, QModelRoleData) else roleDataSpan
        for k in range(len(cells) if isinstance(cells, list) else cells.size()):
            rd = cells[k]  # type: ignore[index]  # the span is indexable at run time; the stubs say not
            value = self.data(index, rd.role())
            if value is None:
                rd.clearData()
            else:
                rd.setData(value)

    def _job_data(self, j: JobRow, col: int, role: int) -> object:
        if role == Qt.ItemDataRole.DisplayRole:
            text = _JOB_TEXT.get(col)
            return None if text is None else text(j)
        if role == Qt.ItemDataRole.ToolTipRole:
            return _job_tooltip(j, col)
        if role == Qt.ItemDataRole.ForegroundRole and (j.state == "failed" or (col == FILES and j.files_failed)):
            return QBrush(QColor("#c62828"))
        if role == FractionRole:
            return j.fraction
        if role == JobRole:
            return j
        return None

    def _file_data(self, f: FileRow, col: int, role: int) -> object:
        if role == Qt.ItemDataRole.DisplayRole:
            if col == TITLE:
                return f.rel
            if col == STATE:
                return f"{f.state}: {f.error}" if f.error and f.state in ("failed", "skipped") else f.state
            if col == PROGRESS:
                return "100%" if f.state in ("done", "skipped") else ""
            if col == BYTES:
                return format_size(f.size) if f.size is not None else ""
            if col == VERIFY:
                return f.verified or ""
            return ""
        if role == Qt.ItemDataRole.ToolTipRole and f.error:
            return f.error
        if role == Qt.ItemDataRole.ForegroundRole and f.state == "failed":
            return QBrush(QColor("#c62828"))
        if role == FractionRole:
            return 1.0 if f.state in ("done", "skipped") else 0.0
        if role == FileRole:
            return f
        return None

    # ---- updates ----
    def set_filter(self, name: str) -> None:
        self._filter = name if name in FILTERS else "all"
        self.apply(QueueSnapshot(self._all, {}), keep_files=True)

    def apply(self, snap: QueueSnapshot, keep_files: bool = False) -> None:
        self._all = snap.jobs
        keep = FILTERS[self._filter]
        new = [j for j in snap.jobs if keep(j)]
        new_ids = {j.id for j in new}
        # Removals, bottom up.
        for row in range(len(self._jobs) - 1, -1, -1):
            if self._jobs[row].id not in new_ids:
                jid = self._jobs[row].id
                self.beginRemoveRows(QModelIndex(), row, row)
                del self._jobs[row]
                self._files.pop(jid, None)
                self.wanted.pop(jid, None)
                self.endRemoveRows()
        # Insertions in place, moves where the queue's order changed (both lists are in queue
        # order), then changed rows.
        old_ids = {j.id for j in self._jobs}
        for i, j in enumerate(new):
            if j.id not in old_ids:
                self.beginInsertRows(QModelIndex(), i, i)
                self._jobs.insert(i, j)
                self.endInsertRows()
                continue
            if self._jobs[i].id != j.id:  # moved up (rows above i already match): a move keeps selection
                r = next(k for k in range(i + 1, len(self._jobs)) if self._jobs[k].id == j.id)
                self.beginMoveRows(QModelIndex(), r, r, QModelIndex(), i)
                self._jobs.insert(i, self._jobs.pop(r))
                self.endMoveRows()
            if self._jobs[i] != j:
                self._jobs[i] = j
                self.dataChanged.emit(self.createIndex(i, 0, 0), self.createIndex(i, len(COLUMNS) - 1, 0))
        if not keep_files:
            for jid, files in snap.files.items():
                self._apply_files(jid, files)

    def _apply_files(self, job_id: int, files: list[FileRow]) -> None:
        row = self._row_of(job_id)
        if row is None or job_id not in self.wanted:
            return
        parent = self.createIndex(row, 0, 0)
        old = self._files.get(job_id, [])
        if len(files) < len(old):
            self.beginRemoveRows(parent, len(files), len(old) - 1)
            self._files[job_id] = old[: len(files)]
            self.endRemoveRows()
            old = self._files[job_id]
        n_old = len(old)
        changed = [i for i in range(n_old) if old[i] != files[i]]
        if len(files) > n_old:
            self.beginInsertRows(parent, n_old, len(files) - 1)
            self._files[job_id] = old + files[n_old:]
            self.endInsertRows()
        cur = self._files[job_id] = list(files)
        if changed:
            self.dataChanged.emit(
                self.createIndex(changed[0], 0, job_id), self.createIndex(changed[-1], len(COLUMNS) - 1, job_id)
            )
        del cur
