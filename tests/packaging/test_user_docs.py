"""The user guide and install guide: every picture and link they name exists, and the verification
table covers every result the copier can record (so the docs cannot silently drift from the code)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
GUIDES = [DOCS / "user-guide.md", DOCS / "install.md"]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("doc", GUIDES, ids=lambda p: p.name)
def test_links_and_images_resolve(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        linked = (doc.parent / path) if path else doc
        assert linked.exists(), f"{doc.name} links to missing {target}"
        if anchor:
            linked_text = linked.read_text(encoding="utf-8")
            linked_anchors = anchors if linked == doc else {
                _slug(h) for h in re.findall(r"^#+ (.+)$", linked_text, re.MULTILINE)
            }
            assert anchor in linked_anchors, f"{doc.name} links to missing anchor {target}"


def test_every_guide_screenshot_is_used_and_real() -> None:
    text = (DOCS / "user-guide.md").read_text(encoding="utf-8")
    used = set(re.findall(r"\(screenshots/([\w.-]+\.png)\)", text))
    taken = {p.name for p in (DOCS / "screenshots").glob("guide-*.png")}
    assert used and used <= {p.name for p in (DOCS / "screenshots").glob("*.png")}
    assert taken <= used, f"screenshots nobody shows: {sorted(taken - used)}"
    for name in used:
        data = (DOCS / "screenshots" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000, name


def test_verification_tables_cover_every_level_evidence_and_skip_reason() -> None:
    """Every typed outcome a file can record (core/outcomes.py) is explained in the guide."""
    from ferry.core.outcomes import Evidence, Level, SkipReason

    guide = (DOCS / "user-guide.md").read_text(encoding="utf-8")
    values = [v.value for enum in (Level, Evidence, SkipReason) for v in enum]
    missing = [v for v in values if f"| `{v}` |" not in guide]
    assert not missing, f"outcomes the user guide does not explain: {missing}"
