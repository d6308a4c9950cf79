"""What the chaos campaign checks once the load has stopped: a drain, then every invariant
from Moat's own records (PostgreSQL, Temporal, the manifests on disk) against what the
callers were answered and what the providers hold. Prints the table; ``Verdict.ok`` is the
campaign's exit status.

The effects are checked per capability, by its idempotency strategy:

* ``provider_key`` and ``reconcile`` (an effect created per key): an executed key has
  exactly one effect at the provider, the one its answer names; a key that ended
  ``outcome_unknown`` has at most one; any other failure, none. Never two.
* ``natural`` (an undo: delete a message, close an issue): an executed key left the provider
  in the state asked, changed by exactly one call (the repeats found it done and were
  answered as done); a key failed with the provider's "not found" / "invalid" while the
  state was reached means a repeat was taken for an error.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from sqlalchemy import func, select
from temporalio.client import Client

from bench.chaos_tools import NATURAL, RECONCILE, TOOLS, provider_of
from schemas.names import EXECUTE_WORKFLOW
from starter.cli.manifests import VALID, check_manifest
from starter.runtime.database import owner_transaction
from store.keyrings.signing import Keyring
from store.models import ManifestRow, ReceiptRow, RunRow

if TYPE_CHECKING:
    from bench.chaos import Key
    from bench.chaos_stack import ChaosStack


@dataclass
class Verdict:
    """The table's rows: (check, found, expected, ok); ``ok`` is None for a figure."""

    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(row["ok"] is not False for row in self.rows)

    def info(self, name: str, found: Any) -> None:
        self.rows.append({"check": name, "found": found, "expected": "", "ok": None})

    def expect(self, name: str, found: Any, expected: Any, ok: bool, detail: str = "") -> None:
        row = {"check": name, "found": found, "expected": expected, "ok": ok}
        if detail and not ok:
            row["detail"] = detail
        self.rows.append(row)


@dataclass(frozen=True)
class Observed:
    """Moat's records of the campaign's keys, read after the drain."""

    receipts: Mapping[str, list[tuple[str, str]]]  # key -> [(receipt id, status)]
    unfinished_runs: int
    running_workflows: int
    manifests: Sequence[tuple[str, str, str]]  # (receipt id, path, sha256)
    # Manifests of runs that answered an already recorded receipt, by replay reason.
    replayed_manifests: Mapping[str, int] = field(default_factory=dict)


# What a provider answers a repeat of an undo already done: a natural capability must take
# it as done, not fail with it.
REPEAT_REFUSALS = frozenset({"provider_not_found", "provider_invalid_input"})


