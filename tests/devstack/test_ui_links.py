"""The run link `moat execute` prints opens in the Temporal Web UI: fetched from a dev
server with its UI, the page answers and the UI's own API finds the run under the id the
link names. tests/browser/test_links.py opens it in a real browser."""

from __future__ import annotations

import io
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx
import pytest
from moat_client import ExecutionResult
from moat_client.models import Envelope
from rich.console import Console
from temporalio.client import Client

from schemas.settings import MoatSettings
from starter.cli import execute as execute_command
from starter.devstack import TemporalDevServer, free_port
from starter.devstack.processes import run_sync

WORKFLOW_ID = "exec/ten_linkcheck0000000/0f1e2d3c4b5a69788796a5b4c3d2e1f0"


async def _start(address: str) -> str:
    client = await Client.connect(address, namespace="moat")
    handle = await client.start_workflow("NobodyRunsThis", id=WORKFLOW_ID, task_queue="nobody")
    assert handle.result_run_id is not None
    return handle.result_run_id


def printed_link(ui_port: int, run_id: str, monkeypatch: pytest.MonkeyPatch) -> str:
    buffer = io.StringIO()
    monkeypatch.setattr(execute_command, "out", Console(file=buffer, width=80))
    envelope = Envelope.model_validate(
        {"trace_id": "t", "status": "accepted", "workflow_id": WORKFLOW_ID, "run_id": run_id}
    )
    settings = MoatSettings(temporal_ui_port=ui_port, temporal_namespace="moat")
    execute_command._summary(ExecutionResult(202, envelope, False), settings, 0.1)
    [line] = [x for x in buffer.getvalue().splitlines() if x.startswith("run: ")]
    return line.removeprefix("run: ")


def test_the_run_link_opens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = TemporalDevServer(free_port(), free_port(), "moat", log_file=tmp_path / "t.log")
    with server:
        run_id = run_sync(_start(server.address))
        link = printed_link(server.ui_port, run_id, monkeypatch)
        assert link.startswith(server.ui_url + "/namespaces/moat/workflows/")
        assert httpx.get(link, timeout=10).status_code == 200
        # The page asks the UI's API for the run by the segment the link names.
        segments = urlsplit(link).path.split("/")
        assert unquote(segments[4]) == WORKFLOW_ID and segments[5] == run_id
        described = _describe(server.ui_url, segments[4], run_id)
        assert described.status_code == 200, described.text
        assert described.json()["workflowExecutionInfo"]["execution"]["workflowId"] == WORKFLOW_ID
        # The id with its slashes raw is other segments: the UI finds no such run.
        assert _describe(server.ui_url, WORKFLOW_ID, run_id).status_code == 404


def _describe(ui_url: str, segment: str, run_id: str) -> httpx.Response:
    """The UI's API answer for a run; 503 while the UI is still connecting to the server."""
    api = f"{ui_url}/api/v1/namespaces/moat/workflows/{segment}"
    for _ in range(30):
        answer = httpx.get(api, params={"execution.runId": run_id}, timeout=10)
        if answer.status_code != 503:
            break
        time.sleep(0.5)
    return answer
