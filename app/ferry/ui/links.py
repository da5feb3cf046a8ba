"""What the window is asked to open from outside: ``ferry://`` links, ``file://`` URLs and
macOS open events (no Qt here, apart from the optional event filter at the bottom).

The desktop file claims ``x-scheme-handler/ferry``, so a link in a web page, a chat or a
notebook can open a folder in Ferry. There is one form:

    ferry://open?url=<the location, percent-encoded>

for example ``ferry://open?url=sftp%3A%2F%2Fhpc.example.org%2Fscratch%2Fme`` opens
``sftp://hpc.example.org/scratch/me``. The location may be an ``sftp://``, ``s3://`` or
``globus://`` URL, a ``file://`` URL or an absolute local path. Anything else (another
action, another scheme such as ``http:`` or ``javascript:``, a nested ``ferry://``, control
characters) is refused with a sentence saying what the form is: a link someone else wrote only
ever opens a folder for you to look at, it never starts a transfer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from ferry.core.errors import UsageError

FORM = "ferry://open?url=ENCODED_LOCATION (e.g. ferry://open?url=sftp%3A%2F%2Fhost%2Fpath)"
OPENABLE_SCHEMES = ("sftp", "s3", "globus")


def _refuse(text: str, why: str) -> UsageError:
    shown = text if len(text) <= 200 else text[:200] + "…"
    return UsageError(f"Ferry cannot open the link {shown!r}: {why}. Ferry links have the form {FORM}")


def file_url_to_path(url: str) -> str:
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise UsageError(f"{url!r} is a file on another computer ({parts.netloc}); open it there")
    return unquote(parts.path)


def parse_ferry_url(text: str) -> str:
    """The location a ``ferry://`` link asks to open; :class:`UsageError` for anything else."""
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise _refuse(text.encode("unicode_escape").decode(), "it contains control characters")
    parts = urlsplit(text)
    if parts.scheme.lower() != "ferry":
        raise _refuse(text, "it is not a ferry:// link")
    if parts.netloc.lower() != "open" or parts.path not in ("", "/") or parts.fragment:
        raise _refuse(text, "the only action is 'open'")
    query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=False)
    if set(query) != {"url"} or len(query["url"]) != 1 or not query["url"][0]:
        raise _refuse(text, "it must carry exactly one url= parameter")
    location = query["url"][0]  # parse_qs already percent-decoded it
    if any(ord(c) < 32 or ord(c) == 127 for c in location):
        raise _refuse(text, "the location contains control characters")
    scheme = urlsplit(location).scheme.lower() if "://" in location else ""
    if scheme == "file":
        return file_url_to_path(location)
    if scheme in OPENABLE_SCHEMES:
        return location
    if not scheme and location.startswith("/"):
        return location
    if scheme:
        raise _refuse(
            text, f"it points at a {scheme}:// location; Ferry links open sftp://, s3://, globus:// or local folders"
        )
    raise _refuse(text, "the location must be a URL or an absolute path")


def location_from_argument(text: str) -> str:
    """A command-line argument, a second launch's argument or an open event, as a location the
    panes understand: ``ferry://`` links unwrapped, ``file://`` URLs made paths."""
    lowered = text[:8].lower()
    if lowered.startswith("ferry:"):
        return parse_ferry_url(text)
    if lowered.startswith("file://"):
        return file_url_to_path(text)
    return text


def install_file_open_handler(app: Any, open_location: Callable[[str], object]) -> Any:
    """macOS hands URLs and files opened from Finder or the Dock to a running application as a
    ``QFileOpenEvent`` (not as arguments): route them to ``open_location`` like a second launch."""
    from PySide6.QtCore import QEvent, QObject
    from PySide6.QtGui import QFileOpenEvent

    class _FileOpenFilter(QObject):
        def eventFilter(self, obj: QObject, event: QEvent) -> bool:
            if event.type() == QEvent.Type.FileOpen and isinstance(event, QFileOpenEvent):
                url = event.url()
                text = event.file() if url.isLocalFile() else url.toString()
                if text:
                    open_location(text)
                    return True
            return False

    handler = _FileOpenFilter(app)
    app.installEventFilter(handler)
    return handler
