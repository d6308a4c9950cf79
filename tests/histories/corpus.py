"""The recorded histories, and the replayer that runs them as a production worker would.

A history file is ``<workflow folder>/<path>.json`` (``<path>.<patch id>.json`` for a path
recorded again after a change behind ``workflow.patched``): the run's workflow id, what the
path is, and the history as the SDK exports it (``WorkflowHistory.to_json_dict``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer, WorkflowReplayResult

from schemas.settings import MoatSettings
from starter.runtime import observability
from starter.runtime.codec import data_converter
from workflows.execute import ExecuteCapability
from workflows.partitions import OutcomePartitions
from workflows.plan import ExecutePlan
from workflows.probe import RunProbe
from workflows.retention import ManifestRetention
from workflows.trust import RefreshTrust

CORPUS = Path(__file__).resolve().parent
# A key for these histories only; see README.md beside it.
KEYRING = CORPUS / "codec-keys.json"
# One folder per workflow type the worker runs.
FOLDERS = {
    "ExecuteCapability": "execute_capability",
    "ManifestRetention": "manifest_retention",
    "OutcomePartitions": "outcome_partitions",
    "RefreshTrust": "trust_refresh",
    "RunProbe": "run_probe",
    "ExecutePlan": "execute_plan",
}
# The workflows a production worker registers (worker.build_worker).
WORKFLOWS: tuple[type, ...] = (
    ExecuteCapability,
    ManifestRetention,
    OutcomePartitions,
    RefreshTrust,
    RunProbe,
    ExecutePlan,
)


@dataclass(frozen=True)
class Recorded:
    file: Path
    workflow_id: str
    run_id: str
    about: str
    history: WorkflowHistory

    @property
    def name(self) -> str:
        return str(self.file.relative_to(CORPUS))

    @property
    def workflow_type(self) -> str:
        started = self.history.events[0].workflow_execution_started_event_attributes
        return started.workflow_type.name


def history_file(workflow_type: str, path: str, patch: str | None = None) -> Path:
    return CORPUS / FOLDERS[workflow_type] / f"{path}{'.' + patch if patch else ''}.json"


def write(file: Path, history: WorkflowHistory, run_id: str, about: str) -> None:
    """One event a line: compact, and a reader (or a diff) still sees the events in order."""
    head = {"workflow_id": history.workflow_id, "run_id": run_id, "about": about}
    events: list[dict[str, Any]] = history.to_json_dict()["events"]
    text = "{\n" + "".join(f" {json.dumps(k)}: {json.dumps(v)},\n" for k, v in head.items())
    text += ' "history": {"events": [\n'
    text += ",\n".join("  " + json.dumps(event, separators=(",", ":")) for event in events)
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(text + "\n ]}\n}\n")


def load(file: Path) -> Recorded:
    doc = json.loads(file.read_text())
    history = WorkflowHistory.from_json(doc["workflow_id"], doc["history"])
    # The replayer names the run after its started event, but a run made by a reset starts
    # with a copy of the reset run's event. A worker knows the run by its own id (the one
    # the workflow reads, workflow.info().run_id), so the replay is given that id too.
    started = history.events[0].workflow_execution_started_event_attributes
    started.original_execution_run_id = doc["run_id"]
    return Recorded(file, doc["workflow_id"], doc["run_id"], doc["about"], history)


def corpus() -> list[Recorded]:
    """Every recorded history, in a stable order."""
    return [
        load(f) for folder in FOLDERS.values() for f in sorted((CORPUS / folder).glob("*.json"))
    ]


def replayer(workflows: Sequence[type] = WORKFLOWS) -> Replayer:
    """Replays as ``worker.py``'s Worker runs: the same workflows, the production data
    converter (here with the corpus' own key) and the production interceptors."""
    settings = MoatSettings(codec_keyring=KEYRING)
    return Replayer(
        workflows=list(workflows),
        data_converter=data_converter(settings),
        interceptors=observability.temporal_interceptors(),
    )


async def replay(recorded: Recorded, workflows: Sequence[type] = WORKFLOWS) -> WorkflowReplayResult:
    """The replay of one history; its ``replay_failure`` holds any non-determinism."""
    return await replayer(workflows).replay_workflow(
        recorded.history, raise_on_replay_failure=False
    )


async def failures(
    histories: Sequence[Recorded], workflows: Sequence[type] = WORKFLOWS
) -> dict[str, Exception]:
    """The histories that do not replay against ``workflows``, by file name, with why."""

    async def each() -> AsyncIterator[WorkflowHistory]:
        for recorded in histories:
            yield recorded.history

    by_run = {recorded.run_id: recorded.name for recorded in histories}
    results = await replayer(workflows).replay_workflows(each(), raise_on_replay_failure=False)
    return {by_run[run_id]: err for run_id, err in results.replay_failures.items()}
