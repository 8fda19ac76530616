"""The README's examples are the files in examples/python, and the docs' relative links lead somewhere.

A README example block is marked ``<!-- example: examples/python/NAME.py -->`` just
above its fence and must equal that file without its opening docstring (the prose
above the block says what the docstring says). Every file of examples/python must
appear in the README once. (``make test`` runs the files themselves.)

Every relative link in README.md, CHANGELOG.md and docs/*.md must lead to a file or
directory of the repository and, with ``#anchor``, to a heading of that page, by
GitHub's rule for heading anchors.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "python"
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]

MARKER = re.compile(r"^<!-- example: (\S+) -->\n```python\n(.*?)^```$", re.M | re.S)
DOCSTRING = re.compile(r'\A"""(.*?)"""\n+', re.S)
# [text](target): the target up to the closing parenthesis, without a title.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def readme_blocks() -> list[tuple[str, str]]:
    return [(path, body) for path, body in MARKER.findall((ROOT / "README.md").read_text())]


def example_body(path: Path) -> str:
    """The example as the README shows it: without its opening docstring."""
    return DOCSTRING.sub("", path.read_text(), count=1)


def test_every_example_is_in_the_readme_once() -> None:
    shown = Counter(path for path, _ in readme_blocks())
    files = {str(path.relative_to(ROOT)) for path in EXAMPLES.glob("*.py")}
    assert files, "no examples found"
    assert set(shown) == files, f"README blocks {sorted(shown)} != files {sorted(files)}"
    assert all(count == 1 for count in shown.values()), shown


@pytest.mark.parametrize(("path", "body"), readme_blocks(), ids=[p for p, _ in readme_blocks()])
def test_readme_example_equals_its_file(path: str, body: str) -> None:
    expected = example_body(ROOT / path)
    assert body == expected, (
        f"the README's block for {path} differs from the file (without its docstring): "
        "copy the file into the README, or change the file"
    )


def without_code(text: str) -> str:
    """The markdown outside fenced code blocks and inline code spans."""
    kept, fence = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fence = not fence
            continue
        if not fence:
            kept.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of a page: lowercased, punctuation dropped, spaces to
    hyphens, a repeated anchor numbered -1, -2, ..."""
    found: set[str] = set()
    seen: Counter[str] = Counter()
    fence = False
    for line in page.read_text().split("\n"):
        if line.startswith("```"):
            fence = not fence
        match = None if fence else re.match(r"^#{1,6} (.*?)\s*#*$", line)
        if match is None:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1))  # a link's text only
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        found.add(slug if seen[slug] == 0 else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return found


def links(page: Path) -> list[str]:
    return [
        target
        for target in LINK.findall(without_code(page.read_text()))
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto:
    ]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_relative_links_lead_somewhere(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists():
            broken.append(f"{target}: no file {destination.relative_to(ROOT)}")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{target}: no heading #{anchor} in {destination.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_link_checker_sees_anchors_and_skips_code(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Page: `tenure.x` and [a link](other.md)\n\n## Why T \u2212 I\n\n## Why T \u2212 I\n\n"
        "```python\n# not a heading\n[not](a-link.md)\n```\n[one](#why-t--i-1) `[nor](this.md)`\n"
    )
    assert anchors(page) == {"page-tenurex-and-a-link", "why-t--i", "why-t--i-1"}
    assert links(page) == ["other.md", "#why-t--i-1"]
