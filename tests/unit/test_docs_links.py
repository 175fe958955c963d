"""Every relative Markdown link in README.md and docs/*.md points to an existing file.

``mkdocs build --strict`` checks the links between pages of docs/, but never reads README.md.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# [text](target) and ![alt](target), with an optional "title"; code is removed first.
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def relative_links(text: str) -> list[str]:
    """The relative link targets of a Markdown text, without their #fragment."""
    text = _CODE_SPAN.sub("", _FENCE.sub("", text))
    targets = []
    for target in _LINK.findall(text):
        if _EXTERNAL.match(target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0].split("?", 1)[0]
        if path:
            targets.append(path)
    return targets


def test_the_parser_finds_relative_links_only() -> None:
    text = (
        '[a](docs/a.md) ![b](img/b.png "B") [c](https://x.org/c.md) [d](#top)\n'
        "[e](e.md#part) `[f](f.md)`\n```\n[g](g.md)\n```\n"
    )
    assert relative_links(text) == ["docs/a.md", "img/b.png", "e.md"]


def test_the_readme_links_into_the_docs() -> None:
    assert any(t.startswith("docs/") for t in relative_links((REPO / "README.md").read_text()))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_point_to_existing_files(page: Path) -> None:
    missing = [
        target
        for target in relative_links(page.read_text(encoding="utf-8"))
        if not (page.parent / target).exists()
    ]
    assert not missing, f"{page.relative_to(REPO)} links to missing files: {missing}"