def evaluate(
    keys: Sequence[Key],
    observed: Observed,
    effects: Mapping[str, list[str]],
    manifest_verdicts: Mapping[str, bool],
    rebuild: tuple[int, str],
    requests: int | None = None,
    undone: Mapping[str, tuple[bool, int]] | None = None,
) -> Verdict:
    """Every invariant, from the callers' answers (``keys``), Moat's records, the effects
    per key the providers hold (``effects``: campaign key → an id per effect) and, for an
    undo key, the provider's state (``undone``: reached, changes). Pure, so a test can hand
    it a broken run."""
    v = Verdict()
    if requests is not None:
        v.info("requests sent", requests)
    skipped = [k for k in keys if not k.sent]
    keys = [k for k in keys if k.sent]
    dup = sum(1 for k in keys if k.senders > 1)
    v.info("keys", f"{len(keys)} ({dup} sent 2-5 times at once)")
    if skipped:
        v.info("undo keys not sent (their key did not execute)", len(skipped))
    answered = [k for k in keys if k.answered]
    v.expect("keys answered", len(answered), len(keys), len(answered) == len(keys),
             _names(k.key for k in keys if not k.answered))  # fmt: skip
    unexpected = [k for k in keys if k.unexpected]
    v.expect("unexpected answers (4xx to a valid retry)", len(unexpected), 0, not unexpected,
             "; ".join(f"{k.key}: {k.unexpected[0]}" for k in unexpected[:3]))  # fmt: skip
    wrong = [
        k.key
        for k in answered
        if len(k.receipt_ids) != 1
        or [r for r, _ in observed.receipts.get(k.key, [])] != list(k.receipt_ids)
    ]
    v.expect("receipts: exactly one per answered key, the one answered",
             f"{len(answered) - len(wrong)}/{len(answered)}", "all", not wrong,
             _names(wrong))  # fmt: skip
    succeeded = [k for k in answered if k.statuses == {"executed"}]
    failed = [k for k in answered if k.statuses == {"failed"}]
    mixed = [k.key for k in answered if len(k.statuses) > 1]
    v.info("executed / failed (provider kept failing)", f"{len(succeeded)} / {len(failed)}")
    v.expect("keys answered both executed and failed", len(mixed), 0, not mixed, _names(mixed))
    for capability in sorted({k.capability for k in keys}, key=_in_tools_order):
        mine = [k for k in answered if k.capability == capability and len(k.statuses) == 1]
        if any(k.strategy == NATURAL for k in mine):
            _natural(v, capability, mine, undone or {})
        elif mine:
            _created(v, capability, mine[0].strategy, mine, effects)
    duplicates = sum(max(0, len(found) - 1) for found in effects.values())
    v.expect("duplicate effects (every capability)", duplicates, 0, duplicates == 0,
             _names(k for k, found in effects.items() if len(found) > 1))  # fmt: skip
    http = {k.key for k in keys if k.capability == "http.request"}
    two_keys = [k for k, found in effects.items() if k in http and len(set(found)) > 1]
    v.expect("http.request: Idempotency-Keys per campaign key",
             "1" if not two_keys else ">1", 1, not two_keys, _names(two_keys))  # fmt: skip
    v.expect("executions never finished (after the drain)",
             observed.running_workflows + observed.unfinished_runs, 0,
             observed.running_workflows + observed.unfinished_runs == 0,
             f"{observed.running_workflows} workflows running, "
             f"{observed.unfinished_runs} runs without completion")  # fmt: skip
    receipt_ids = {r for found in observed.receipts.values() for r, _ in found}
    with_manifest = {receipt for receipt, _, _ in observed.manifests}
    bad = [path for path, good in manifest_verdicts.items() if not good]
    v.info("runs that replayed a recorded receipt (no tool repeated)",
           _replays(observed.replayed_manifests))  # fmt: skip
    v.expect("manifests that verify",
             f"{len(manifest_verdicts) - len(bad)}/{len(manifest_verdicts)}, "
             f"{len(receipt_ids & with_manifest)}/{len(receipt_ids)} receipts have one",
             "all", not bad and receipt_ids <= with_manifest,
             _names(bad or sorted(receipt_ids - with_manifest)))  # fmt: skip
    code, text = rebuild
    v.expect("moat runs rebuild --verify", "clean" if code == 0 else f"exit {code}", "clean",
             code == 0, text)  # fmt: skip
    # Accepted means a gateway answered with a receipt id: from then on it is Moat's to keep.
    lost = [k.key for k in keys if k.receipt_ids and not observed.receipts.get(k.key)]
    v.expect("lost executions (accepted, no receipt)", len(lost), 0, not lost, _names(lost))
    return v


def _created(
    v: Verdict, capability: str, strategy: str, keys: Sequence[Key],
    effects: Mapping[str, list[str]],
) -> None:  # fmt: skip
    """One effect per executed key, the one answered; at most one per ``outcome_unknown``
    key; none behind any other failure."""
    executed = [k for k in keys if k.statuses == {"executed"}]
    unknown = [k for k in keys if k.statuses == {"failed"} and k.outcome_unknown]
    failed = [k for k in keys if k.statuses == {"failed"} and not k.outcome_unknown]
    # An answer the look-up found: the earlier attempt's effect, its answer lost.
    found = sum(1 for k in executed if k.output is not None and k.output.get("reconciled") is True)
    v.info(f"{capability} ({strategy}): executed / outcome_unknown / failed",
           f"{len(executed)} / {len(unknown)} / {len(failed)}{_codes(failed)}"
           + (f"; {found} found by a look-up" if strategy == RECONCILE else "")
           + _latency(keys))  # fmt: skip
    not_one = [k.key for k in executed if len(effects.get(k.key, [])) != 1]
    counts = Counter(len(effects.get(k.key, [])) for k in executed)
    v.expect(f"{capability}: effects per executed key", _spread(counts), "exactly 1",
             not not_one, _names(not_one))  # fmt: skip
    tool = next((t for t in TOOLS if t.capability == capability), None)
    if tool is not None and tool.answer_id is not None:
        answer_id = tool.answer_id
        wrong = [
            k.key
            for k in executed
            if k.output is None or effects.get(k.key, []) != [answer_id(k.output)]
        ]
        v.expect(f"{capability}: the answer names the key's own effect",
                 f"{len(executed) - len(wrong)}/{len(executed)}", "all", not wrong,
                 _names(wrong))  # fmt: skip
    over = [k.key for k in unknown if len(effects.get(k.key, [])) > 1]
    held = sum(1 for k in unknown if effects.get(k.key))
    v.expect(f"{capability}: outcome_unknown keys, at most 1 effect each",
             f"{len(unknown)} ({held} with its effect)", "<= 1 effect each", not over,
             _names(over))  # fmt: skip
    after_failure = [f"{k.key}{_codes([k])}" for k in failed if effects.get(k.key)]
    v.expect(f"{capability}: effects behind a failure receipt", len(after_failure), 0,
             not after_failure, _names(after_failure))  # fmt: skip


