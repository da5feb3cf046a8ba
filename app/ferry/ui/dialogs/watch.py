""" "Watch this folder": where new files go, which ones, when they count as complete, and
whether the sources are deleted after a checksum-verified copy (off unless ticked)."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)

from ferry.transfers.options import JobOptions
from ferry.transfers.watch import DEFAULT_SETTLE, WatchSpec


class WatchDialog(QDialog):
    def __init__(self, folder: str, dest: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("watchDialog")
        self.setWindowTitle("Watch this folder")
        self.folder = folder
        lay = QVBoxLayout(self)
        intro = QLabel(
            f"Ship each new file in\n{folder}\nas soon as it is complete. The watch runs until you stop it "
            "(Stop in the transfers panel) or quit Ferry; watching the same folder again continues it."
        )
        intro.setWordWrap(True)
        lay.addWidget(intro)
        form = QFormLayout()
        self.dest = QLineEdit(dest)
        self.dest.setObjectName("watchDest")
        self.dest.setToolTip("A folder on any site: a path, site:path or URL (created if missing)")
        form.addRow("Destination:", self.dest)
        self.pattern = QLineEdit("")
        self.pattern.setObjectName("watchPattern")
        self.pattern.setPlaceholderText("every file not starting with a dot")
        self.pattern.setToolTip("File name patterns separated by spaces, e.g. *.h5 *.nc")
        form.addRow("Pattern:", self.pattern)
        self.recursive = QCheckBox("Subfolders too")
        self.recursive.setObjectName("watchRecursive")
        form.addRow("", self.recursive)
        self.settle = QDoubleSpinBox()
        self.settle.setObjectName("watchSettle")
        self.settle.setRange(0.1, 86400.0)
        self.settle.setDecimals(1)
        self.settle.setSuffix(" s")
        self.settle.setValue(DEFAULT_SETTLE)
        self.settle.setToolTip(
            "A file counts as complete when it has not changed for this long (sooner when its writer "
            "closes it or renames it into place, on Linux)"
        )
        form.addRow("Settle time:", self.settle)
        lay.addLayout(form)
        self.delete = QCheckBox("Delete each source file after its copy is verified by checksum")
        self.delete.setObjectName("watchDelete")
        self.delete.setChecked(False)
        self.delete.setToolTip(
            "Only files whose copy matched by checksum are deleted, and only if they have not changed "
            "since; files verified by size only, failed or skipped files are kept"
        )
        lay.addWidget(self.delete)
        self.error = QLabel("")
        self.error.setObjectName("watchError")
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #c62828")
        lay.addWidget(self.error)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Watch")
        buttons.accepted.connect(self._accept)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)

    def _accept(self) -> None:
        if not self.dest.text().strip():
            self.error.setText("Choose where the files go.")
            return
        self.accept()

    def spec(self, options: JobOptions) -> WatchSpec:
        """The watch the form describes, with the window's transfer options (verification, conflicts)."""
        return WatchSpec(
            source=self.folder,
            dest=self.dest.text().strip(),
            recursive=self.recursive.isChecked(),
            patterns=tuple(self.pattern.text().split()),
            settle=float(self.settle.value()),
            delete_after_verify=self.delete.isChecked(),
            options=options,
        )
