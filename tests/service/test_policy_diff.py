"""The policy diff the console shows: a line diff of two versions' canonical pretty JSON,
every line kept, changes marked."""

from __future__ import annotations

from schemas.policy import PolicyVersion
from starter.service.policy import canonical_text, diff


def test_the_diff_marks_what_changed_and_keeps_the_rest() -> None:
    old = PolicyVersion(version=1, mode="standard")
    new = PolicyVersion.model_validate(
        {"version": 2, "mode": "strict", "rules": [{"capability": "demo.echo"}]}
    )
    lines = diff(old, new)
    assert [line.text for line in lines if line.change != "added"] == canonical_text(
        old
    ).splitlines()
    assert [line.text for line in lines if line.change != "removed"] == canonical_text(
        new
    ).splitlines()
    assert ("removed", '  "mode": "standard",') in [(x.change, x.text) for x in lines]
    assert ("added", '  "mode": "strict",') in [(x.change, x.text) for x in lines]
    assert all(x.change == "same" for x in diff(new, new))
    # Version, author and time are not part of the document.
    assert canonical_text(new) == canonical_text(new.model_copy(update={"version": 9}))
