"""The README and docs/: every relative link resolves to a file of the repository (and a heading, for #anchors)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, spaces to hyphens, punctuation dropped."""
    out = set()
    for line in page.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def broken_links(page: Path) -> list[str]:
    bad = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target} (no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest})")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target} (no heading #{anchor} in {dest.name})")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    assert not broken_links(page), f"broken links in {page.name}: {broken_links(page)}"


def test_the_check_sees_a_broken_link(tmp_path):
    """A control: a link to a missing file and one to a missing heading are both reported."""
    (tmp_path / "a.md").write_text("# Title\n[ok](a.md#title) [gone](b.md) [no](a.md#nothing) [web](https://x.y)\n")
    assert broken_links(tmp_path / "a.md") == [
        f"b.md (no file {tmp_path / 'b.md'})",
        "a.md#nothing (no heading #nothing in a.md)",
    ]


def test_the_readme_is_a_front_page():
    """Issue 20: at most ~250 lines, the quick start first, a table of the commands."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert text.index("## Quick start") < text.index("## Commands")
