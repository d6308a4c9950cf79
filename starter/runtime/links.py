"""Links Moat prints or serves: every id is one percent-encoded path segment, so an id with
a ``/`` in it (a workflow id, ``exec/<tenant>/<digest>``) stays one segment."""

from __future__ import annotations

from urllib.parse import quote


def path(*segments: str) -> str:
    """``/`` and the segments, each percent-encoded whole (``/`` included)."""
    return "".join("/" + quote(segment, safe="") for segment in segments)


def temporal_run(ui_url: str, namespace: str, workflow_id: str, run_id: str | None) -> str:
    """The run's page in the Temporal Web UI (its event history); without a run id, the
    workflow's runs."""
    if run_id:
        return ui_url + path("namespaces", namespace, "workflows", workflow_id, run_id, "history")
    return ui_url + path("namespaces", namespace, "workflows", workflow_id)
