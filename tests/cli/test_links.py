"""Every link Moat prints or serves keeps each id one path segment: a workflow id
(``exec/<tenant>/<digest>``) is percent-encoded whole, so the Temporal UI finds the run."""

from __future__ import annotations

import io
from urllib.parse import quote, unquote, urlsplit

import pytest
from moat_client import ExecutionResult
from moat_client.models import Envelope
from rich.console import Console

from schemas.execute import Envelope as ServerEnvelope
from schemas.settings import MoatSettings
from starter.cli import execute as execute_command
from starter.gateway import answering
from starter.runtime import links

WORKFLOW_ID = "exec/ten_0123456789/0f1e2d3c4b5a69788796a5b4c3d2e1f0"
RUN_ID = "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"


def test_each_segment_is_encoded_whole() -> None:
    assert links.path("v1", "executions", "r-1") == "/v1/executions/r-1"
    assert links.path("a/b", "c d", "e%f", "g?h#i") == "/a%2Fb/c%20d/e%25f/g%3Fh%23i"
    encoded = links.path(WORKFLOW_ID).removeprefix("/")
    assert "/" not in encoded and unquote(encoded) == WORKFLOW_ID


def test_the_temporal_ui_route() -> None:
    url = links.temporal_run("http://127.0.0.1:8233", "moat", WORKFLOW_ID, RUN_ID)
    assert url == (
        "http://127.0.0.1:8233/namespaces/moat/workflows/"
        "exec%2Ften_0123456789%2F0f1e2d3c4b5a69788796a5b4c3d2e1f0/" + RUN_ID + "/history"
    )
    without_run = links.temporal_run("http://127.0.0.1:8233", "moat", WORKFLOW_ID, None)
    assert without_run.endswith("/workflows/" + quote(WORKFLOW_ID, safe=""))


def workflow_segment(url: str) -> str:
    """The workflow id a Temporal UI link names, checked to be one segment."""
    segments = urlsplit(url).path.split("/")
    assert segments[1:4] == ["namespaces", "moat", "workflows"], url
    assert "/" not in segments[4]
    return unquote(segments[4])


@pytest.mark.parametrize("run_id", [RUN_ID, None])
def test_execute_prints_a_link_the_ui_resolves(
    monkeypatch: pytest.MonkeyPatch, run_id: str | None
) -> None:
    buffer = io.StringIO()
    monkeypatch.setattr(execute_command, "out", Console(file=buffer, width=80))
    envelope = Envelope.model_validate(
        {
            "receipt_id": "r-1",
            "trace_id": "t-1",
            "status": "executed",
            "workflow_id": WORKFLOW_ID,
            "run_id": run_id,
            "output": {"hello": "links"},
        }
    )
    settings = MoatSettings(temporal_namespace="moat")
    execute_command._summary(ExecutionResult(200, envelope, False), settings, 0.1)
    [line] = [x for x in buffer.getvalue().splitlines() if x.startswith("run: ")]
    url = line.removeprefix("run: ")
    assert workflow_segment(url) == WORKFLOW_ID
    if run_id:
        assert urlsplit(url).path.split("/")[5:] == [run_id, "history"]


def test_the_gateway_location_is_one_segment_per_id() -> None:
    envelope = ServerEnvelope.model_validate(
        {"receipt_id": "r/1", "trace_id": "t-1", "status": "accepted"}
    )
    response = answering._response(envelope, b"{}", {})
    assert response.headers["Location"] == "/v1/executions/r%2F1"
