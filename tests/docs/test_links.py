"""Every relative link of README.md, docs/ and bench/README.md resolves: its file exists
in the repository and its ``#anchor`` names a heading there."""

from __future__ import annotations

from pathlib import Path

from tests.docs.links import anchors, broken_links, slug

ROOT = Path(__file__).resolve().parents[2]


def pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_relative_link_resolves() -> None:
    assert len(pages()) > 3
    problems = broken_links(ROOT, pages())
    assert problems == [], "broken links:\n" + "\n".join(problems)


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## The `moat up` command\n")
    page = tmp_path / "README.md"
    page.write_text(
        "See [a](docs/a.md), [its command](docs/a.md#the-moat-up-command),\n"
        "[missing](docs/b.md), [bad anchor](docs/a.md#nothing-here), [self](#nowhere),\n"
        "[out](../../etc/passwd) and [web](https://example.com/x.md).\n"
        "```\n[in code](docs/none.md)\n```\n`[inline](docs/none.md)`\n"
    )
    problems = broken_links(tmp_path, [page])
    assert [p.split(": ", 1)[1] for p in problems] == [
        "docs/b.md (no such file)",
        "docs/a.md#nothing-here (no heading #nothing-here in a.md)",
        "#nowhere (no heading #nowhere in README.md)",
        "../../etc/passwd (no such file)",
    ]


def test_anchors_follow_github() -> None:
    assert slug("Real tools: webhooks, Slack, GitHub, exactly once") == (
        "real-tools-webhooks-slack-github-exactly-once"
    )
    assert slug("Configuration (environment, prefix `MOAT_`)") == (
        "configuration-environment-prefix-moat_"
    )
    assert slug("Evidence — signed manifests") == "evidence--signed-manifests"
    assert anchors("# Try it\n## Try it\n```\n# not a heading\n```\n") == {"try-it", "try-it-1"}