def _natural(
    v: Verdict, capability: str, keys: Sequence[Key], undone: Mapping[str, tuple[bool, int]]
) -> None:
    """An executed undo left the state asked, changed once; no repeat failed as a refusal."""
    executed = [k for k in keys if k.statuses == {"executed"}]
    failed = [k for k in keys if k.statuses == {"failed"}]
    v.info(f"{capability} (natural): executed / failed",
           f"{len(executed)} / {len(failed)}{_codes(failed)}{_latency(keys)}")  # fmt: skip
    wrong = [k.key for k in executed if undone.get(k.key) != (True, 1)]
    v.expect(f"{capability}: executed keys in the state asked, changed once",
             f"{len(executed) - len(wrong)}/{len(executed)}", "all", not wrong,
             _names(f"{k}: {undone.get(k)}" for k in wrong))  # fmt: skip
    refused = [
        k.key
        for k in failed
        if k.error_codes & REPEAT_REFUSALS and undone.get(k.key, (False, 0))[0]
    ]
    v.expect(f"{capability}: repeats failed as refusals (the state was reached)",
             len(refused), 0, not refused, _names(refused))  # fmt: skip
    # A figure: a natural change repeated under any key changes nothing more.
    reached = [f"{k.key}{_codes([k])}" for k in failed if undone.get(k.key, (False, 0))[0]]
    v.info(f"{capability}: failed keys whose state was reached all the same",
           f"{len(reached)}" + (f": {_names(reached)}" if reached else ""))  # fmt: skip


def _latency(keys: Sequence[Key]) -> str:
    """Median and 95th percentile of the keys' time to a final answer, retries included."""
    times = sorted(k.seconds for k in keys if k.seconds is not None)
    if not times:
        return ""
    p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
    return f"; answered in {times[len(times) // 2]:.1f} s median, {p95:.1f} s p95"


def _codes(failed: Sequence[Key]) -> str:
    """The error codes of failed keys, e.g. `` (provider_rate_limited 2)``."""
    codes = Counter(code for k in failed for code in k.error_codes)
    why = ", ".join(f"{code} {n}" for code, n in sorted(codes.items()))
    return f" ({why})" if why else ""


def _in_tools_order(capability: str) -> tuple[int, str]:
    """Each tool's capability, then its undo, in the order of ``TOOLS``."""
    order = [c for t in TOOLS for c in (t.capability, t.undo.capability if t.undo else "")]
    return (order.index(capability) if capability in order else len(order), capability)


async def check(
    stack: ChaosStack, keys: Sequence[Key], requests: int, *, drain_until: float
) -> Verdict:
    """Drain, read the records, verify the manifests, run the rebuild check; the verdict."""
    running = await _drain(stack, drain_until)
    observed = await _observe(stack, keys, running)
    jwks = Keyring.load(stack.settings.signing_keyring_path).jwks()
    verdicts = await asyncio.to_thread(_verify_manifests, observed.manifests, jwks)
    rebuild = await asyncio.to_thread(_rebuild_verify, stack)
    providers = stack.providers
    effects: dict[str, list[str]] = {}
    for provider in providers.values():
        effects.update(provider.created())
    undone = {
        k.key: providers[provider_of(k.target.capability)].undone(k.input)
        for k in keys
        if k.sent and k.target is not None
    }
    return evaluate(keys, observed, effects, verdicts, rebuild, requests, undone)


async def _drain(stack: ChaosStack, until: float) -> int:
    """Wait until no execution runs any more (or ``until``); how many still run."""
    client = await Client.connect(
        stack.temporal.address, namespace=stack.settings.temporal_namespace
    )
    query = (
        f'TaskQueue="{stack.settings.task_queue}" AND WorkflowType="{EXECUTE_WORKFLOW}" '
        'AND ExecutionStatus="Running"'
    )
    while True:
        running = (await client.count_workflows(query)).count
        if running == 0 or time.monotonic() > until:
            return running
        await asyncio.sleep(2)


async def _observe(stack: ChaosStack, keys: Sequence[Key], running: int) -> Observed:
    wanted = {k.key for k in keys}
    tenant = stack.tenant_id
    async with owner_transaction(stack.settings) as session:
        rows = await session.execute(
            select(ReceiptRow.idempotency_key, ReceiptRow.id, ReceiptRow.status)
            .where(ReceiptRow.tenant_id == tenant)
            .order_by(ReceiptRow.recorded_at)
        )
        receipts: dict[str, list[tuple[str, str]]] = {}
        for key, receipt_id, status in rows:
            if key in wanted:
                receipts.setdefault(key, []).append((receipt_id, status))
        unfinished = await session.scalar(
            select(func.count())
            .select_from(RunRow)
            .where(RunRow.tenant_id == tenant, RunRow.completed_at.is_(None))
        )
        manifests = (
            await session.execute(
                select(
                    ManifestRow.receipt_id,
                    ManifestRow.path,
                    ManifestRow.sha256,
                    ManifestRow.replayed,
                ).where(ManifestRow.tenant_id == tenant)
            )
        ).all()
    reasons = Counter(_replay_reason(path) for _, path, _, replayed in manifests if replayed)
    return Observed(
        receipts, int(unfinished or 0), running, [(r, p, d) for r, p, d, _ in manifests], reasons
    )


