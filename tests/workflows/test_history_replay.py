"""Workflow changes never break running executions: every recorded history (tests/histories)
replays against the current workflow code, as a production worker would replay it, with no
non-determinism. Runs locally: no Temporal server, no PostgreSQL.

A change that fails here alters the commands of a path runs may still be on; see the
versioning rule in docs/architecture.md (Changing a workflow).
"""

from __future__ import annotations

import pytest
from temporalio.workflow import NondeterminismError

from schemas.names import EXECUTE_WORKFLOW, RETENTION_WORKFLOW
from tests.histories.corpus import Recorded, corpus, failures, replay
from tests.histories.paths import PATHS
from tests.histories.variants import (
    DryRunStatusUnguarded,
    FailedRunUnguarded,
    PathsIgnored,
    StatusBeforeManifest,
    TimerBeforePolicy,
)
from workflows.execute import (
    DRY_RUN_STATUS_PATCH,
    FAILED_RUN_PATCH,
    PATCHES_PATCH,
    PATHS_VERSION,
    RECORD_IN_CALL_PATCH,
)
from workflows.partitions import OutcomePartitions
from workflows.plan import ExecutePlan
from workflows.probe import RunProbe
from workflows.retention import ManifestRetention
from workflows.trust import RefreshTrust

CORPUS = corpus()
# The workflows a variant of ExecuteCapability is replayed beside, unchanged.
OTHERS = (ManifestRetention, OutcomePartitions, RefreshTrust, RunProbe, ExecutePlan)


def _of(workflow_type: str) -> set[str]:
    return {r.name for r in CORPUS if r.workflow_type == workflow_type}


def test_the_corpus_holds_every_path() -> None:
    recorded = {r.file.name.split(".")[0] for r in CORPUS}
    assert recorded == set(PATHS), "record the missing paths: python -m tests.histories.record"


@pytest.mark.parametrize("recorded", CORPUS, ids=lambda r: r.name)
async def test_every_recorded_history_replays(recorded: Recorded) -> None:
    failure = (await replay(recorded)).replay_failure
    assert failure is None, f"{recorded.name} ({recorded.about}) no longer replays: {failure}"


async def test_a_command_inserted_before_the_policy_step_is_caught() -> None:
    failed = await failures(CORPUS, [TimerBeforePolicy, *OTHERS])
    assert set(failed) == _of(EXECUTE_WORKFLOW)  # every path of the changed workflow, no other
    assert all(isinstance(err, NondeterminismError) for err in failed.values())
    assert _of(RETENTION_WORKFLOW)


async def test_two_commands_swapped_are_caught() -> None:
    failed = await failures(CORPUS, [StatusBeforeManifest, *OTHERS])
    # Local activities' markers are matched by their sequence number, not by their place
    # among the other commands, so this swap shows only where the manifest step is a
    # regular activity (or where it adds a command). The rule asks for a patch all the same.
    assert {
        "execute_capability/success_http_regular_bookkeeping.json",
        "execute_capability/reset_to_last_task_regular_bookkeeping.json",
    } <= set(failed)
    assert all(isinstance(err, NondeterminismError) for err in failed.values())


async def test_a_change_behind_its_patch_replays_the_runs_before_it() -> None:
    # Dry runs set their status since the patch; one recorded before it and one after.
    before = "execute_capability/dry_run.json"
    after = f"execute_capability/dry_run.{DRY_RUN_STATUS_PATCH}.json"
    dry_runs = [r for r in CORPUS if r.name in (before, after)]
    assert len(dry_runs) == 2
    assert await failures(dry_runs) == {}
    # The same change without the guard: the dry runs started before it would fail.
    unguarded = await failures(dry_runs, [DryRunStatusUnguarded, *OTHERS])
    assert isinstance(unguarded.get(before), NondeterminismError)


# The paths whose execution fails: since the patch their runs end failed.
FAILED_PATHS = ("provider_refused", "dead_letter", "timeout", "budget_denied", "approval_expired")


async def test_failed_runs_end_failed_behind_their_patch() -> None:
    # A failed execution's run ends failed since the patch; the runs before it completed.
    runs = [r for r in CORPUS if r.file.name.split(".")[0] in FAILED_PATHS]
    # Recorded behind the patch, or behind one that stands for every patch before it, or
    # with the paths recorded in the check's outcome.
    guards = (
        f".{FAILED_RUN_PATCH}.",
        f".{PATCHES_PATCH}.",
        f".{RECORD_IN_CALL_PATCH}.",
        f".paths-{PATHS_VERSION}.",
    )
    after = {r.name for r in runs if any(guard in r.file.name for guard in guards)}
    before = {r.name for r in runs} - after
    assert {name.split("/")[1].split(".")[0] for name in after} == set(FAILED_PATHS)
    assert await failures(runs) == {}
    # The same change without the guard: every run recorded before it would fail.
    unguarded = await failures(runs, [FailedRunUnguarded, *OTHERS])
    assert before <= set(unguarded)
    assert all(isinstance(err, NondeterminismError) for err in unguarded.values())


async def test_runs_take_the_paths_their_policy_check_recorded() -> None:
    # A run of PATHS_VERSION has no patch marker: the paths it takes are in its check's
    # outcome. Ignoring them, every run that got past its check would fail to replay.
    runs = [r for r in CORPUS if f".paths-{PATHS_VERSION}." in r.file.name]
    executions = {name for name, path in PATHS.items() if path.workflow_type == EXECUTE_WORKFLOW}
    assert {r.file.name.split(".")[0] for r in runs} == executions
    assert await failures(runs) == {}
    ignored = await failures(runs, [PathsIgnored, *OTHERS])
    # Those that end before a patched path: refused at the check, terminated mid-call, or
    # recorded as their approval is decided.
    unpatched = {"refused_unsigned_start", "terminated_mid_call", "approval_approved"}
    assert {name.split("/")[1].split(".")[0] for name in ignored} == executions - unpatched
