"""The gateway routes the client uses, as flows (``_flows``), shared by both clients."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx

from moat_client import _flows
from moat_client._config import RetryPolicy, resolve
from moat_client._flows import Call, Flow
from moat_client._results import ExecutionResult, PlanResult
from moat_client.models import CapabilityInfo, Receipt, ReceiptPage

# Added to the gateway's wait for the read timeout, so the client never hangs up first.
_WAIT_MARGIN_SECONDS = 10.0


def read_timeout(timeout: float, wait_seconds: float | None) -> tuple[float, float]:
    """The wait an execute call asks the gateway for (``Prefer: wait=N``) and how long it
    reads the answer, so the gateway always answers (``accepted`` at worst, then polled)
    before the client stops reading: a slow run is never sent again as if lost.

    A wait given is read for that long plus a margin (never less than ``timeout``); with
    none, the client asks for a wait that ends well within ``timeout`` (the margin before
    it, or half of it when shorter) and reads for ``timeout``."""
    if wait_seconds is None:
        return max(timeout - _WAIT_MARGIN_SECONDS, timeout / 2), timeout
    return wait_seconds, max(timeout, wait_seconds + _WAIT_MARGIN_SECONDS)


def payload_chars(input: dict[str, Any]) -> int:
    """The size of an input as the send log counts it (its compact JSON)."""
    return len(json.dumps(input, separators=(",", ":"), ensure_ascii=False))


def path_segment(name: str, value: str) -> str:
    """``value`` (an id a caller gave) as one path segment, percent-encoded, so that it can
    only ever name that one resource: a ``/``, ``?`` or ``#`` in it is encoded, and the
    segments ``.`` and ``..`` (which an HTTP library resolves to another route) refused."""
    if not isinstance(value, str) or value in ("", ".", ".."):
        raise ValueError(f"{name} must be an id as the gateway gave it, got {value!r}")
    return quote(value, safe="")


class Routes:
    """Configuration and the flow of each call; subclasses drive them."""

    def __init__(
        self,
        url: str | None,
        api_key: str | None,
        *,
        timeout: float,
        retry: RetryPolicy | None,
        connect_timeout: float | None = None,
    ) -> None:
        self.url, api_key = resolve(url, api_key)
        self._auth = {"Authorization": f"Bearer {api_key}"}
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.retry = retry or RetryPolicy()

    def _timeout(self, call: Call) -> httpx.Timeout:
        """The call's timeout; a connection gets at most ``connect_timeout`` of it."""
        seconds = call.timeout or self.timeout
        connect = seconds if self.connect_timeout is None else min(seconds, self.connect_timeout)
        return httpx.Timeout(seconds, connect=connect)

    def _execute_flow(
        self,
        capability_id: str,
        input: dict[str, Any],
        *,
        idempotency_key: str | None,
        capability_version: str | None,
        connection_id: str | None,
        wait_seconds: float | None,
        dry_run: bool,
        poll: bool,
        retry: RetryPolicy | None,
    ) -> Flow[ExecutionResult]:
        body: dict[str, Any] = {
            "schema_version": "1",
            "capability_id": capability_id,
            "input": input,
        }
        if capability_version is not None:
            body["capability_version"] = capability_version
        if connection_id is not None:
            body["connection_id"] = connection_id
        if dry_run:
            body["dry_run"] = True
        headers = {}
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        wait, timeout = read_timeout(self.timeout, wait_seconds)
        headers["Prefer"] = f"wait={wait:g}"
        call = Call("POST", "/v1/executions", json=body, headers=headers, timeout=timeout)
        return _flows.execute(call, retry or self.retry, idempotency_key, poll)

    def _get_execution_flow(self, receipt_id: str) -> Flow[ExecutionResult]:
        return _flows.execute(
            Call("GET", f"/v1/executions/{path_segment('receipt_id', receipt_id)}"),
            self.retry,
            None,
            poll=False,
        )

    def _wait_flow(
        self, receipt_id: str, max_seconds: float | None, interval: float | None
    ) -> Flow[ExecutionResult]:
        retry = RetryPolicy(
            base_delay=self.retry.base_delay,
            max_delay=self.retry.max_delay,
            deadline=self.retry.deadline if max_seconds is None else max_seconds,
            poll_interval=self.retry.poll_interval if interval is None else interval,
            rng=self.retry.rng,
        )
        return _waiting(
            Call("GET", f"/v1/executions/{path_segment('receipt_id', receipt_id)}"), retry
        )

    def _receipt_flow(self, receipt_id: str) -> Flow[Receipt]:
        return _flows.read(
            Call("GET", f"/v1/receipts/{path_segment('receipt_id', receipt_id)}"),
            self.retry,
            Receipt.model_validate,
        )

    def _receipts_flow(
        self,
        *,
        capability_id: str | None,
        status: str | None,
        idempotency_key: str | None,
        since: datetime | None,
        until: datetime | None,
        limit: int,
        cursor: str | None,
    ) -> Flow[ReceiptPage]:
        params: dict[str, str | int] = {"limit": limit}
        for name, value in (
            ("capability_id", capability_id),
            ("status", status),
            ("idempotency_key", idempotency_key),
            ("cursor", cursor),
        ):
            if value is not None:
                params[name] = value
        for name, when in (("since", since), ("until", until)):
            if when is not None:
                if when.tzinfo is None:
                    raise ValueError(f"{name} must be timezone-aware")
                params[name] = when.isoformat()
        call = Call("GET", "/v1/receipts", params=params)
        return _flows.read(call, self.retry, ReceiptPage.model_validate)

    def _run_plan_flow(
        self,
        plan: Mapping[str, Any],
        *,
        idempotency_key: str | None,
        wait_seconds: float | None,
        dry_run: bool,
        poll: bool,
        retry: RetryPolicy | None,
    ) -> Flow[PlanResult]:
        body: dict[str, Any] = {"schema_version": "1", **plan}
        headers = {}
        if idempotency_key is not None:
            # The key given wins over the plan's own: the request names one key only.
            body.pop("idempotency_key", None)
            headers["Idempotency-Key"] = idempotency_key
        if dry_run:
            body["dry_run"] = True
        wait, timeout = read_timeout(self.timeout, wait_seconds)
        headers["Prefer"] = f"wait={wait:g}"
        call = Call("POST", "/v1/plans", json=body, headers=headers, timeout=timeout)
        key = idempotency_key or body.get("idempotency_key")
        return _flows.plan(call, retry or self.retry, key if isinstance(key, str) else None, poll)

    def _get_plan_flow(self, plan_id: str) -> Flow[PlanResult]:
        call = Call("GET", f"/v1/plans/{path_segment('plan_id', plan_id)}")
        return _flows.plan(call, self.retry, None, poll=False)

    def _plan_action_flow(
        self, plan_id: str, action: str, body: dict[str, Any], wait_seconds: float | None = None
    ) -> Flow[PlanResult]:
        """A resume (which waits for the plan as ``run_plan`` does) or a cancel, sent once:
        sent again after it took effect, it would be refused (the plan already running
        again, or finished)."""
        url = f"/v1/plans/{path_segment('plan_id', plan_id)}/{action}"
        headers, timeout = {}, None
        if action == "resume":
            wait, timeout = read_timeout(self.timeout, wait_seconds)
            headers["Prefer"] = f"wait={wait:g}"
        call = Call("POST", url, json=body, headers=headers, timeout=timeout)
        once = RetryPolicy(deadline=self.retry.deadline, max_attempts=1, rng=self.retry.rng)
        return _flows.plan(call, once, None, poll=False)

    def _capabilities_flow(self) -> Flow[list[CapabilityInfo]]:
        return _flows.read(
            Call("GET", "/v1/capabilities"),
            self.retry,
            lambda body: [CapabilityInfo.model_validate(c) for c in body],
        )


def _waiting(call: Call, retry: RetryPolicy) -> Flow[ExecutionResult]:
    """Poll until the run ends or waits for a person; at the deadline, the last answer
    (still ``accepted``) rather than an error: the caller asked how it stands."""
    from moat_client.errors import ExecutionPending

    try:
        return (yield from _flows.execute(call, retry, None, poll=True, stop_at_approval=False))
    except ExecutionPending as pending:
        assert pending.envelope is not None
        return ExecutionResult(202, pending.envelope, False)
