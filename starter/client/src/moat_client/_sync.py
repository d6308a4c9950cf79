"""The blocking client: drives the shared flows (``_flows``) on an ``httpx.Client``, so
it works inside or outside an event loop (in a loop, prefer ``AsyncMoatClient``)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, TypeVar

import httpx

from moat_client._calls import Routes, payload_chars
from moat_client._config import RetryPolicy
from moat_client._flows import Call, Flow, Reply, Sleep
from moat_client._results import ExecutionResult, PlanResult
from moat_client.errors import MoatError
from moat_client.models import CapabilityInfo, Receipt, ReceiptPage
from moat_client.sendlog import SendLog, SendOutcome

T = TypeVar("T")


class MoatClient(Routes):
    """Blocking client of the Moat gateway.

    ``MoatClient(url, api_key)``, or ``MoatClient()`` to read ``MOAT_URL`` and
    ``MOAT_API_KEY``.
    Use it as a context manager, or call ``close`` when done.

    Args:
        url: The gateway's URL; None reads ``MOAT_URL``.
        api_key: The tenant's API key (``moat_<id>_<secret>``); None reads ``MOAT_API_KEY``.
        timeout: Seconds each HTTP request may take (longer when ``wait_seconds`` asks the
            gateway to wait longer: that wait plus 10 s).
        retry: The backoff and total deadline of retries; None for ``RetryPolicy()``.
        connect_timeout: Seconds a connection to the gateway may take (at most ``timeout``);
            None: ``timeout``. Interactive tools set a short one, so an absent gateway is
            said at once.
        http_client: Your own ``httpx.Client`` (proxies, TLS, event hooks); the client
            leaves it open.
        transport: A transport for the ``httpx.Client`` the client makes (tests,
            proxies).
        send_log: The ``SendLog`` that ``send`` records in.

    Raises:
        ConfigurationError: Neither the arguments nor the environment give the URL or the key.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        connect_timeout: float | None = None,
        http_client: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
        send_log: SendLog | None = None,
    ) -> None:
        super().__init__(
            url, api_key, timeout=timeout, retry=retry, connect_timeout=connect_timeout
        )
        self._owned = http_client is None
        self._http = http_client or httpx.Client(timeout=timeout, transport=transport)
        self.send_log = send_log

    def __enter__(self) -> MoatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP client the client made; one passed as ``http_client`` stays open."""
        if self._owned:
            self._http.close()

    def _drive(self, flow: Flow[T]) -> T:
        reply: Reply = None
        try:
            while True:
                step = flow.send(reply)
                if isinstance(step, Sleep):
                    time.sleep(step.seconds)
                    reply = None
                else:
                    reply = self._send(step)
        except StopIteration as done:
            result: T = done.value
            return result

    def _send(self, call: Call) -> httpx.Response | httpx.TransportError:
        try:
            return self._http.request(
                call.method,
                self.url + call.url if call.url.startswith("/") else call.url,
                json=call.json,
                params=call.params,
                headers={**self._auth, **call.headers},
                timeout=self._timeout(call),
            )
        except httpx.TransportError as exc:
            return exc

    def execute(
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
        """Execute a capability once per idempotency key.

        Without a key the gateway derives one from the payload, so a retry is still the same
        execution. Network errors, timeouts, 408, 429 and 5xx answers without a recorded outcome
        are sent again with the same key until the retry policy's deadline. An ``accepted`` run is
        polled at its ``Location`` until it ends. A provider's failure is not raised: it is a
        result whose ``status`` is ``failed``, with its receipt.

        Args:
            capability_id: The capability to run, e.g. ``"slack.post_message"``.
            input: The capability's input, as its JSON Schema describes it.
            idempotency_key: The key (at most 256 characters); None lets the gateway derive it.
            capability_version: A version of the capability; None for the current one.
            connection_id: The connection (``con_…``) whose credential the adapter uses.
            wait_seconds: How long the gateway waits for the run, sent as ``Prefer: wait=N``;
                None asks for a wait that ends within ``timeout`` (10 s before it, or half
                of it when shorter), so the gateway answers before the client stops reading.
            dry_run: Evaluate and record the policy decision only (status ``planned``).
            poll: Poll an ``accepted`` run until it ends; False returns it as it is.
            retry: This call's retry policy; None for the client's.

        Returns:
            The execution's result: ``executed``, ``failed`` (the provider refused), ``planned``
            (a dry run), or ``accepted`` when ``poll`` is False. ``replayed`` is True when the
            key's stored receipt, recorded before this call, answered (never for a run
            this call waited for, even one an earlier attempt started).

        Raises:
            InvalidRequest: The request is malformed (``bad_json``, ``schema_validation_failed``
                with ``details["errors"]``, ``unsupported_schema_version``,
                ``idempotency_key_invalid``, ``payload_too_large``).
            Unauthenticated: No API key, or an unknown or revoked one.
            Forbidden: The key may not use this route.
            NotFound: No such capability for this tenant.
            IdempotencyKeyReused: The key was used before with other input
                (``original_receipt_id``).
            PolicyDenied: The policy refused the execution and recorded it (``receipt_id``,
                ``envelope``); ``BudgetExceeded`` and ``HostNotAllowed`` are its common reasons.
            ApprovalRequired: With ``poll``, the run waits for a person's approval (raised at
                once, with the ``approval`` to decide).
            ExecutionPending: With ``poll``, the run is still going at the deadline (ask again
                with its ``receipt_id``).
            GatewayUnavailable: No usable answer before the deadline; send again with the
                error's ``idempotency_key``.
            MoatError: Any other refusal, with the gateway's ``code`` (e.g. ``scope_missing``,
                ``rate_limited``).
        """
        return self._drive(
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

    def send(
        self,
        capability_id: str,
        input: dict[str, Any],
        *,
        task_id: str,
        action: str,
        cycle: str | datetime,
        **execute_options: Any,
    ) -> SendOutcome:
        """Execute through the send log, once per task, action and cycle.

        The idempotency key is ``<task_id>:<action>:<cycle_ts>``. A key already attempted this
        cycle with an outcome other than a timeout is skipped: the logged outcome is returned and
        nothing is sent. Otherwise up to the log's ``max_attempts`` attempts are made, backing off
        between timeouts; the attempt that makes that many timeouts files a dead letter (the log's
        ``on_dead_letter`` callback). Refusals are recorded as outcomes, not raised.

        Args:
            capability_id: The capability to run.
            input: The capability's input; the log keeps only its size.
            task_id: The agent's task (no ``:``).
            action: The action within the task (no ``:``).
            cycle: The cycle's timestamp, as text or a timezone-aware ``datetime``.
            **execute_options: Further arguments of ``execute`` (not ``idempotency_key``).

        Returns:
            What was done: ``skipped``, or the last attempt's ``outcome`` (``delivered``,
            ``timeout``, ``error``) with its ``receipt_id``, ``result`` or ``error``, and the
            ``dead_letter_task_id`` when one was filed.

        Raises:
            ValueError: The client has no send log, or the task, action or cycle cannot make a
                key (empty, holding ``:``, naive ``datetime``, over 256 characters).
        """
        log = self._require_log()
        plan = log.plan(capability_id, task_id, action, cycle, payload_chars(input))
        while True:
            decision = log.decide(plan)
            if decision.final is not None:
                return decision.final
            try:
                result: ExecutionResult | MoatError = self.execute(
                    capability_id, input, idempotency_key=plan.key, **execute_options
                )
            except MoatError as exc:
                result = exc
            outcome = log.record(plan, decision, result)
            if outcome is not None:
                return outcome
            time.sleep(self.retry.backoff(decision.attempt))

    def _require_log(self) -> SendLog:
        if self.send_log is None:
            raise ValueError("send() needs a send log: MoatClient(..., send_log=SendLog())")
        return self.send_log

    def get_execution(self, receipt_id: str) -> ExecutionResult:
        """Read an execution's current envelope, once (no polling).

        Args:
            receipt_id: The execution's receipt id, as the gateway gave it.

        Returns:
            Its result: ``accepted`` while it runs (even before a worker picked it up), then its
            final answer.

        Raises:
            ValueError: ``receipt_id`` is empty, ``.`` or ``..``.
            NotFound: No such execution for this tenant (``execution_not_found``).
            Unauthenticated: No API key, or an unknown or revoked one.
            PolicyDenied: The execution ended in a policy denial (``ApprovalRejected`` and
                ``ApprovalExpired`` among them), with its receipt.
            GatewayUnavailable: No usable answer before the retry policy's deadline.
            MoatError: Any other refusal, e.g. ``scope_missing`` without ``outputs:read``.
        """
        return self._drive(self._get_execution_flow(receipt_id))

    def wait(
        self, receipt_id: str, *, max_seconds: float | None = None, interval: float | None = None
    ) -> ExecutionResult:
        """Poll an execution until it ends, or until ``max_seconds`` pass.

        A run waiting for a person's approval is polled like any other, so this returns once the
        person decided.

        Args:
            receipt_id: The execution's receipt id, as the gateway gave it.
            max_seconds: How long to poll; None for the retry policy's deadline.
            interval: Seconds between polls; None for the gateway's ``Retry-After``.

        Returns:
            The execution's final result, or its last answer (still ``accepted``) when
            ``max_seconds`` passed first.

        Raises:
            ValueError: ``receipt_id`` is empty, ``.`` or ``..``.
            NotFound: No such execution for this tenant (``execution_not_found``).
            Unauthenticated: No API key, or an unknown or revoked one.
            ApprovalRejected: A person rejected the call: nothing ran.
            ApprovalExpired: Nobody decided the call in time: nothing ran.
            PolicyDenied: The policy refused the execution otherwise, with its receipt.
            GatewayUnavailable: No usable answer before the deadline.
            MoatError: Any other refusal, e.g. ``scope_missing`` without ``outputs:read``.
        """
        return self._drive(self._wait_flow(receipt_id, max_seconds, interval))

    def get_receipt(self, receipt_id: str) -> Receipt:
        """Read one receipt of the caller's tenant.

        Args:
            receipt_id: The receipt's id.

        Returns:
            The receipt (hashes only, never raw input or output).

        Raises:
            ValueError: ``receipt_id`` is empty, ``.`` or ``..``.
            NotFound: No such receipt for this tenant (``receipt_not_found``).
            Unauthenticated: No API key, or an unknown or revoked one.
            GatewayUnavailable: No usable answer before the retry policy's deadline.
            MoatError: Any other refusal, with the gateway's ``code``.
        """
        return self._drive(self._receipt_flow(receipt_id))

    def list_receipts(
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
        """Read one page of the tenant's receipts, newest first.

        Args:
            capability_id: Only this capability's receipts.
            status: Only receipts with this status (e.g. ``success``, ``failure``).
            idempotency_key: Only this key's receipts.
            since: Initiated at or after this time (timezone-aware).
            until: Initiated before this time (timezone-aware).
            limit: Receipts per page (at most 200).
            cursor: The previous page's ``next_cursor``; None for the first page.

        Returns:
            The page: ``items``, and ``next_cursor`` (None on the last page).

        Raises:
            ValueError: ``since`` or ``until`` is a naive ``datetime``.
            InvalidRequest: The gateway refused a parameter (``invalid_cursor``,
                ``schema_validation_failed``).
            Unauthenticated: No API key, or an unknown or revoked one.
            GatewayUnavailable: No usable answer before the retry policy's deadline.
            MoatError: Any other refusal, with the gateway's ``code``.
        """
        return self._drive(
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

    def iter_receipts(self, **filters: Any) -> Iterator[Receipt]:
        """Every receipt matching the filters, page after page, newest first.

        Args:
            **filters: The filters of ``list_receipts`` (not ``cursor``).

        Yields:
            Each receipt, fetching the next page when one is used up.

        Raises:
            ValueError: A filter is a naive ``datetime``.
            InvalidRequest: The gateway refused a filter.
            Unauthenticated: No API key, or an unknown or revoked one.
            GatewayUnavailable: No usable answer for a page before the retry policy's deadline.
            MoatError: Any other refusal, with the gateway's ``code``.
        """
        cursor = None
        while True:
            page = self.list_receipts(cursor=cursor, **filters)
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def run_plan(
        self,
        plan: Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        wait_seconds: float | None = None,
        dry_run: bool = False,
        poll: bool = True,
        retry: RetryPolicy | None = None,
    ) -> PlanResult:
        """Run a plan: several capability calls as one durable run, each step once.

        Each step runs as an execution of its own under the key ``<plan key>/<step id>``, so
        a retry of the plan (the client's, after a network error, or yours with the same
        key) repeats no step that completed. A step's input may use an earlier step's output
        through ``${steps.<id>.output.<path>}``. A failing step is not raised: the result's
        ``status`` is ``failed`` and its ``error`` the step's.

        Args:
            plan: The plan as ``POST /v1/plans`` takes it: ``steps`` (each ``id``,
                ``capability_id``, ``input``, optionally ``connection_id``, ``when``,
                ``compensate``), optionally ``on_failure`` and ``idempotency_key``;
                ``schema_version`` defaults to ``"1"``.
            idempotency_key: The plan's key, sent as ``Idempotency-Key`` (it replaces the
                plan's own); None: the plan's ``idempotency_key``, else the gateway derives
                one from the plan.
            wait_seconds: How long the gateway waits for the plan, as for ``execute``.
            dry_run: Check every step's policy and references only (status ``planned``,
                each step's ``decision``): nothing runs and the key stays free.
            poll: Poll an ``accepted`` plan until it ends (or waits for a person's
                approval, or the retry policy's deadline passes); False returns it as it is.
            retry: This call's retry policy; None for the client's.

        Returns:
            The plan's result: ``executed``, ``failed``, ``planned``, or ``accepted`` (still
            running at the deadline, waiting for its ``approval``, or ``poll`` False).

        Raises:
            InvalidRequest: The plan is malformed: ``plan_invalid`` (``details["problems"]``
                name each step, where and reference), ``schema_validation_failed``.
            IdempotencyKeyReused: The key was used before for another plan.
            Unauthenticated: No API key, or an unknown or revoked one.
            GatewayUnavailable: No usable answer before the deadline; send the plan again
                with the same key.
            MoatError: Any other refusal, with the gateway's ``code``.
        """
        return self._drive(
            self._run_plan_flow(
                plan,
                idempotency_key=idempotency_key,
                wait_seconds=wait_seconds,
                dry_run=dry_run,
                poll=poll,
                retry=retry,
            )
        )

    def get_plan(self, plan_id: str) -> PlanResult:
        """Read how a plan stands, once (no polling).

        Args:
            plan_id: The plan's id, as ``run_plan`` gave it.

        Returns:
            Its result: ``accepted`` while it runs, then its final answer.

        Raises:
            ValueError: ``plan_id`` is empty, ``.`` or ``..``.
            NotFound: No such plan for this tenant (``plan_not_found``).
            GatewayUnavailable: No usable answer before the retry policy's deadline.
            MoatError: Any other refusal, with the gateway's ``code``.
        """
        return self._drive(self._get_plan_flow(plan_id))

    def resume_plan(
        self,
        plan_id: str,
        *,
        effect_did_not_happen: bool,
        note: str = "",
        wait_seconds: float | None = None,
    ) -> PlanResult:
        """Continue a failed plan from its first unfinished step; completed steps are not
        repeated. The failed step runs again under a new key, so only resume when its
        effect did not take place. Needs scope ``plans:write``; sent once, never retried.

        Args:
            plan_id: The plan's id.
            effect_did_not_happen: Your statement that the failed step's effect did not take
                place; the gateway refuses a resume without it.
            note: Why, for the record.
            wait_seconds: How long the gateway waits for the plan, as for ``run_plan``.

        Returns:
            The plan: ``executed`` or ``failed`` when it ended within the wait, else
            ``accepted`` (poll it with ``get_plan``).

        Raises:
            InvalidRequest: ``effect_statement_required``: ``effect_did_not_happen`` is False.
            NotFound: No such plan for this tenant (``plan_not_found``).
            MoatError: ``plan_not_resumable`` (the plan is running, executed or compensated),
                ``scope_missing``, or any other refusal.
        """
        body = {"effect_did_not_happen": effect_did_not_happen, "note": note}
        return self._drive(self._plan_action_flow(plan_id, "resume", body, wait_seconds))

    def cancel_plan(self, plan_id: str, *, note: str = "") -> PlanResult:
        """Stop a plan: a step already calling its provider finishes, no later step starts.
        Needs scope ``plans:write``; sent once, never retried.

        Args:
            plan_id: The plan's id.
            note: Why, for the record.

        Returns:
            The plan, ``accepted`` until it has stopped: poll it with ``get_plan``.

        Raises:
            NotFound: No such plan for this tenant (``plan_not_found``).
            MoatError: ``plan_finished`` (nothing left to cancel), ``scope_missing``, or any
                other refusal.
        """
        return self._drive(self._plan_action_flow(plan_id, "cancel", {"note": note}))

    def capabilities(self) -> list[CapabilityInfo]:
        """Read the capabilities the gateway offers.

        Returns:
            Each capability with its versions, input schema, retry settings, ``idempotency``,
            ``connection_types``, ``requires_approval`` and ``probe``.

        Raises:
            GatewayUnavailable: No usable answer before the retry policy's deadline.
            MoatError: A refusal, with the gateway's ``code``.
        """
        return self._drive(self._capabilities_flow())
