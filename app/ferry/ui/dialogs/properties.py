"""Properties of one entry: size, times, kind, link target; checksums computed on demand."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QFormLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from ferry.backends.base import Backend, Entry
from ferry.core.errors import describe
from ferry.core.units import format_size
from ferry.ui.listing_model import display_name, kind_text, mtime_text

RunAsync = Callable[
    [Callable[[], dict[str, str]], Callable[[dict[str, str]], object], Callable[[BaseException], object]], object
]


class PropertiesDialog(QDialog):
    def __init__(
        self, entry: Entry, where: str, backend: Backend, run_async: RunAsync, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Properties of {display_name(entry.name)}")
        self.setObjectName("propertiesDialog")
        self.entry, self.backend, self.run_async = entry, backend, run_async
        lay = QVBoxLayout(self)
        form = QFormLayout()

        def label(text: str) -> QLabel:
            w = QLabel(text)
            w.setTextFormat(Qt.TextFormat.PlainText)
            w.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            return w

        form.addRow("Name:", label(display_name(entry.name)))
        form.addRow("Where:", label(where))
        form.addRow("Kind:", label(kind_text(entry)))
        size = "unknown" if entry.size is None else f"{format_size(entry.size)} ({entry.size:,} bytes)"
        form.addRow("Size:", label("" if entry.is_dir else size))
        form.addRow("Modified:", label(mtime_text(entry.mtime)))
        if entry.link_target:
            form.addRow("Link to:", label(entry.link_target))
        if entry.mode is not None:
            form.addRow("Permissions:", label(oct(entry.mode & 0o7777)))
        for k, v in entry.meta.items():
            form.addRow(f"{k}:", label(v))
        for algo, h in entry.hashes.items():
            form.addRow(f"{algo}:", label(h))
        lay.addLayout(form)
        self.hashes = label("")
        self.hashes.setObjectName("hashes")
        self.hashes.setWordWrap(True)
        lay.addWidget(self.hashes)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.hash_btn = QPushButton("Compute checksums")
        self.hash_btn.setObjectName("hashButton")
        algos = backend.capabilities.hashes
        self.hash_btn.setEnabled(entry.is_file and bool(algos))
        self.hash_btn.setToolTip(
            f"Compute {', '.join(algos)} ("
            + ("the server keeps them" if not backend.capabilities.slow_hash else "reads the whole file")
            + ")"
            if algos
            else "This site cannot compute checksums"
        )
        self.hash_btn.clicked.connect(self.compute)
        buttons.addButton(self.hash_btn, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)

    def compute(self) -> None:
        self.hash_btn.setEnabled(False)
        self.hashes.setText("Computing…")
        backend, path, algos = self.backend, self.entry.path, self.backend.capabilities.hashes

        def work() -> dict[str, str]:
            return {a: backend.hash(path, a) for a in algos}

        self.run_async(work, self._done, lambda exc: self.hashes.setText(describe(exc)))

    def _done(self, found: dict[str, str]) -> None:
        self.hashes.setText("\n".join(f"{a}: {h}" for a, h in found.items()))
