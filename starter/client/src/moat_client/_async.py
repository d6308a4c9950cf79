"""The async client: drives the shared flows (``_flows``) on an ``httpx.AsyncClient``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any, TypeVar

import httpx

from moat_client._calls import Routes, payload_chars
from moat_client._config import RetryPolicy
from moat_client._flows import Call, Flow, Reply, Sleep
from moat_client._results import ExecutionResult
from moat_client.errors import MoatError
from moat_client.models import CapabilityInfo, Receipt, ReceiptPage
from moat_client.sendlog import SendLog, SendOutcome

T = TypeVar("T")


class AsyncMoatClient(Routes):
    """Async client of the Moat gateway.

    ``AsyncMoatClient(url, api_key)``, or ``AsyncMoatClient()`` to read ``MOAT_URL`` and
    ``MOAT_API_KEY``. Pass ``http_client`` to use your own ``httpx.AsyncClient`` (proxies,
    TLS, event hooks; the client leaves it open), ``retry`` to change the backoff and the
    total deadline, ``send_log`` to keep a local record of ``send`` calls.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        http_client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        send_log: SendLog | None = None,
    ) -> None:
        super().__init__(url, api_key, timeout=timeout, retry=retry)
        self._owned = http_client is None
        self._http = http_client or httpx.AsyncClient(timeout=timeout, transport=transport)
        self.send_log = send_log

    async def __aenter__(self) -> AsyncMoatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owned:
            await self._http.aclose()

    async def _drive(self, flow: Flow[T]) -> T:
        reply: Reply = None
        try:
            while True:
                step = flow.send(reply)
                if isinstance(step, Sleep):
                    await asyncio.sleep(step.seconds)
                    reply = None
                else:
                    reply = await self._send(step)
        except StopIteration as done:
            result: T = done.value
            return result

    async def _send(self, call: Call) -> httpx.Response | httpx.TransportError:
        try:
            return await self._http.request(
                call.method,
                self.url + call.url if call.url.startswith("/") else call.url,
                json=call.json,
                params=call.params,
                headers={**self._auth, **call.headers},
                timeout=call.timeout or self.timeout,
            )
        except httpx.TransportError as exc:
            return exc

    async def execute(
        self,
        capability_id: str,
        input: dict[str, Any],
        *,
        idempotency_key: str | None = None,
        capability_version: str | None = None,
        connection_id: str | None = None,
        wait_seconds: float | None = None,
        dry_run: bool = False,
        poll: bool = True,
        retry: RetryPolicy | None = None,
    ) -> ExecutionResult:
        """Execute a capability once per idempotency key (without one, the gateway derives
        it from the payload). Network errors, timeouts and 5xx are retried with the same
        key until the deadline (then ``GatewayUnavailable``); an ``accepted`` run is polled
        until it ends (``poll=False``: returned as it is). ``wait_seconds`` is sent as
        ``Prefer: wait=N``. Refusals raise ``MoatError`` subclasses; a provider's failure is
        a result whose ``status`` is ``failed``."""
        return await self._drive(
            self._execute_flow(
                capability_id,
                input,
                idempotency_key=idempotency_key,
                capability_version=capability_version,
                connection_id=connection_id,
                wait_seconds=wait_seconds,
                dry_run=dry_run,
                poll=poll,
                retry=retry,
            )
        )

    async def send(
        self,
        capability_id: str,
        input: dict[str, Any],
        *,
        task_id: str,
        action: str,
        cycle: str | datetime,
        **execute_options: Any,
    ) -> SendOutcome:
        """Execute through the send log (``send_log``): skipped when this task's action was
        already attempted this cycle with an outcome other than a timeout; else up to the
        log's ``max_attempts`` attempts, and a dead letter after that many timeouts."""
        log = self._require_log()
        plan = log.plan(capability_id, task_id, action, cycle, payload_chars(input))
        while True:
            decision = await asyncio.to_thread(log.decide, plan)
            if decision.final is not None:
                return decision.final
            try:
                result: ExecutionResult | MoatError = await self.execute(
                    capability_id, input, idempotency_key=plan.key, **execute_options
                )
            except MoatError as exc:
                result = exc
            outcome = await asyncio.to_thread(log.record, plan, decision, result)
            if outcome is not None:
                return outcome
            await asyncio.sleep(self.retry.backoff(decision.attempt))

    def _require_log(self) -> SendLog:
        if self.send_log is None:
            raise ValueError("send() needs a send log: AsyncMoatClient(..., send_log=SendLog())")
        return self.send_log

    async def get_execution(self, receipt_id: str) -> ExecutionResult:
        """The execution's current envelope (``accepted`` while it runs)."""
        return await self._drive(self._get_execution_flow(receipt_id))

    async def wait(
        self, receipt_id: str, *, max_seconds: float | None = None, interval: float | None = None
    ) -> ExecutionResult:
        """Poll an execution until it ends, or ``max_seconds`` (default: the retry
        deadline) pass: then the last answer, still ``accepted``. Polls are the gateway's
        ``Retry-After`` apart, or ``interval`` seconds."""
        return await self._drive(self._wait_flow(receipt_id, max_seconds, interval))

    async def get_receipt(self, receipt_id: str) -> Receipt:
        return await self._drive(self._receipt_flow(receipt_id))

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
        return await self._drive(
            self._receipts_flow(
                capability_id=capability_id,
                status=status,
                idempotency_key=idempotency_key,
                since=since,
                until=until,
                limit=limit,
                cursor=cursor,
            )
        )

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
        """The capabilities the gateway offers, with their input schemas."""
        return await self._drive(self._capabilities_flow())
