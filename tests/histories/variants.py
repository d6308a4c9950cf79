"""Copies of ``ExecuteCapability`` changed as the versioning rule forbids: commands of
existing paths added or moved without ``workflow.patched``. Replaying the corpus against
them must fail, or the replay test would not catch the changes it exists for."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from schemas.execute import EnvelopeStatus
    from schemas.names import EXECUTE_WORKFLOW
    from schemas.records import Receipt
    from schemas.run import ExecuteResult, ExecuteWorkflowInput, PolicyOutcome
from workflows.execute import STATUS_ATTR, ExecuteCapability


@workflow.defn(name=EXECUTE_WORKFLOW)
class TimerBeforePolicy(ExecuteCapability):
    """A timer inserted before the policy step: the first command of every path changes."""

    @workflow.run
    async def run(self, req: ExecuteWorkflowInput) -> ExecuteResult:
        await workflow.sleep(timedelta(seconds=1))
        return await super().run(req)


@workflow.defn(name=EXECUTE_WORKFLOW)
class StatusBeforeManifest(ExecuteCapability):
    """Two commands swapped: the status is set before the manifest step, not after."""

    @workflow.run
    async def run(self, req: ExecuteWorkflowInput) -> ExecuteResult:
        return await super().run(req)

    async def _manifest(
        self, req: ExecuteWorkflowInput, receipt: Receipt, *a: Any, **k: Any
    ) -> None:
        super()._set_status(receipt)
        await super()._manifest(req, receipt, *a, **k)

    def _set_status(self, receipt: Receipt) -> None:
        pass  # already set, before the manifest


@workflow.defn(name=EXECUTE_WORKFLOW)
class DryRunStatusUnguarded(ExecuteCapability):
    """The dry-run status step as it would be without its ``workflow.patched`` guard."""

    @workflow.run
    async def run(self, req: ExecuteWorkflowInput) -> ExecuteResult:
        return await super().run(req)

    def _planned(self, policy: PolicyOutcome) -> ExecuteResult:
        planned = STATUS_ATTR.value_set(EnvelopeStatus.PLANNED.value)
        workflow.upsert_search_attributes([planned])
        return ExecuteResult(plan=policy)


@workflow.defn(name=EXECUTE_WORKFLOW)
class FailedRunUnguarded(ExecuteCapability):
    """A failed execution's run ending failed without the ``workflow.patched`` guard."""

    @workflow.run
    async def run(self, req: ExecuteWorkflowInput) -> ExecuteResult:
        return await super().run(req)

    def _ended(self, result: ExecuteResult) -> ExecuteResult:
        code = result.failed_code()
        if code is None:
            return result
        raise ApplicationError("execution failed", result, type=code, non_retryable=True)


@workflow.defn(name=EXECUTE_WORKFLOW)
class PathsIgnored(ExecuteCapability):
    """A run that ignores the paths its policy check's outcome records (``PATHS_VERSION``): it takes
    the paths of a run with no patch marker, as a run recorded before any patch."""

    @workflow.run
    async def run(self, req: ExecuteWorkflowInput) -> ExecuteResult:
        return await super().run(req)

    @property
    def _paths_version(self) -> int:
        return 0

    @_paths_version.setter
    def _paths_version(self, recorded: int) -> None:
        pass  # ignored
