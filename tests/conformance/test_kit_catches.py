"""Each check of the conformance kit fails when its property breaks: an adapter planted
with one fault each (against ``FakeIdempotentApi``) is caught by the check that guards
that property, and a well-behaved twin of it passes the same check."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from pydantic import BaseModel, ConfigDict

from moat.adapters import (
    AdapterContext,
    AdapterInput,
    AdapterOutput,
    Capability,
    CapabilitySpec,
    ConnectionType,
    Credential,
    EffectType,
    ErrorTaxonomy,
    IdempotencyStrategy,
    SendRequest,
    fail,
    parse_input,
    recorded,
    send,
)
from moat.testing import Conformance, ConnectionSpec, KitRun, kit_run
from moat.testing import conformance as kit
from moat.testing.providers import FakeIdempotentApi, IdempotentApiConformanceFake
from moat.testing.stack import Stack, StackFactory


class OrderInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sku: str


class Planted:
    """An order API's adapter with one fault (``fault``), or none."""

    def __init__(self, ctx: AdapterContext, fault: str) -> None:
        self.ctx, self.fault = ctx, fault

    async def call(self, inp: AdapterInput, credential: Credential | None) -> AdapterOutput:
        order = parse_input(inp, OrderInput)
        assert credential is not None
        answer = await self._post(inp, credential, order, inp.idempotency_key)
        if self.fault == "doubles":
            answer = await self._post(inp, credential, order, uuid.uuid4().hex)
        if answer.status == 429:
            wait = answer.response.headers.get("retry-after")
            honoured = None if self.fault == "impatient" else timedelta(seconds=int(wait or 1))
            raise fail(ErrorTaxonomy.PROVIDER_RATE_LIMITED, "rate limited", retry_after=honoured)
        if answer.status >= 500:
            message = "the order API failed"
            if self.fault == "library_words":
                try:
                    answer.response.raise_for_status()
                except httpx.HTTPStatusError as err:
                    message = repr(err)
            raise fail(ErrorTaxonomy.PROVIDER_SERVER_ERROR, message, http_status=answer.status)
        if self.fault == "leaks":
            # Moat scrubs its logs, outputs and the provider's answers of the secret; a span
            # attribute the adapter sets itself is its own to keep clean.
            trace.get_current_span().set_attribute("order.credential", credential.secret)
        return recorded(answer.status, answer.json())

    async def _post(
        self, inp: AdapterInput, credential: Credential, order: OrderInput, key: str
    ) -> Any:
        base = str(credential.config["base_url"])
        return await send(
            self.ctx.http,
            self.ctx.guard,
            SendRequest(
                "POST",
                f"{base}/orders",
                {"Authorization": f"Bearer {credential.secret}"},
                timeout=5.0,
                allow_hosts=inp.http_allow_hosts,
                json_body={"sku": order.sku},
                idempotency_key=None if self.fault == "keyless" else key,
                credential=credential,
            ),
        )


FAULTS = ("none", "doubles", "keyless", "impatient", "library_words", "leaks")


def _factory(fault: str) -> Callable[[AdapterContext], Planted]:
    def make(ctx: AdapterContext) -> Planted:
        return Planted(ctx, fault)

    return make


# The factories the declarations name (``module:callable``).
none = _factory("none")
doubles = _factory("doubles")
keyless = _factory("keyless")
impatient = _factory("impatient")
library_words = _factory("library_words")
leaks = _factory("leaks")


def declaration(fault: str) -> Capability:
    spec = CapabilitySpec(
        id=f"planted.{fault}",
        version="1.0.0",
        adapter=f"planted_{fault}",
        adapter_id=f"planted-{fault}-v1",
        effect_type=EffectType.API_CALL,
        idempotency=IdempotencyStrategy.PROVIDER_KEY,
        connection_types=(ConnectionType.HTTP_BEARER,),
        connection_required=True,
    )
    return Capability(spec=spec, input_model=OrderInput, adapter=f"{__name__}:{fault}")


@pytest.fixture(scope="module")
def api() -> Iterator[FakeIdempotentApi]:
    with FakeIdempotentApi() as fake:
        yield fake


def conformance(api: FakeIdempotentApi, fault: str) -> Conformance:
    fake = IdempotentApiConformanceFake(api)
    return Conformance(
        capability=declaration(fault),
        input={"sku": "kit"},
        fake=fake,
        connection=ConnectionSpec(
            "http_bearer", f"sk-planted-{uuid.uuid4().hex}", {"base_url": api.base_url}
        ),
        refuse=fake.refuse,
    )


@pytest.fixture
async def runs(
    moat_make_stack: StackFactory, api: FakeIdempotentApi
) -> AsyncIterator[Callable[[str], Any]]:
    """``async with runs(fault) as run``: a kit run of the adapter planted with ``fault``."""

    def make(fault: str) -> Any:
        return kit_run(moat_make_stack, conformance(api, fault))

    yield make


async def _caught(runs: Callable[[str], Any], fault: str, check: Any) -> str:
    """The check passes the faultless adapter and fails the faulty one: its message."""
    async with runs("none") as good:
        await check(good)
    async with runs(fault) as bad:
        with pytest.raises(AssertionError) as caught:
            await check(bad)
    return str(caught.value)


async def test_the_storm_check_catches_an_adapter_that_acts_twice(runs: Any) -> None:
    message = await _caught(runs, "doubles", kit.duplicate_storm)
    assert "made 2 effects" in message


async def test_the_lost_answer_check_catches_an_adapter_without_the_key(runs: Any) -> None:
    message = await _caught(runs, "keyless", kit.lost_answer)
    assert "made 2 effects" in message


async def test_the_reset_check_catches_a_reset_that_acts_again(
    runs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No adapter can make a reset act (Moat does not call it again), so the fault planted
    is a reset that performs the effect once more."""
    real = kit.temporal_reset
    acted: list[KitRun] = []

    async def repeating(stack: Stack, workflow_id: str, run_id: str) -> str:
        new_run = await real(stack, workflow_id, run_id)
        if acted:
            run = acted[0]
            await run.execute(run.input(), key=f"again-{uuid.uuid4().hex}")
        return new_run

    async with runs("none") as good:
        await kit.reset(good)
    monkeypatch.setattr(kit, "temporal_reset", repeating)
    async with runs("none") as bad:
        acted.append(bad)
        with pytest.raises(AssertionError, match="left 2 effects"):
            await kit.reset(bad)


async def test_the_retry_after_check_catches_an_impatient_adapter(runs: Any) -> None:
    message = await _caught(runs, "impatient", kit.retry_after)
    assert "came" in message and "later" in message


async def test_the_wording_check_catches_a_library_message(runs: Any) -> None:
    async def server_error(run: KitRun) -> None:
        await kit.failures_worded(run, "server_error")

    message = await _caught(runs, "library_words", server_error)
    assert "library's exception text" in message and "HTTPStatusError(" in message


async def test_the_secret_check_catches_an_adapter_that_logs_it(runs: Any) -> None:
    message = await _caught(runs, "leaks", kit.no_secret_at_rest)
    assert "span" in message


def test_wording_problems_named() -> None:
    assert kit.wording_problem("provider_server_error", "the order API failed") is None
    assert kit.wording_problem("Boom!", "x") is not None
    assert kit.wording_problem("timeout", "ReadTimeout('timed out')") is not None
    assert kit.wording_problem("network_error", "[Errno 111] Connection refused") is not None
    tb = "Traceback (most recent call last):\n  File x"
    assert kit.wording_problem("unknown", tb) is not None
