"""``moat plan`` on the live stack, as the console script runs it: a three-step plan from a
file and from stdin, its summary (status, plan id, the steps' table with every receipt id
whole at 80 columns, the run's link) and ``--json``, ``show``, a dry run, and the refusals
said one way (an invalid plan naming its step and reference, resume and cancel of a
finished plan)."""

from __future__ import annotations

import asyncio
import io
import json
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from schemas.settings import MoatSettings
from starter.cli import app
from starter.cli.output import main_of
from starter.runtime import links
from tests.client.test_plans_live import echo_plan, invalid_plan
from tests.support.stack import Stack


@pytest.fixture
def cli_env(stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Stack:
    monkeypatch.setenv("MOAT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MOAT_GATEWAY_URL", stack.url)
    monkeypatch.setenv("MOAT_API_KEY", stack.api_key)
    monkeypatch.setenv("COLUMNS", "80")
    for name in ("MOAT_TENANT", "MOAT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    return stack


async def moat(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``moat ARGS``: exit code, stdout, stderr (in a thread: the gateway answers on this
    test's loop)."""
    code = await asyncio.to_thread(main_of, app, args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def plan_file(tmp_path: Path, plan: dict[str, Any]) -> str:
    path = tmp_path / f"plan-{uuid.uuid4().hex[:8]}.json"
    path.write_text(json.dumps({"schema_version": "1", **plan}))
    return str(path)


async def test_run_show_and_json(
    cli_env: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = f"cli-plan-{uuid.uuid4().hex[:12]}"
    run = ["plan", "run", "--file", plan_file(tmp_path, echo_plan(key)), "--key", key]
    code, out, err = await moat(run, capsys)
    assert code == 0 and err == "", err
    status, plan_id, _ = out.splitlines()[0].split(maxsplit=2)
    assert status == "executed"
    assert max(len(line) for line in out.splitlines() if not line.startswith("run: ")) <= 80
    assert "idempotent replay" not in out

    code, again, _ = await moat([*run, "--json"], capsys)
    envelope = json.loads(again)
    assert code == 0 and envelope["plan_id"] == plan_id and envelope["replayed"] is True
    assert envelope["steps"][2]["output"] == {"text": f"b said {key}"}
    for step in envelope["steps"]:
        assert step["id"] in out and step["receipt_id"] in out  # whole, at 80 columns
    link = links.temporal_run(
        f"http://127.0.0.1:{MoatSettings().temporal_ui_port}",
        "moat",
        envelope["workflow_id"],
        None,
    )
    assert f"run: {link}" in out

    code, shown, err = await moat(["plan", "show", plan_id], capsys)
    assert code == 0 and err == ""
    assert shown.splitlines()[0] == f"executed  {plan_id}"
    assert all(step["receipt_id"] in shown for step in envelope["steps"])
    code, shown_json, _ = await moat(["plan", "show", plan_id, "--json"], capsys)
    assert json.loads(shown_json)["steps"] == envelope["steps"]


async def test_a_plan_from_stdin_and_a_dry_run(
    cli_env: Stack, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key = f"cli-stdin-{uuid.uuid4().hex[:12]}"
    document = json.dumps({**echo_plan(key), "idempotency_key": key})
    monkeypatch.setattr(sys, "stdin", io.StringIO(document))
    code, out, err = await moat(["plan", "run", "--file", "-", "--dry-run"], capsys)
    assert code == 0 and err == "", err
    assert out.startswith("planned  ")
    assert "dry run: nothing executed" in out and out.count("allow") == 3
    # The key stayed free: the same plan runs for real under it (the plan's own key).
    monkeypatch.setattr(sys, "stdin", io.StringIO(document))
    code, out, err = await moat(["plan", "run", "--file", "-", "--json"], capsys)
    assert code == 0, err
    envelope = json.loads(out)
    assert envelope["status"] == "executed" and envelope["idempotency_key"] == key


async def test_refusals_are_said_one_way(
    cli_env: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = await moat(
        ["plan", "run", "--file", plan_file(tmp_path, invalid_plan())], capsys
    )
    assert code == 1 and out == ""
    error, hint = err.strip().splitlines()
    assert error.startswith("error: plan_invalid: ")
    assert error == (
        "error: plan_invalid: Step 'a' (input): 'b' is not an earlier step: a step uses only "
        "what the steps before it answered.: step a input ${steps.b.output.tag}"
    )
    assert hint.startswith("hint: fix the steps named")

    key = f"cli-refused-{uuid.uuid4().hex[:12]}"
    run = ["plan", "run", "--file", plan_file(tmp_path, echo_plan(key)), "--key", key, "--json"]
    code, out, _ = await moat(run, capsys)
    plan_id = json.loads(out)["plan_id"]
    said = {}
    for args in (
        ["plan", "resume", plan_id, "--effect-did-not-happen", "--note", "checked"],
        ["plan", "resume", plan_id],
        ["plan", "cancel", plan_id, "--note", "too late"],
        ["plan", "show", str(uuid.uuid4())],
    ):
        code, out, err = await moat(args, capsys)
        lines = err.strip().splitlines()
        assert code == 1 and out == "" and len(lines) == 2 and lines[1].startswith("hint: ")
        said[args[1] + (" -" if len(args) == 3 and args[1] == "resume" else "")] = lines[0]
    assert said["resume"].startswith("error: plan_not_resumable: ")
    assert said["resume -"].startswith("error: effect_statement_required: ")
    assert said["cancel"].startswith("error: plan_finished: ")
    assert said["show"].startswith("error: plan_not_found: ")

    code, out, _ = await moat(["plan", "cancel", plan_id, "--json"], capsys)
    error = json.loads(out)["error"]
    assert code == 1 and error["code"] == "plan_finished" and error["http_status"] == 409


def test_a_dry_run_says_which_steps_wait_for_a_person() -> None:
    from moat_client.models import PlanStep

    from starter.cli.plans import _error

    def step(rule: str) -> PlanStep:
        decision = {"decision": "allow", "rule_hit": rule, "mode": "strict"}
        return PlanStep(id="a", status="pending", capability_id="x", decision=decision)

    assert _error(step("APPROVAL_REQUIRED")) == "allow: approval"
    assert _error(step("ALLOWED")) == "allow"


async def test_plan_list_shows_the_newest_first(
    cli_env: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = []
    for n in range(2):
        key = f"cli-list-{n}-{uuid.uuid4().hex[:8]}"
        run = ["plan", "run", "--file", plan_file(tmp_path, echo_plan(key)), "--key", key]
        code, out, _ = await moat([*run, "--json"], capsys)
        assert code == 0
        ids.append(json.loads(out)["plan_id"])
    code, out, err = await moat(["plan", "list", "--limit", "1"], capsys)
    assert code == 0 and err == "", err
    assert ids[1] in out and ids[0] not in out  # whole, at 80 columns
    assert "3 executed" in out and "(more: --cursor " in out
    assert max(len(line) for line in out.splitlines()) <= 80
    cursor = out.rsplit("--cursor ", 1)[1].rstrip(")\n")
    code, rest, _ = await moat(["plan", "list", "--cursor", cursor, "--json"], capsys)
    assert code == 0 and json.loads(rest)["items"][0]["plan_id"] == ids[0]
