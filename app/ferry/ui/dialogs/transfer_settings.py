"""Transfer settings: parallel files, bandwidth, verification, conflicts, timing, when done."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from ferry.core.errors import UsageError
from ferry.transfers.options import CONFLICT_HELP, CONFLICT_POLICIES
from ferry.ui.settings import WHEN_DONE, TransferSettings

VERIFY = (
    ("sha256", "SHA-256 checksum (recommended)"),
    ("blake3", "BLAKE3 checksum (faster)"),
    ("size", "Sizes only"),
    ("none", "Off"),
)


class TransferSettingsDialog(QDialog):
    def __init__(self, current: TransferSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Transfer settings")
        self.setObjectName("transferSettingsDialog")
        self.result_settings: TransferSettings | None = None
        lay = QVBoxLayout(self)
        form = QFormLayout()
        self.parallel = QSpinBox()
        self.parallel.setRange(0, 64)
        self.parallel.setSpecialValueText("Auto")  # 0: tuned while running
        self.parallel.setValue(current.parallel)
        self.parallel.setToolTip(
            "How many files move at once. Auto starts at 4 and follows the link: more while throughput "
            "rises (a long link needs many), fewer when it falls. Each site's own connection limit still applies."
        )
        form.addRow("Parallel files:", self.parallel)
        self.bwlimit = QLineEdit(current.bwlimit)
        self.bwlimit.setPlaceholderText("unlimited, or e.g. 50M (bytes per second)")
        self.bwlimit.setToolTip("Bandwidth limit for all transfers together")
        form.addRow("Bandwidth limit:", self.bwlimit)
        self.verify = QComboBox()
        for key, text in VERIFY:
            self.verify.addItem(text, key)
        self.verify.setCurrentIndex(max(0, self.verify.findData(current.verify)))
        self.verify.setToolTip("How each file is checked after it lands")
        form.addRow("Verification:", self.verify)
        self.conflict = QComboBox()
        for key in CONFLICT_POLICIES:
            self.conflict.addItem(f"{key}: {CONFLICT_HELP[key]}", key)
        self.conflict.setCurrentIndex(max(0, self.conflict.findData(current.on_conflict)))
        self.conflict.setToolTip("What happens when a file already exists at the destination")
        form.addRow("When a file exists:", self.conflict)
        self.window_edit = QLineEdit(current.window)
        self.window_edit.setPlaceholderText("any time, or e.g. 20:00-07:00")
        self.window_edit.setToolTip("New transfers run only inside this daily window")
        form.addRow("Run only between:", self.window_edit)
        self.start_at = QLineEdit(current.start_at)
        self.start_at.setPlaceholderText("now, or e.g. 22:30")
        self.start_at.setToolTip("New transfers do not start before this time")
        form.addRow("Start at:", self.start_at)
        self.keep_awake = QCheckBox("Keep the computer awake while transfers run")
        self.keep_awake.setChecked(current.keep_awake)
        from ferry.ui.keep_awake import KeepAwake

        if not KeepAwake().available:
            self.keep_awake.setToolTip("systemd-inhibit is not available here, so Ferry cannot keep the computer awake")
            self.keep_awake.setText(
                "Keep the computer awake while transfers run (not possible here: no systemd-inhibit)"
            )
            self.keep_awake.setEnabled(False)
        else:
            self.keep_awake.setToolTip("Holds a systemd-inhibit lock against sleep while any job runs")
        form.addRow("", self.keep_awake)
        self.when_done = QComboBox()
        for key in WHEN_DONE:
            self.when_done.addItem({"nothing": "Do nothing", "notify": "Notify me", "quit": "Quit Ferry"}[key], key)
        self.when_done.setCurrentIndex(max(0, self.when_done.findData(current.when_done)))
        form.addRow("When the queue finishes:", self.when_done)
        self.confirm_drops = QCheckBox("Show what will happen before a drop starts a transfer")
        self.confirm_drops.setChecked(current.confirm_drops)
        form.addRow("", self.confirm_drops)
        lay.addLayout(form)
        self.error = QLabel("")
        self.error.setObjectName("error")
        self.error.setStyleSheet("color: #c62828")
        self.error.setWordWrap(True)
        lay.addWidget(self.error)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        lay.addWidget(self.buttons)

    def values(self) -> TransferSettings:
        return TransferSettings(
            parallel=self.parallel.value(),
            bwlimit=self.bwlimit.text().strip(),
            verify=str(self.verify.currentData()),
            on_conflict=str(self.conflict.currentData()),
            window=self.window_edit.text().strip(),
            start_at=self.start_at.text().strip(),
            keep_awake=self.keep_awake.isChecked(),
            when_done=str(self.when_done.currentData()),
            confirm_drops=self.confirm_drops.isChecked(),
        )

    def accept(self) -> None:
        ts = self.values()
        try:
            ts.validate()
        except UsageError as exc:
            self.error.setText(exc.message)
            return
        self.result_settings = ts
        super().accept()
