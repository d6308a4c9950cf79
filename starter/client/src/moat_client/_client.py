"""The async client: one method per gateway route it uses, answers parsed into the
client's own models, refusals raised as ``MoatError``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

from moat_client.models import (
    CapabilityInfo,
    Envelope,
    EnvelopeStatus,
    ErrorBody,
    ErrorEnvelope,
    Receipt,
    ReceiptPage,
)

REPLAYED_HEADER = "X-Moat-Idempotent-Replayed"


class MoatError(Exception):
    """The gateway refused the request (bad input, authentication, key reuse, …)."""

    def __init__(self, http_status: int, error: ErrorBody, trace_id: str) -> None:
        super().__init__(f"{error.code}: {error.message}")
        self.http_status = http_status
        self.code = error.code
        self.message = error.message
        self.details = error.details
        self.trace_id = trace_id


@dataclass(frozen=True)
class ExecutionResult:
    """The outcome of one execute call."""

    http_status: int
    envelope: Envelope
    replayed: bool

    @property
    def status(self) -> EnvelopeStatus:
        return self.envelope.status

    @property
    def receipt_id(self) -> str | None:
        return self.envelope.receipt_id

    @property
    def receipt(self) -> Receipt | None:
        return self.envelope.receipt

    @property
    def output(self) -> Any:
        """The adapter's redacted result (``executed`` only; None once no longer kept)."""
        return self.envelope.output

    @property
    def error(self) -> ErrorBody | None:
        return self.envelope.error

    @property
    def ok(self) -> bool:
        return self.envelope.status == EnvelopeStatus.EXECUTED


# Answers that describe an execution (as opposed to a refused request).
_EXECUTION_STATUSES = frozenset({200, 202, 403, 502})


class MoatClient:
    """Async client of the Moat gateway."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 120.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url,
            timeout=timeout,
            transport=transport,
            headers={"Authorization": f"Bearer {api_key}"},
        )

    async def __aenter__(self) -> MoatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def execute(
        self,
        capability_id: str,
        input: dict[str, Any],
        *,
        idempotency_key: str | None = None,
        capability_version: str | None = None,
        connection_id: str | None = None,
        wait_seconds: float | None = None,
    ) -> ExecutionResult:
        """Execute a capability once per idempotency key (derived from the payload if None).

        Raises ``MoatError`` when the request itself is refused (4xx other than a policy
        denial, or an internal error); downstream failures come back as a result whose
        ``status`` is ``failed``."""
        body: dict[str, Any] = {
            "schema_version": "1",
            "capability_id": capability_id,
            "input": input,
        }
        if capability_version is not None:
            body["capability_version"] = capability_version
        if connection_id is not None:
            body["connection_id"] = connection_id
        headers = {}
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        if wait_seconds is not None:
            headers["Prefer"] = f"wait={wait_seconds:g}"
        response = await self._http.post("/v1/executions", json=body, headers=headers)
        return self._result(response)

    async def get_execution(self, receipt_id: str) -> ExecutionResult:
        """The execution's current envelope (``accepted`` while it runs)."""
        return self._result(await self._http.get(f"/v1/executions/{receipt_id}"))

    async def wait(
        self, receipt_id: str, *, max_seconds: float = 300.0, interval: float = 1.0
    ) -> ExecutionResult:
        """Poll an ``accepted`` execution until it ends or ``max_seconds`` pass (then the
        last, still ``accepted``, result)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_seconds
        while True:
            result = await self.get_execution(receipt_id)
            if result.status != EnvelopeStatus.ACCEPTED or loop.time() >= deadline:
                return result
            await asyncio.sleep(min(interval, max(0.0, deadline - loop.time())))

    async def get_receipt(self, receipt_id: str) -> Receipt:
        response = await self._http.get(f"/v1/receipts/{receipt_id}")
        if response.status_code != 200:
            self._raise(response)
        return Receipt.model_validate(response.json())

    async def list_receipts(
        self,
        *,
        capability_id: str | None = None,
        status: str | None = None,
        idempotency_key: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> ReceiptPage:
        """One page of the tenant's receipts, newest first; ``page.next_cursor`` gets the next."""
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
        response = await self._http.get("/v1/receipts", params=params)
        if response.status_code != 200:
            self._raise(response)
        return ReceiptPage.model_validate(response.json())

    async def iter_receipts(self, **filters: Any) -> AsyncIterator[Receipt]:
        """Every receipt matching ``filters`` (as for ``list_receipts``), page after page."""
        cursor = None
        while True:
            page = await self.list_receipts(cursor=cursor, **filters)
            for receipt in page.items:
                yield receipt
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def capabilities(self) -> list[CapabilityInfo]:
        response = await self._http.get("/v1/capabilities")
        if response.status_code != 200:
            self._raise(response)
        return [CapabilityInfo.model_validate(c) for c in response.json()]

    def _result(self, response: httpx.Response) -> ExecutionResult:
        if response.status_code not in _EXECUTION_STATUSES:
            self._raise(response)
        envelope = Envelope.model_validate(response.json())
        if envelope.receipt_id is None and response.status_code != 202:
            self._raise(response)
        return ExecutionResult(
            response.status_code, envelope, response.headers.get(REPLAYED_HEADER) == "true"
        )

    @staticmethod
    def _raise(response: httpx.Response) -> None:
        try:
            refusal = ErrorEnvelope.model_validate(response.json())
        except ValueError:
            raise MoatError(
                response.status_code, ErrorBody(code="http_error", message=response.text[:200]), ""
            ) from None
        raise MoatError(response.status_code, refusal.error, refusal.trace_id)
