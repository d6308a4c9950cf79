"""Relative links in the repository's Markdown, checked the way GitHub renders them: the
target file or folder exists, and a ``#fragment`` names a heading of the target page (its
GitHub slug: lower case, punctuation dropped, each space a hyphen, ``-1``, ``-2`` on
repeats). Links inside code are not links; links with a scheme (https:, mailto:) are not
checked."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered from 1."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (github-slugger)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link reads as its text
    text = text.replace("`", "").replace("*", "").lower()
    kept = "".join(ch for ch in text if ch.isalnum() or ch in "-_ ")
    return kept.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a page, numbered on repeats as GitHub does."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(text):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(text: str) -> Iterator[tuple[int, str]]:
    """``(line, target)`` of every link and reference definition outside code."""
    for number, line in prose_lines(text):
        bare = INLINE_CODE.sub("", line)
        for match in LINK.finditer(bare):
            yield number, match.group(1)
        reference = REFERENCE.match(bare)
        if reference:
            yield number, reference.group(1)


def broken_links(root: Path, pages: list[Path]) -> list[str]:
    """Every relative link of ``pages`` that does not resolve inside ``root``."""
    problems = []
    for page in pages:
        for number, target in links(page.read_text()):
            if not target or SCHEME.match(target):
                continue
            where = f"{page.relative_to(root)}:{number}: {target}"
            path_part, _, fragment = target.partition("#")
            resolved = (page.parent / unquote(path_part)).resolve() if path_part else page
            if not resolved.is_relative_to(root.resolve()) or not resolved.exists():
                problems.append(f"{where} (no such file)")
                continue
            if (
                fragment
                and resolved.suffix == ".md"
                and resolved.is_file()
                and unquote(fragment) not in anchors(resolved.read_text())
            ):
                problems.append(f"{where} (no heading #{fragment} in {resolved.name})")
    return problems
