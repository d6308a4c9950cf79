"""Failures are encoded by the payload codec: the text of an exception (which may repeat a
secret the run was given) never lands in Temporal's store in clear, while Moat, decoding
through the codec, still reads the real failure and answers with the right error code."""

from __future__ import annotations

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.exceptions import ApplicationError

from activities import Adapter
from activities.adapters import fail
from schemas.records import ErrorTaxonomy
from schemas.run import AdapterInput, AdapterOutput
from tests.support.stack import StackFactory

SECRET = "sk-live-" + "F4il" * 8


async def _provider_refuses(inp: AdapterInput, credential: object = None) -> AdapterOutput:
    raise fail(
        ErrorTaxonomy.PROVIDER_SERVER_ERROR,
        f"provider answered 500 to key {SECRET}",
        http_status=500,
        retryable=False,
    )


async def _adapter_crashes(inp: AdapterInput, credential: object = None) -> AdapterOutput:
    raise RuntimeError(f"library error repeating the header value {SECRET}")


@pytest.mark.parametrize(
    ("adapter", "code", "provider_status"),
    [
        (_provider_refuses, "provider_server_error", 500),
        (_adapter_crashes, "unknown", None),
    ],
    ids=["application-error", "any-exception"],
)
async def test_a_secret_in_a_failure_message_is_stored_encrypted(
    make_stack: StackFactory, adapter: Adapter, code: str, provider_status: int | None
) -> None:
    # demo.echo runs on the planted adapter: one attempt, no retries.
    async with make_stack(adapters={"echo": adapter}) as stack:
        response = await stack.execute("demo.echo", {"note": "fails"}, key=f"leaky-{code}")
        assert response.status_code == 502, response.text
        body = response.json()
        assert body["error"]["code"] == code
        assert body["error"]["details"].get("provider_status") == provider_status
        assert SECRET not in response.text

        # The history exactly as the server stores it.
        history = await stack.client.workflow_service.get_workflow_execution_history(
            GetWorkflowExecutionHistoryRequest(
                namespace=stack.settings.temporal_namespace,
                execution={"workflow_id": body["workflow_id"], "run_id": body["run_id"]},
            )
        )
        failed = [
            e
            for e in history.history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
        ]
        assert len(failed) == 1
        assert SECRET.encode() not in history.SerializeToString()
        failure = failed[0].activity_task_failed_event_attributes.failure
        chain = [failure, *([failure.cause] if failure.HasField("cause") else [])]
        assert all(f.HasField("encoded_attributes") for f in chain)

        # Through the codec, the failure is whole again: message and type.
        decoded: BaseException | None = await stack.client.data_converter.decode_failure(failure)
        errors = []
        while decoded is not None:
            errors.append(decoded)
            decoded = decoded.__cause__
        assert isinstance(errors[0], ApplicationError)
        if provider_status:
            # A failure Moat worded itself is kept whole, secret included, behind the codec.
            assert any(SECRET in str(e) for e in errors)
            assert errors[0].type == "provider_server_error"
        else:
            # An exception Moat did not word is recorded by its type alone, even decoded.
            assert not any(SECRET in str(e) for e in errors)
            assert errors[0].type == "unknown" and "RuntimeError" in errors[0].message
