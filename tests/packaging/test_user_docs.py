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


def test_verification_table_covers_every_recorded_result() -> None:
    """Each literal result the copier records (copy.py, Globus tasks) is explained in the guide."""
    guide = (DOCS / "user-guide.md").read_text(encoding="utf-8")
    sources = (ROOT / "app" / "ferry" / "transfers" / "copy.py").read_text(encoding="utf-8")
    results = set(re.findall(r'Outcome\("(?:done|skipped)", f?"([^"{]+)"', sources))
    results |= set(re.findall(r'verified = "([^"]+)"', sources))
    results |= {"sha256 match", "blake3 match", "matches the source's recorded checksum", "(checked after restart)"}
    globus = (ROOT / "app" / "ferry" / "backends" / "globus_tasks.py").read_text(encoding="utf-8")
    results |= set(re.findall(r'VERIFIED_BY_GLOBUS = "([^"]+)"', globus))
    assert len(results) >= 10, results  # the patterns above still find the code's strings
    missing = sorted(r for r in results if f"`{r}" not in guide and r not in guide)
    assert not missing, f"verification results the user guide does not explain: {missing}"
