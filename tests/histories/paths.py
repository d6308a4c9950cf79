"""The paths through the workflows the corpus records: each driver runs one (or a pair)
on the recording stack and names the runs whose histories are kept."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from schemas.names import (
    EXECUTE_WORKFLOW,
    PARTITIONS_WORKFLOW,
    PLAN_WORKFLOW,
    PROBE_WORKFLOW,
    RETENTION_WORKFLOW,
    TRUST_REFRESH_WORKFLOW,
)
from schemas.partitions import PartitionsInput, PartitionsReport
from schemas.probes import ProbeRunInput, ProbeRunResult, TrustRefreshInput, TrustRefreshReport
from schemas.retention import RetentionInput, RetentionReport
from store import api_keys, budgets, policy_versions, probes, tenancy
from tests.histories.recorder import Gateway, Recorder, Run
from tests.support.fakes import Step


def post(url: str) -> dict[str, Any]:
    return {"method": "POST", "url": url, "json": {"text": "hello"}}


ECHO = {"hello": "history"}


# Each driver returns the runs it recorded, by path name.
Driver = Callable[[Recorder], Awaitable[dict[str, Run]]]


async def success_echo(rec: Recorder) -> dict[str, Run]:
    gw = await rec.gateway()
    answer = await rec.execute(gw, "demo.echo", ECHO, "success-echo")
    assert answer["status"] == "executed", answer
    return {"success_echo": await rec.latest(answer)}


async def success_http(rec: Recorder) -> dict[str, Run]:
    gw = await rec.gateway()
    url = rec.provider.script("/success", Step(201, {"issue": 7}))
    answer = await rec.execute(gw, "http.request", post(url), "success-http")
    assert answer["status"] == "executed", answer
    return {"success_http": await rec.latest(answer)}


async def success_http_regular(rec: Recorder) -> dict[str, Run]:
    gw = await rec.gateway(local_activities=False)
    url = rec.provider.script("/success-regular", Step(200))
    answer = await rec.execute(gw, "http.request", post(url), "success-regular")
    assert answer["status"] == "executed", answer
    return {"success_http_regular_bookkeeping": await rec.latest(answer)}


async def retried_then_success(rec: Recorder) -> dict[str, Run]:
    gw = await rec.gateway()
    url = rec.provider.script("/flaky", Step(500), Step(502), Step(200))
    answer = await rec.execute(gw, "test.http", post(url), "flaky")
    assert answer["status"] == "executed", answer
    return {"retried_then_success": await rec.latest(answer)}


async def provider_refused(rec: Recorder) -> dict[str, Run]:
    gw = await rec.gateway()
    url = rec.provider.script("/gone", Step(404))
    answer = await rec.execute(gw, "test.http", post(url), "gone")
    assert answer["error"]["code"] == "provider_not_found", answer
    return {"provider_refused": await rec.latest(answer)}


async def dead_letter(rec: Recorder) -> dict[str, Run]:
    gw = await rec.gateway()
    url = rec.provider.script("/down", Step(500))
    answer = await rec.execute(gw, "test.http", post(url), "down")
    assert answer["error"]["code"] == "provider_server_error", answer
    assert len(rec.provider.calls_to("/down")) == 3
    return {"dead_letter": await rec.latest(answer)}


async def timeout(rec: Recorder) -> dict[str, Run]:
    gw = await rec.gateway()
    url = rec.provider.script("/slow", Step(200, delay=4.0))
    answer = await rec.execute(gw, "test.http", post(url), "slow")
    assert answer["error"]["code"] == "timeout", answer
    return {"timeout": await rec.latest(answer)}


async def budget_denied(rec: Recorder) -> dict[str, Run]:
    gw = await rec.gateway()
    async with rec.sessions.begin() as session:
        await budgets.set_budget(session, gw.tenant_id, "demo.echo", 0, "day")
    answer = await rec.execute(gw, "demo.echo", ECHO, "denied")
    assert answer["error"]["code"] == "budget_exceeded", answer
    return {"budget_denied": await rec.latest(answer)}


async def dry_run(rec: Recorder) -> dict[str, Run]:
    gw = await rec.gateway()
    answer = await rec.execute(gw, "demo.echo", ECHO, "dry", dry_run=True)
    assert answer["status"] == "planned", answer
    # A dry run's answer names no run (it has its own workflow id, beside the key's).
    return {"dry_run": await rec.only_run_of(gw.tenant_id)}


async def idempotent_hit(rec: Recorder) -> dict[str, Run]:
    """A new run for a key whose receipt is stored (a gateway racing the first run's end, or
    Temporal having forgotten it): the policy step finds the receipt and the run answers it."""
    gw = await rec.gateway()
    answer = await rec.execute(gw, "demo.echo", ECHO, "hit")
    assert answer["status"] == "executed", answer
    run = await rec.start_direct(gw, "demo.echo", ECHO, "hit", sign=True)
    return {"idempotent_hit_new_run": run}


async def _reset(rec: Recorder, kind: str, *, local_activities: bool = True) -> Run:
    gw = await rec.gateway(local_activities=local_activities)
    key = f"reset-{kind}-{local_activities}"
    answer = await rec.execute(gw, "demo.echo", ECHO, key)
    assert answer["status"] == "executed", answer
    return await rec.reset(await rec.latest(answer), kind)


async def reset_first_task(rec: Recorder) -> dict[str, Run]:
    return {"reset_to_first_task": await _reset(rec, "FirstWorkflowTask")}


async def reset_last_task(rec: Recorder) -> dict[str, Run]:
    return {"reset_to_last_task": await _reset(rec, "LastWorkflowTask")}


async def reset_last_task_regular(rec: Recorder) -> dict[str, Run]:
    run = await _reset(rec, "LastWorkflowTask", local_activities=False)
    return {"reset_to_last_task_regular_bookkeeping": run}


async def terminated_and_resumed(rec: Recorder) -> dict[str, Run]:
    """Ops terminate a run mid-call; the next request with the key resumes the execution."""
    gw = await rec.gateway()
    url = rec.provider.script("/terminated", Step(200, {"sent": True}, delay=3.0))
    first = await rec.execute(gw, "http.request", post(url), "terminated", wait=0)
    assert first["status"] == "accepted", first
    for _ in range(200):
        if rec.provider.calls_to("/terminated"):
            break
        await asyncio.sleep(0.05)
    handle = rec.client.get_workflow_handle(first["workflow_id"])
    terminated = Run(EXECUTE_WORKFLOW, handle.id, (await handle.describe()).run_id)
    await handle.terminate("recording the resumed path")
    again = await rec.execute(gw, "http.request", post(url), "terminated")
    assert again["status"] == "executed", again
    return {
        "terminated_mid_call": terminated,
        "resumed_after_termination": await rec.latest(again),
    }


async def unsigned_start(rec: Recorder) -> dict[str, Run]:
    gw = await rec.gateway()
    return {
        "refused_unsigned_start": await rec.start_direct(
            gw, "demo.echo", ECHO, "unsigned", sign=False
        )
    }


async def _awaiting_approval(rec: Recorder, key: str, ttl: int) -> tuple[Gateway, dict[str, Any]]:
    """A strict policy whose rule holds ``demo.echo`` for approval, and a call waiting."""
    gw = await rec.gateway()
    rule = {"capability": "demo.*", "requires_approval": True, "approval_ttl_seconds": ttl}
    async with rec.sessions.begin() as session:
        await tenancy.set_tenant(session, gw.tenant_id)
        await policy_versions.add(
            session, gw.tenant_id, "strict", {"mode": "strict", "rules": [rule]}, "histories"
        )
    answer = await rec.execute(gw, "demo.echo", ECHO, key)
    assert answer["status"] == "accepted" and answer["approval"], answer
    return gw, answer


async def approval_approved(rec: Recorder) -> dict[str, Run]:
    gw, answer = await _awaiting_approval(rec, "approved", ttl=3600)
    async with rec.sessions.begin() as session:
        approver = await api_keys.create_api_key(session, gw.tenant_id, scopes=["approvals:write"])
    approval = answer["approval"]
    decided = await rec.http.post(
        f"{gw.url}/v1/approvals/{approval['id']}/approve",
        json={"input_hash": approval["input_hash"], "policy_version": approval["policy_version"]},
        headers={"Authorization": f"Bearer {approver}"},
    )
    assert decided.status_code == 200, decided.text
    return {"approval_approved": await rec.latest(answer)}


async def approval_expired(rec: Recorder) -> dict[str, Run]:
    _, answer = await _awaiting_approval(rec, "expired", ttl=1)
    return {"approval_expired": await rec.latest(answer)}


async def retention(rec: Recorder) -> dict[str, Run]:
    """As the retention schedule starts it (no ``as_of``: the run's own start time)."""
    workflow_id = f"manifest-retention-{uuid.uuid4().hex[:8]}"
    handle = await rec.client.start_workflow(
        RETENTION_WORKFLOW,
        RetentionInput(),
        id=workflow_id,
        task_queue=rec.settings.task_queue,
        result_type=RetentionReport,
    )
    await handle.result()
    return {"scheduled_run": Run(RETENTION_WORKFLOW, workflow_id, handle.result_run_id or "")}


async def partitions(rec: Recorder) -> dict[str, Run]:
    """As the partitions schedule starts it (no ``as_of``: the run's own start time)."""
    workflow_id = f"outcome-partitions-{uuid.uuid4().hex[:8]}"
    handle = await rec.client.start_workflow(
        PARTITIONS_WORKFLOW,
        PartitionsInput(),
        id=workflow_id,
        task_queue=rec.settings.task_queue,
        result_type=PartitionsReport,
    )
    await handle.result()
    return {
        "partitions_scheduled_run": Run(
            PARTITIONS_WORKFLOW, workflow_id, handle.result_run_id or ""
        )
    }


async def trust_refresh(rec: Recorder) -> dict[str, Run]:
    """As the trust rollup's schedule starts it."""
    workflow_id = f"moat-trust-rollup-run-{uuid.uuid4().hex[:8]}"
    handle = await rec.client.start_workflow(
        TRUST_REFRESH_WORKFLOW,
        TrustRefreshInput(),
        id=workflow_id,
        task_queue=rec.settings.task_queue,
        result_type=TrustRefreshReport,
    )
    await handle.result()
    return {"refresh_run": Run(TRUST_REFRESH_WORKFLOW, workflow_id, handle.result_run_id or "")}


async def probe_runs(rec: Recorder) -> dict[str, Run]:
    """As a probe's schedule starts it: a probe of demo.echo, then the same probe paused."""
    gw = await rec.gateway()
    async with tenancy.tenant_transaction(rec.sessions, gw.tenant_id) as session:
        row = await probes.insert_probe(
            session,
            gw.tenant_id,
            "demo.echo",
            None,
            {"probe": "demo.echo"},
            None,
            60,
            api_key_id=gw.api_key.split("_", 2)[1],
            scopes=api_keys.DEFAULT_SCOPES,
        )
    runs: dict[str, Run] = {}
    for name in ("probe_executed", "probe_paused"):
        if name == "probe_paused":
            async with tenancy.tenant_transaction(rec.sessions, gw.tenant_id) as session:
                stored = await probes.get_probe(session, gw.tenant_id, row.id)
                assert stored is not None
                await probes.set_paused(session, stored, True)
        workflow_id = f"moat-probe-{row.id}-run-{uuid.uuid4().hex[:8]}"
        handle = await rec.client.start_workflow(
            PROBE_WORKFLOW,
            ProbeRunInput(tenant_id=gw.tenant_id, probe_id=row.id),
            id=workflow_id,
            task_queue=rec.settings.task_queue,
            result_type=ProbeRunResult,
        )
        result = await handle.result()
        assert (result.status == "success") == (name == "probe_executed"), result
        runs[name] = Run(PROBE_WORKFLOW, workflow_id, handle.result_run_id or "")
    return runs


async def _post_plan(
    rec: Recorder, gw: Gateway, plan: dict[str, Any], key: str, *, wait: int = 30
) -> dict[str, Any]:
    headers = {
        "Authorization": f"Bearer {gw.api_key}",
        "Idempotency-Key": key,
        "Prefer": f"wait={wait}",
    }
    body = {"schema_version": "1", **plan}
    response = await rec.http.post(f"{gw.url}/v1/plans", json=body, headers=headers)
    answer: dict[str, Any] = response.json()
    return answer


async def _plan_key(rec: Recorder, gw: Gateway) -> str:
    """A key of the path's tenant that may also resume and cancel plans."""
    async with rec.sessions.begin() as session:
        return await api_keys.create_api_key(
            session, gw.tenant_id, scopes=["execute:*", "outputs:read", "plans:write"]
        )


async def _plan_latest(rec: Recorder, answer: dict[str, Any]) -> Run:
    run = await rec.latest(answer)
    return Run(PLAN_WORKFLOW, run.workflow_id, run.run_id)


def _http_step(step_id: str, url: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "capability_id": "test.http", "input": post(url), **extra}


async def plan_executed(rec: Recorder) -> dict[str, Run]:
    gw = await rec.gateway()
    plan = {
        "steps": [
            {"id": "a", "capability_id": "demo.echo", "input": {"n": 1}},
            {"id": "b", "capability_id": "demo.echo", "input": {"n": "${steps.a.output.n}"}},
            {
                "id": "c",
                "capability_id": "demo.echo",
                "input": {},
                "when": {"step": "b", "status": "failed"},
            },
        ]
    }
    answer = await _post_plan(rec, gw, plan, "plan-executed")
    assert answer["status"] == "executed", answer
    return {"plan_executed": await _plan_latest(rec, answer)}


async def plan_compensated(rec: Recorder) -> dict[str, Run]:
    gw = await rec.gateway()
    made = rec.provider.script("/plan-made", Step(201, {"id": 7}))
    undo = rec.provider.script("/plan-undo", Step(200))
    broken = rec.provider.script("/plan-broken", Step(400))
    plan = {
        "on_failure": "compensate",
        "steps": [
            _http_step(
                "make",
                made,
                compensate={"capability_id": "test.http", "input": post(undo)},
            ),
            _http_step("break", broken),
        ],
    }
    answer = await _post_plan(rec, gw, plan, "plan-compensated")
    assert [s["status"] for s in answer["steps"]] == ["compensated", "failed"], answer
    return {"plan_compensated": await _plan_latest(rec, answer)}


async def plan_resumed(rec: Recorder) -> dict[str, Run]:
    gw = await rec.gateway()
    gw.api_key = await _plan_key(rec, gw)
    first = rec.provider.script("/plan-first", Step(201))
    then = rec.provider.script("/plan-then", Step(400), Step(201))
    plan = {"steps": [_http_step("first", first), _http_step("then", then)]}
    answer = await _post_plan(rec, gw, plan, "plan-resumed")
    assert answer["status"] == "failed", answer
    failed = await _plan_latest(rec, answer)
    resumed = await rec.http.post(
        f"{gw.url}/v1/plans/{answer['plan_id']}/resume",
        json={"effect_did_not_happen": True, "note": "histories"},
        headers={"Authorization": f"Bearer {gw.api_key}", "Prefer": "wait=30"},
    )
    assert resumed.json()["status"] == "executed", resumed.text
    return {"plan_failed": failed, "plan_resumed": await _plan_latest(rec, answer)}


async def plan_cancelled(rec: Recorder) -> dict[str, Run]:
    gw = await rec.gateway()
    gw.api_key = await _plan_key(rec, gw)
    slow = rec.provider.script("/plan-slow", Step(201, delay=2.0))
    never = rec.provider.script("/plan-never", Step(201))
    plan = {"steps": [_http_step("slow", slow), _http_step("never", never)]}
    answer = await _post_plan(rec, gw, plan, "plan-cancelled", wait=0)
    for _ in range(200):
        if rec.provider.calls_to("/plan-slow"):
            break
        await asyncio.sleep(0.05)
    cancelled = await rec.http.post(
        f"{gw.url}/v1/plans/{answer['plan_id']}/cancel",
        json={"note": "histories"},
        headers={"Authorization": f"Bearer {gw.api_key}"},
    )
    assert cancelled.status_code == 202, cancelled.text
    return {"plan_cancelled": await _plan_latest(rec, answer)}


async def plan_approved(rec: Recorder) -> dict[str, Run]:
    gw = await rec.gateway()
    rule = {"capability": "demo.*", "requires_approval": True, "approval_ttl_seconds": 3600}
    async with rec.sessions.begin() as session:
        await tenancy.set_tenant(session, gw.tenant_id)
        await policy_versions.add(
            session, gw.tenant_id, "strict", {"mode": "strict", "rules": [rule]}, "histories"
        )
        approver = await api_keys.create_api_key(session, gw.tenant_id, scopes=["approvals:write"])
    plan = {
        "steps": [
            {"id": "a", "capability_id": "demo.echo", "input": {"n": 1}},
            {"id": "b", "capability_id": "demo.echo", "input": {"n": 2}},
        ]
    }
    answer = await _post_plan(rec, gw, plan, "plan-approved", wait=5)
    approval = answer["approval"]
    assert answer["status"] == "accepted" and approval, answer
    decided = await rec.http.post(
        f"{gw.url}/v1/approvals/{approval['id']}/approve",
        json={"input_hash": approval["input_hash"], "policy_version": approval["policy_version"]},
        headers={"Authorization": f"Bearer {approver}"},
    )
    assert decided.status_code == 200, decided.text
    return {"plan_approved": await _plan_latest(rec, answer)}


@dataclass(frozen=True)
class RecordedPath:
    name: str
    workflow_type: str
    about: str  # what the path is, as its history file says


def _execute(name: str, about: str) -> RecordedPath:
    return RecordedPath(name, EXECUTE_WORKFLOW, about)


def _plan(name: str, about: str) -> RecordedPath:
    return RecordedPath(name, PLAN_WORKFLOW, about)


DRIVERS: dict[Driver, tuple[RecordedPath, ...]] = {
    success_echo: (
        _execute("success_echo", "demo.echo executed: policy, adapter, record, manifest, status"),
    ),
    success_http: (_execute("success_http", "http.request executed against the provider (201)"),),
    success_http_regular: (
        _execute(
            "success_http_regular_bookkeeping",
            "http.request executed, bookkeeping steps as regular activities "
            "(MOAT_LOCAL_ACTIVITIES=false)",
        ),
    ),
    retried_then_success: (
        _execute(
            "retried_then_success", "provider answers 500, 502, then 200: executed on a retry"
        ),
    ),
    provider_refused: (
        _execute("provider_refused", "provider answers 404: failed at once, not retried"),
    ),
    dead_letter: (
        _execute(
            "dead_letter",
            "provider answers 500 every time: retries exhausted, failed, dead-lettered",
        ),
    ),
    timeout: (
        _execute("timeout", "provider slower than the capability's timeout on every attempt"),
    ),
    budget_denied: (
        _execute("budget_denied", "budget of 0: policy denies (budget_exceeded), no adapter call"),
    ),
    dry_run: (_execute("dry_run", "dry_run: policy evaluated, planned, nothing executed"),),
    idempotent_hit: (
        _execute(
            "idempotent_hit_new_run",
            "a new run for a key whose receipt is stored answers that receipt "
            "(replay_reason idempotent_hit), no adapter call",
        ),
    ),
    reset_first_task: (
        _execute(
            "reset_to_first_task",
            "temporal workflow reset to the first workflow task of an executed run: the "
            "policy step finds the run's own receipt (replay_reason workflow_reset)",
        ),
    ),
    reset_last_task: (
        _execute(
            "reset_to_last_task",
            "temporal workflow reset to the last workflow task: the record step answers the "
            "original run's receipt, a replayed manifest is written beside the original",
        ),
    ),
    reset_last_task_regular: (
        _execute(
            "reset_to_last_task_regular_bookkeeping",
            "the same reset, bookkeeping steps as regular activities",
        ),
    ),
    terminated_and_resumed: (
        _execute(
            "terminated_mid_call",
            "an operator terminates the run while the provider call is in flight",
        ),
        _execute(
            "resumed_after_termination",
            "the next request with the key resumes the terminated execution (same receipt "
            "id, the provider's 409 waited out)",
        ),
    ),
    unsigned_start: (
        _execute(
            "refused_unsigned_start",
            "a start through the codec without the start signature: the policy step "
            "refuses it (start_not_signed), the run fails",
        ),
    ),
    approval_approved: (
        _execute(
            "approval_approved",
            "strict policy: the run asks for approval, waits (awaiting_approval), a person "
            "approves through the update, the adapter runs once",
        ),
    ),
    approval_expired: (
        _execute(
            "approval_expired",
            "strict policy: nobody decides within the approval's TTL; the timer fires, the "
            "approval expires, the run fails approval_expired without an adapter call",
        ),
    ),
    retention: (
        RecordedPath(
            "scheduled_run", RETENTION_WORKFLOW, "ManifestRetention as its schedule starts it"
        ),
    ),
    partitions: (
        RecordedPath(
            "partitions_scheduled_run",
            PARTITIONS_WORKFLOW,
            "OutcomePartitions as its schedule starts it",
        ),
    ),
    trust_refresh: (
        RecordedPath(
            "refresh_run", TRUST_REFRESH_WORKFLOW, "RefreshTrust as its schedule starts it"
        ),
    ),
    probe_runs: (
        RecordedPath(
            "probe_executed",
            PROBE_WORKFLOW,
            "RunProbe as a probe's schedule starts it: the signed start prepared, "
            "ExecuteCapability run as its synthetic child",
        ),
        RecordedPath(
            "probe_paused", PROBE_WORKFLOW, "RunProbe of a paused probe: skipped, no child"
        ),
    ),
}
DRIVERS.update(
    {
        plan_executed: (
            _plan(
                "plan_executed",
                "three demo.echo steps: the second uses the first's output, the third is "
                "skipped by its `when`",
            ),
        ),
        plan_compensated: (
            _plan(
                "plan_compensated",
                "on_failure compensate: the second step fails (400), the first is undone",
            ),
        ),
        plan_resumed: (
            _plan("plan_failed", "the second step fails (400): the plan ends failed"),
            _plan(
                "plan_resumed",
                "the failed plan resumed: the first step found done, the second run again "
                "under its next key",
            ),
        ),
        plan_cancelled: (
            _plan(
                "plan_cancelled",
                "cancelled through the update while its first step runs: that step "
                "finishes, the second never starts",
            ),
        ),
        plan_approved: (
            _plan(
                "plan_approved",
                "strict policy: the plan asks once for approval (bound to its digest), a "
                "person approves through the update, both steps run without asking",
            ),
        ),
    }
)
PATHS = {path.name: path for paths in DRIVERS.values() for path in paths}
