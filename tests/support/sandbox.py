"""Each workflow class is validated in Temporal's sandbox once per test process.

Building a ``Worker`` validates every workflow it registers by instantiating it in a fresh
sandbox (re-importing its modules there): about three quarters of a test stack's set-up,
and every stack builds two workers. The validation of one class under the same sandbox
settings gives the same answer each time, so the suite keeps the answer of the first one
that passes; a class that fails is validated (and fails) every time. Runs themselves are
untouched: each still gets a sandbox of its own. The root ``conftest.py`` registers this
plugin.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner


@pytest.fixture(scope="session", autouse=True)
def _validate_each_workflow_once() -> Iterator[None]:
    validate = SandboxedWorkflowRunner.prepare_workflow
    # Keyed by identity; the value holds the objects so that no id is reused.
    passed: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    def prepare_workflow(self: SandboxedWorkflowRunner, defn: Any) -> None:
        failure_types = tuple(self._worker_level_failure_exception_types)
        key = (id(self.restrictions), self.runner_class, id(defn), failure_types)
        if key in passed:
            return
        validate(self, defn)
        passed[key] = (self.restrictions, defn)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SandboxedWorkflowRunner, "prepare_workflow", prepare_workflow)
        yield
