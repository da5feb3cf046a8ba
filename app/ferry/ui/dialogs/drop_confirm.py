""" "What will happen" before a drop or F5/F6 starts a transfer.

Folders are counted on a worker thread (see :mod:`ferry.ui.transfer_requests`): the dialog opens
at once saying "counting…", then shows how many files and bytes the folders hold (or "more than
N files" when a tree is bigger than the count's limit). Closing the dialog cancels the count.
"""

from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QDialog, QDialogButtonBox, QLabel, QVBoxLayout, QWidget

from ferry.core.cancel import CancelToken
from ferry.core.units import format_size

# What each conflict policy means, in the window's words (the command line's CONFLICT_HELP talks
# about terminals and flags; here a person answers in a dialog).
WINDOW_CONFLICT_WORDS = {
    "ask": "files already there with the same size and modification time are skipped as identical; "
    "for the others Ferry asks you what to do",
    "skip": "keep the existing file",
    "overwrite": "replace the existing file",
    "newer": "replace it only if the file being copied is newer",
    "different": "replace it if its size or modification time differ",
    "rename": "keep both: the copy gets a name like 'data (1).csv'",
    "resume": "continue a shorter existing file from where it ends (checked as a whole)",
}


def _files(n: int) -> str:
    return f"{n:,} file{'s' if n != 1 else ''}"


class DropConfirmDialog(QDialog):
    def __init__(
        self,
        *,
        files: int,
        folders: int,
        size: int,
        destination: str,
        policy: str,
        move: bool,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("dropConfirmDialog")
        self.verb = "Move" if move else "Copy"
        self.files, self.folders, self.bytes = files, folders, size
        self.destination, self.policy, self.moving = destination, policy, move
        self.cancel = CancelToken()  # the folder count stops when the dialog closes
        # None while counting (or when there are no folders to count): (files, bytes, capped)
        self.contents: tuple[int, int, bool] | None = None
        self.count_error = ""
        self.setWindowTitle(f"{self.verb} to {destination}")
        lay = QVBoxLayout(self)
        text = QLabel()
        text.setObjectName("summary")
        self.summary = text
        text.setWordWrap(True)
        lay.addWidget(text)
        self.dont_ask = QCheckBox("Don't ask again (Transfer settings turn it back on)")
        lay.addWidget(self.dont_ask)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        ok.setText(self.verb)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        lay.addWidget(self.buttons)
        self._render()

    @property
    def counting(self) -> bool:
        return bool(self.folders) and self.contents is None and not self.count_error

    def set_folder_contents(self, files: int, size: int, capped: bool) -> None:
        """What the folders hold, from the worker's count (ignored once the dialog closed)."""
        if not self.cancel.cancelled:
            self.contents = (files, size, capped)
            self._render()

    def set_count_failed(self, why: str) -> None:
        if not self.cancel.cancelled:
            self.count_error = why
            self._render()

    def _folders_text(self) -> str:
        n = f"{self.folders:,} folder{'s' if self.folders != 1 else ''}"
        if self.count_error:
            return f"{n} (could not count what is in them: {self.count_error})"
        if self.contents is None:
            return f"{n} (counting…)"
        files, size, capped = self.contents
        if capped:
            return f"{n} holding more than {_files(files)} (at least {format_size(size)}; counting stopped there)"
        return f"{n} holding {_files(files)} ({format_size(size)})"

    def _render(self) -> None:
        parts = []
        if self.files:
            parts.append(f"{_files(self.files)} ({format_size(self.bytes)})")
        if self.folders:
            parts.append(self._folders_text())
        what = " and ".join(parts) or "nothing"
        words = WINDOW_CONFLICT_WORDS.get(self.policy, "")
        self.summary.setText(
            f"{self.verb} {what}\nto {self.destination}\n\nWhen a file already exists: {self.policy}"
            + (f" ({words})" if words else "")
            + ("\n\nSources are deleted only after every file has been copied and verified." if self.moving else "")
        )

    def done(self, result: int) -> None:
        self.cancel.cancel()
        super().done(result)
