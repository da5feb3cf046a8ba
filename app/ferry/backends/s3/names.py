"""S3 keys that cannot be local file names: refused, or mapped reversibly, and said which.

An S3 key is any UTF-8 string, so a listing can hold names that would escape a download folder
(``..``, ``/abs``), collapse (``a//b``), be both a file and a folder (``dir/`` holding data), or
carry control characters. The backend lists every key's *real* path in ``Entry.path`` (so the
source is always read exactly) and a safe ``Entry.name`` for the destination:

* control characters (U+0001-U+001F, U+007F) become the matching Unicode "control picture"
  (U+2401-U+241F, U+2421), as rclone's encoder does: reversible, visible, legal everywhere.
  A name that already holds a control picture is not mapped (the map would not be reversible):
  it is refused instead.
* ``""`` (from ``a//b``, a leading ``/`` or a ``dir/`` object holding data), ``.`` and ``..``
  are refused: ``Entry.name`` keeps the raw segment so the planner skips the item with its
  "unsafe name" reason, which the user sees in the job's task list.

``Entry.meta["name_note"]`` says what happened, and the copy records it with the task.
"""

from __future__ import annotations

_PICTURE_BASE = 0x2400
_DEL_PICTURE = 0x2421


def _is_control(c: str) -> bool:
    o = ord(c)
    return 0 < o < 0x20 or o == 0x7F


def _is_picture(c: str) -> bool:
    o = ord(c)
    return _PICTURE_BASE < o < _PICTURE_BASE + 0x20 or o == _DEL_PICTURE


def encode_name(raw: str) -> tuple[str, str]:
    """(the name to use at a destination, a note for the person or "")."""
    if raw in ("", ".", ".."):
        return raw, f"refused: the S3 key segment {raw!r} cannot be a file name"
    if not any(_is_control(c) for c in raw):
        return raw, ""
    if any(_is_picture(c) for c in raw):
        return "", f"refused: {raw!r} holds control characters and control-picture symbols (no reversible name)"
    mapped = "".join(
        chr(_DEL_PICTURE if ord(c) == 0x7F else _PICTURE_BASE + ord(c)) if _is_control(c) else c for c in raw
    )
    return mapped, f"name mapped from {raw!r}: control characters shown as U+24xx symbols"


def decode_name(name: str) -> str:
    """The S3 key segment a mapped name came from (inverse of :func:`encode_name`)."""
    return "".join(
        "\x7f" if ord(c) == _DEL_PICTURE else chr(ord(c) - _PICTURE_BASE) if _is_picture(c) else c for c in name
    )
