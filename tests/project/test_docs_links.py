"""The README, docs/ and the notebooks' markdown: every relative link leads to a file (and heading) of
this tree, the student edition's versions only to files the student edition holds; and the README fits
one screen.

In a student tree the README and docs/ already are the student versions (student_file leaves them as
they are) and the teacher's pages are not there, so the same checks hold there."""

import functools
import posixpath
import re

import nbformat
import pytest

from minitrain.lab.editions import student_edition
from minitrain.paths import NOTEBOOKS_DIR, REPO

README_MAX_LINES = 120  # the page a learner reads in one screen
PAGES = sorted(p for p in ["README.md", "TEACHER.md", *(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md"))]
               if (REPO / p).is_file())
NOTEBOOKS = sorted(str(p.relative_to(REPO)) for p in NOTEBOOKS_DIR.glob("*.ipynb"))
# the teacher's files: a student version names none of them
TEACHERS_FILES = ("TEACHER.md", "solutions/", "docs/teachers.md", "docs/provenance.md", "teachers.md", "provenance.md")

FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)


def links(text: str) -> list[str]:
    """The targets of the markdown links in `text`, outside code."""
    return LINK.findall(CODE.sub("", FENCE.sub("", text)))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation gone, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of `text`'s headings (a repeated one as GitHub numbers it: -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", text)):
        base = slug(heading)
        found.add(base if base not in seen else f"{base}-{seen[base]}")
        seen[base] = seen.get(base, 0) + 1
    return found


def relative_links(text: str, page: str) -> list[tuple[str, str, str]]:
    """(the link as written, the file it names relative to the repository, its anchor) for each
    relative link in `page`'s `text`; web links and mail addresses left out."""
    found = []
    for target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # https:, mailto:, ...
            continue
        path, _, anchor = target.partition("#")
        rel = posixpath.normpath(posixpath.join(posixpath.dirname(page), path)) if path else page
        found.append((target, rel, anchor))
    return found


def broken_links(page: str, text: str, holds, text_of) -> list[str]:
    """The links of `page` (its `text`) to a file that `holds` says is not there, or to a heading that
    `text_of(rel)` does not have."""
    broken = []
    for target, rel, anchor in relative_links(text, page):
        if rel.startswith("../") or rel == ".." or not holds(rel):
            broken.append(f"{page}: ({target}): no {rel} in the tree")
        elif anchor and rel.endswith(".md") and anchor not in anchors(text_of(rel)):
            broken.append(f"{page}: ({target}): {rel} has no heading #{anchor}")
    return broken


def markdown_of(text: str, page: str) -> str:
    """A page's markdown: the file's text, or a notebook's markdown cells."""
    if not page.endswith(".ipynb"):
        return text
    return "\n\n".join(c.source for c in nbformat.reads(text, as_version=4).cells if c.cell_type == "markdown")


def test_the_readme_fits_one_screen():
    lines = (REPO / "README.md").read_text().count("\n")
    assert lines < README_MAX_LINES, f"README.md has {lines} lines: keep it under {README_MAX_LINES}, move the rest to docs/"


def test_the_scan_finds_links_and_anchors():
    text = "see [a](docs/a.md#two-words), [web](https://x.org), [top](#top), `[code](not/a/link)`, ![img](p.png)"
    assert [(t, r, a) for t, r, a in relative_links(text, "docs/b.md")] == [
        ("docs/a.md#two-words", "docs/docs/a.md", "two-words"), ("#top", "docs/b.md", "top")]
    assert anchors("# Two words\n## What `make lab` does\n## Two words\n```\n# not a heading\n```") == {
        "two-words", "what-make-lab-does", "two-words-1"}


@pytest.mark.parametrize("page", PAGES + NOTEBOOKS)
def test_every_relative_link_leads_to_a_file_of_this_tree(page):
    def holds(rel: str) -> bool:
        return (REPO / rel).exists()

    text = markdown_of((REPO / page).read_text(), page)
    broken = broken_links(page, text, holds, lambda rel: (REPO / rel).read_text())
    assert not broken, "\n".join(broken)


def student_pages() -> list[str]:
    return [p for p in PAGES + NOTEBOOKS if not student_edition.excluded(p)]


@functools.cache
def student_files() -> frozenset[str]:
    """The files the student edition holds: the tracked ones not EXCLUDED."""
    return frozenset(rel for rel in student_edition.tracked_files() if not student_edition.excluded(rel))


@pytest.mark.parametrize("page", student_pages())
def test_the_student_version_links_only_to_what_the_student_edition_holds(page):
    """The student edition's README, docs pages and notebooks' markdown: their links lead to files it
    holds (tracked, not EXCLUDED), and the README and docs pages name none of the teacher's files."""
    kept = student_files()

    def holds(rel: str) -> bool:  # a file it holds, or a folder that holds one
        return rel in kept or any(k.startswith(rel + "/") for k in kept)

    def text_of(rel: str) -> str:
        return student_edition.student_file(REPO / rel, rel).decode()

    text = markdown_of(text_of(page), page)
    broken = broken_links(page, text, holds, text_of)
    assert not broken, "the student edition's " + "\n".join(broken)
    if page.endswith(".ipynb"):
        return
    named = [name for name in TEACHERS_FILES if name in text]
    assert not named, f"the student edition's {page} names the teacher's files {named}: mark those lines reference only"
