"""Questions for the person at the keyboard, answered by whichever front end is running.

Remote backends ask for passwords, key passphrases, one-time codes and host-key decisions
through the one :class:`Prompter` installed here: the CLI installs a terminal prompter, the GUI
will install one that opens a dialog on the UI thread. With nobody to ask (a cron job), the
default prompter refuses with a clear error instead of hanging or guessing.

Answers are never logged, never put into exceptions, and never reused for a different prompt
(a saved password is not sent as a one-time code).
"""

from __future__ import annotations

import io
import threading
from typing import Protocol, TextIO

from ferry.core.errors import AuthError


class Prompter(Protocol):
    def ask(self, title: str, prompt: str, *, echo: bool) -> str:
        """Show ``prompt`` verbatim and return the answer; raise AuthError if it cannot be asked."""
        ...

    def confirm_host_key(self, host: str, key_type: str, fingerprint: str) -> str:
        """Unknown host key: return "no", "once" (trust for this run) or "save" (add to known_hosts).

        A prompter may also accept a keyword ``known_hosts_line`` (the exact line "save" would
        add); backends call :func:`confirm_host_key` below, which passes it only to those that do."""
        ...


class NobodyToAsk:
    def ask(self, title: str, prompt: str, *, echo: bool) -> str:
        raise AuthError(
            f"{title} needs an answer to {prompt.strip()!r}, and there is no one to ask "
            "(run Ferry from a terminal or the desktop app once, or use a key)"
        )

    def confirm_host_key(self, host: str, key_type: str, fingerprint: str) -> str:
        return "no"


def _tty() -> TextIO:
    """The controlling terminal for reading and writing. ``open("/dev/tty", "r+")`` fails there:
    a terminal is not seekable, which buffered read-write text files insist on."""
    raw = io.FileIO("/dev/tty", "r+")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", write_through=True)


class TerminalPrompter:
    """Asks on the controlling terminal (``/dev/tty``), one question at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def ask(self, title: str, prompt: str, *, echo: bool) -> str:
        import getpass

        with self._lock:
            try:
                with _tty() as tty:
                    tty.write(f"\r\033[K[{title}]\n")
                    tty.flush()
                    if echo:
                        tty.write(prompt)
                        tty.flush()
                        return tty.readline().rstrip("\n")
                return getpass.getpass(prompt)
            except OSError:
                return NobodyToAsk().ask(title, prompt, echo=echo)

    def confirm_host_key(self, host: str, key_type: str, fingerprint: str) -> str:
        with self._lock:
            try:
                with _tty() as tty:
                    tty.write(
                        f"\r\033[KThe authenticity of host '{host}' can't be established.\n"
                        f"{key_type} key fingerprint is {fingerprint}.\n"
                        "Trust it? [y]es and save to known_hosts, [o]nce for this run, [N]o: "
                    )
                    tty.flush()
                    answer = tty.readline().strip().lower()
            except OSError:
                return "no"
        return {"y": "save", "yes": "save", "o": "once", "once": "once"}.get(answer, "no")


_current: Prompter = NobodyToAsk()


def set_prompter(prompter: Prompter) -> None:
    global _current
    _current = prompter


def prompter() -> Prompter:
    return _current


def confirm_host_key(host: str, key_type: str, fingerprint: str, *, known_hosts_line: str | None = None) -> str:
    """Ask the current prompter about an unknown host key. ``known_hosts_line`` is the exact line
    "save" adds to known_hosts, for front ends that show it (the desktop app's dialog); prompters
    written before it existed are called without it."""
    current = _current
    if known_hosts_line is not None and _accepts_line(current):
        return current.confirm_host_key(host, key_type, fingerprint, known_hosts_line=known_hosts_line)  # type: ignore[call-arg]
    return current.confirm_host_key(host, key_type, fingerprint)


def _accepts_line(p: object) -> bool:
    import inspect

    try:
        params = inspect.signature(p.confirm_host_key).parameters  # type: ignore[attr-defined]
    except (TypeError, ValueError, AttributeError):
        return False
    return "known_hosts_line" in params or any(v.kind is inspect.Parameter.VAR_KEYWORD for v in params.values())
