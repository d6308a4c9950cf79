"""The plan request's rules, pure: references found, resolved with their JSON type or as
text, refused when malformed; ``when``; step keys; the digest a key and an approval bind."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from schemas.capabilities import CapabilityCatalog
from schemas.plans import (
    PlanRequest,
    StepStatus,
    Unresolved,
    When,
    compensation_key,
    malformed,
    placeholder,
    plan_hash,
    references,
    resolve,
    step_key,
    when_holds,
)
from starter.service.plans import check


def plan(*steps: dict[str, Any], **extra: Any) -> PlanRequest:
    return PlanRequest.model_validate({"schema_version": "1", "steps": list(steps), **extra})


def echo(step_id: str, value: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "capability_id": "demo.echo", "input": value, **extra}


def test_a_whole_reference_keeps_its_type_and_an_embedded_one_becomes_text() -> None:
    outputs = {"a": {"n": 7, "tags": ["x", "y"], "obj": {"k": True}}}
    value = {
        "n": "${steps.a.output.n}",
        "tag": "${steps.a.output.tags.1}",
        "obj": "${steps.a.output.obj}",
        "all": "${steps.a.output}",
        "text": "n=${steps.a.output.n} obj=${steps.a.output.obj}",
        "deep": [{"v": "${steps.a.output.n}"}],
    }
    assert resolve(value, outputs) == {
        "n": 7,
        "tag": "y",
        "obj": {"k": True},
        "all": outputs["a"],
        "text": 'n=7 obj={"k":true}',
        "deep": [{"v": 7}],
    }


def test_a_missing_step_or_path_does_not_resolve() -> None:
    with pytest.raises(Unresolved, match="did not execute"):
        resolve({"v": "${steps.b.output.n}"}, {"a": {}})
    with pytest.raises(Unresolved, match="no 'm'"):
        resolve({"v": "${steps.a.output.m}"}, {"a": {"n": 1}})
    with pytest.raises(Unresolved):
        resolve({"v": "${steps.a.output.items.5}"}, {"a": {"items": [1]}})


@given(st.recursive(st.text(), lambda kids: st.lists(kids) | st.dictionaries(st.text(), kids)))
def test_values_without_references_resolve_to_themselves(value: Any) -> None:
    if "${" in repr(value):
        return
    assert resolve(value, {}) == value
    assert placeholder(value) == value
    assert list(references(value)) == []


def test_malformed_references_are_named() -> None:
    assert list(malformed({"a": "${steps.a.out.n}", "b": "${oops", "c": "${steps.a.output}"})) == [
        "${steps.a.out.n}",
        "${oops",
    ]


def test_when_holds_for_the_named_statuses() -> None:
    when = When.model_validate({"step": "a", "status": ["failed", "skipped"]})
    assert when_holds(when, {"a": StepStatus.FAILED})
    assert not when_holds(when, {"a": StepStatus.EXECUTED})
    assert when_holds(None, {})
    assert When.model_validate({"step": "a", "status": "executed"}).status == [StepStatus.EXECUTED]


def test_step_keys() -> None:
    assert step_key("k", "a") == "k/a"
    assert step_key("k", "a", 2) == "k/a#2"
    assert compensation_key("k", "a") == "k/a/compensate"


def test_step_ids_are_unique_and_shaped() -> None:
    with pytest.raises(ValidationError, match="used twice"):
        plan(echo("a", {}), echo("a", {}))
    with pytest.raises(ValidationError):
        plan(echo("A b", {}))
    with pytest.raises(ValidationError):
        plan(*(echo(f"s{i}", {}) for i in range(21)))


def test_the_digest_binds_what_the_plan_does_not_its_key() -> None:
    one = plan(echo("a", {"n": 1}), idempotency_key="x")
    same = plan(echo("a", {"n": 1}), idempotency_key="y", dry_run=True)
    other = plan(echo("a", {"n": 2}))
    assert plan_hash(one.document()) == plan_hash(same.document())
    assert plan_hash(one.document()) != plan_hash(other.document())
    compensating = plan(echo("a", {"n": 1}), on_failure="compensate")
    assert plan_hash(one.document()) != plan_hash(compensating.document())


CATALOG = CapabilityCatalog()


def problems_of(request: PlanRequest) -> list[tuple[str, str, str | None]]:
    return [(p.step, p.where, p.reference) for p in check(request, CATALOG)]


def test_references_to_later_steps_unknown_paths_and_bad_when_are_problems() -> None:
    request = plan(
        echo("a", {"v": "${steps.b.output.n}", "n": 1}),
        echo("b", {"n": "${steps.a.output.n}", "m": "${steps.a.output.nope}"}),
        echo("c", {}, when={"step": "d", "status": "executed"}),
        echo("d", {"x": "${steps.a.output.n.deeper}"}),
    )
    assert problems_of(request) == [
        ("a", "input", "${steps.b.output.n}"),
        ("b", "input", "${steps.a.output.nope}"),
        ("c", "when", None),
        ("d", "input", "${steps.a.output.n.deeper}"),
    ]


def test_output_paths_are_checked_against_what_the_capability_answers() -> None:
    issue = {
        "id": "issue",
        "capability_id": "github.create_issue",
        "connection_id": "con_x",
        "input": {"owner": "o", "repo": "r", "title": "t"},
    }
    ok = plan(issue, echo("use", {"url": "${steps.issue.output.html_url}"}))
    assert problems_of(ok) == []
    bad = plan(issue, echo("use", {"url": "${steps.issue.output.permalink}"}))
    assert problems_of(bad) == [("use", "input", "${steps.issue.output.permalink}")]
    # Below an open member (an HTTP answer's body) any path may be there.
    call = {
        "id": "call",
        "capability_id": "http.request",
        "input": {"method": "GET", "url": "https://example.com/"},
    }
    assert problems_of(plan(call, echo("use", {"v": "${steps.call.output.body.a.b}"}))) == []


def test_inputs_are_checked_with_their_references_left_for_later() -> None:
    issue = {
        "id": "issue",
        "capability_id": "github.create_issue",
        "connection_id": "con_x",
        "input": {"owner": "o", "repo": "r", "title": "t"},
    }
    later = {
        "id": "again",
        "capability_id": "github.create_issue",
        "connection_id": "con_x",
        # title is one reference: checked once it resolves; owner breaks the schema now.
        "input": {"owner": "not an owner!", "repo": "r", "title": "${steps.issue.output.html_url}"},
    }
    assert [(s, w) for s, w, _ in problems_of(plan(issue, later))] == [("again", "input")]
    # A compensation may use its own step's output.
    undo = dict(
        issue,
        compensate={"capability_id": "demo.echo", "input": {"n": "${steps.issue.output.number}"}},
    )
    assert problems_of(plan(undo)) == []
