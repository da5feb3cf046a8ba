"""The host-key dialog shows the exact known_hosts line when the backend passes it
(``prompts.confirm_host_key(..., known_hosts_line=...)``), and no made-up template otherwise;
prompters written before the argument existed keep working."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from PySide6.QtWidgets import QDialog, QLabel

from ferry.credentials import prompts
from ferry.ui.bridge import Bridge
from ferry.ui.dialogs.prompts import HostKeyDialog, QtPrompter

LINE = "[127.0.0.1]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0ZXN0a2V5Zm9yZmVycnl0ZXN0c29ubHkAAAAAAAAA"


@pytest.fixture
def restore_prompter() -> Iterator[None]:
    before = prompts.prompter()
    yield
    prompts.set_prompter(before)


class OldPrompter:
    """A prompter from before ``known_hosts_line``: must still be called, without it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def ask(self, title: str, prompt: str, *, echo: bool) -> str:
        raise AssertionError("not asked")

    def confirm_host_key(self, host: str, key_type: str, fingerprint: str) -> str:
        self.calls.append((host, key_type, fingerprint))
        return "once"


def test_an_old_prompter_is_called_without_the_line(restore_prompter: None) -> None:
    old = OldPrompter()
    prompts.set_prompter(old)
    assert prompts.confirm_host_key("hpc", "ssh-ed25519", "SHA256:abc", known_hosts_line=LINE) == "once"
    assert prompts.confirm_host_key("hpc", "ssh-ed25519", "SHA256:abc") == "once"
    assert old.calls == [("hpc", "ssh-ed25519", "SHA256:abc")] * 2


def test_the_window_shows_the_exact_line_and_trust_always_answers_save(qtbot, restore_prompter: None) -> None:  # type: ignore[no-untyped-def]
    bridge = Bridge()
    prompts.set_prompter(QtPrompter(bridge, lambda: None))
    shown: list[HostKeyDialog] = []

    def answer(d: QDialog) -> None:
        assert isinstance(d, HostKeyDialog)
        shown.append(d)
        assert d.line_edit is not None and d.line_edit.toPlainText() == LINE
        assert "SHA256:abc" in d.fingerprint_label.text()
        d.always.click()

    bridge.prompt_shown.connect(answer)
    out: dict[str, str] = {}
    t = threading.Thread(
        target=lambda: out.update(
            key=prompts.confirm_host_key("127.0.0.1", "ssh-ed25519", "SHA256:abc", known_hosts_line=LINE)
        )
    )
    t.start()
    qtbot.waitUntil(lambda: "key" in out, timeout=10_000)
    t.join()
    assert out == {"key": "save"} and len(shown) == 1
    bridge.shutdown()


def test_without_the_line_no_template_is_shown(qtbot) -> None:  # type: ignore[no-untyped-def]
    d = HostKeyDialog("hpc", "ssh-ed25519", "SHA256:abc")
    qtbot.addWidget(d)
    assert d.line_edit is None
    texts = " ".join(w.text() for w in d.findChildren(QLabel))
    assert "<key" not in texts and "SHA256:abc" in texts
    assert d.reject_button.isDefault()  # Enter never trusts a key