# What the SDK logs when an attempt finishes after Temporal timed it out and moved on.
STALE_ATTEMPT = "Activity not found on completion"


def stale_attempts(logs: Path) -> int:
    """Attempts a live worker finished after Temporal had timed them out (heartbeat or
    start-to-close) and scheduled the retry: a figure of how starved the workers were."""
    found = 0
    for log in logs.glob("worker-*.log"):
        with log.open(errors="replace") as lines:
            found += sum(1 for line in lines if STALE_ATTEMPT in line)
    return found


def _replay_reason(path: str) -> str:
    try:
        manifest = json.loads(Path(path).read_bytes())
        return str(manifest["metadata"].get("replay_reason") or "unknown")
    except (OSError, ValueError, KeyError, AttributeError):
        return "unreadable"  # the manifest check reports the file


# Why a run can answer a receipt that is already recorded, for the table.
REPLAY_REASONS = {
    # A new run for a key whose run had completed: the gateway starts a new run only after
    # a failed one, so this means Temporal no longer knew the completed run (lost in a
    # crash, or past retention) while the gateway's read missed the receipt.
    "idempotent_hit": "new run for a completed execution",
    # The same run re-ran its first step after recording: Temporal lost the history past
    # the policy step (crash of its store) or an operator reset the run.
    "workflow_reset": "run re-ran after recording",
}


def _replays(reasons: Mapping[str, int]) -> str:
    if not reasons:
        return "0"
    parts = [f"{n} {REPLAY_REASONS.get(r, r)} ({r})" for r, n in sorted(reasons.items())]
    return f"{sum(reasons.values())}: " + ", ".join(parts)


def _verify_manifests(
    manifests: Iterable[tuple[str, str, str]], jwks: Mapping[str, Any]
) -> dict[str, bool]:
    """Each manifest file: the bytes its index row hashed, and every signature valid."""
    verdicts = {}
    for _, path, digest in manifests:
        try:
            data = Path(path).read_bytes()
        except OSError:
            verdicts[path] = False
            continue
        same = f"sha256:{hashlib.sha256(data).hexdigest()}" == digest
        verdicts[path] = same and check_manifest(data, jwks)[0] == VALID
    return verdicts


def _rebuild_verify(stack: ChaosStack) -> tuple[int, str]:
    """``moat runs rebuild --verify`` as an operator runs it, on the campaign's tenant."""
    settings = stack.settings
    env = settings.child_environment(home=str(settings.home), database_url=stack.postgres.url)
    done = subprocess.run(
        [sys.executable, "-m", "starter.cli", "runs", "rebuild", "--verify",
         "--tenant", stack.tenant_id],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return done.returncode, (done.stdout + done.stderr).strip()[-500:]


def _names(keys: Iterable[str], most: int = 5) -> str:
    found = list(keys)
    more = f" and {len(found) - most} more" if len(found) > most else ""
    return ", ".join(found[:most]) + more


def _spread(counts: Counter[int]) -> str:
    if not counts:
        return "no executed key"
    return ", ".join(f"{n} effect(s): {keys} keys" for n, keys in sorted(counts.items()))


def render(report: Mapping[str, Any], verdict: Verdict, console: Console) -> None:
    table = Table(title="chaos campaign", title_justify="left")
    table.add_column("invariant")
    table.add_column("found", justify="right")
    table.add_column("expected", justify="right")
    table.add_column("")
    for row in verdict.rows:
        mark = {True: "[green]ok[/]", False: "[red]FAIL[/]", None: ""}[row["ok"]]
        table.add_row(row["check"], str(row["found"]), str(row["expected"]), mark)
    console.print(table)
    for row in verdict.rows:
        if row.get("detail"):
            console.print(f"[red]{row['check']}[/]: {row['detail']}", soft_wrap=True)
    console.print(
        f"requests sent {report['requests']}; worker kills {report['worker_kills']}; "
        f"provider faults {report['faults_injected']}; answers retried {report['retried_answers']}"
    )
    for event in report["events"]:
        console.print(f"  at {event['at_s']:>6.1f} s: {event['what']} ({event['seconds']} s)")
    load = report["environment"]["loadavg_1m_before_after"]
    console.print(f"machine load (1 min) before/after: {load[0]} / {load[1]}")
    console.print("[bold green]all invariants hold[/]" if verdict.ok else "[bold red]FAILED[/]")
