"""Capabilities declared by packages: the registry's refusals, and how Moat drives an adapter
of the ``call``/``find`` shape (``activities.adapters.plugins``)."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, ConfigDict, ValidationError
from temporalio.exceptions import ApplicationError

from activities.adapters.base import fail
from activities.adapters.guard import HostGuard
from activities.adapters.plugins import (
    AdapterContext,
    AdapterLoadError,
    driven,
    load_factory,
    make_adapters,
)
from activities.adapters.responses import recorded
from schemas.capabilities import (
    BUILTINS,
    Capability,
    CapabilityCatalog,
    CapabilitySpec,
    EffectType,
    IdempotencyStrategy,
    RetrySettings,
)
from schemas.connections import ConnectionCreate, ConnectionKind, Credential
from schemas.ids import uuid7
from schemas.records import OUTCOME_UNKNOWN, ErrorTaxonomy
from schemas.registry import CapabilityRegistryError, checked, installed
from schemas.run import AdapterInput, AdapterOutput
from schemas.settings import MoatSettings


class TicketInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str


def _spec(
    strategy: IdempotencyStrategy, effect: EffectType = EffectType.API_CALL
) -> CapabilitySpec:
    return CapabilitySpec(
        id="acme.test",
        version="1.0.0",
        adapter="acme_test",
        adapter_id="acme-test-v1",
        effect_type=effect,
        idempotency=strategy,
        retry=RetrySettings(max_retries=2, base_delay_seconds=0.01),
    )


def _declared(strategy: IdempotencyStrategy, **extra: Any) -> Capability:
    return Capability(
        spec=_spec(strategy, **extra),
        input_model=TicketInput,
        adapter="tests.activities.test_plugins:Tickets",
        output_shape={"ticket_id": None},
    )


class Tickets:
    """A provider in memory: ``lose`` answers lost after the effect, ``refuse`` look-ups
    refused."""

    def __init__(self, ctx: AdapterContext | None = None) -> None:
        self.by_key: dict[str, int] = {}
        self.lose = 0
        self.refuse_lookups = False
        self.finds = 0

    async def call(self, inp: AdapterInput, credential: Credential | None) -> AdapterOutput:
        self.by_key[inp.idempotency_key] = self.by_key.get(inp.idempotency_key, 0) + 1
        if self.lose:
            self.lose -= 1
            raise fail(ErrorTaxonomy.NETWORK_ERROR, "the answer was lost")
        return recorded(201, {"ticket_id": inp.idempotency_key})

    async def find(self, inp: AdapterInput, credential: Credential | None) -> AdapterOutput | None:
        self.finds += 1
        if self.refuse_lookups:
            raise fail(ErrorTaxonomy.PROVIDER_AUTH_FAILURE, "no read scope", retryable=False)
        if self.by_key.get(inp.idempotency_key):
            return recorded(200, {"ticket_id": inp.idempotency_key})
        return None


class CallOnly:
    def __init__(self, ctx: AdapterContext | None = None) -> None:
        self.calls = 0

    async def call(self, inp: AdapterInput, credential: Credential | None) -> AdapterOutput:
        self.calls += 1
        raise fail(ErrorTaxonomy.TIMEOUT, "no answer in time")


def _input(spec: CapabilitySpec, attempt: int = 1, **extra: Any) -> AdapterInput:
    return AdapterInput(
        tenant_id="t1",
        receipt_id=str(uuid7()),
        capability=spec,
        input={"title": "x"},
        idempotency_key=f"k-{uuid.uuid4().hex}",
        trace_id="0" * 32,
        attempt=attempt,
        **extra,
    )


async def test_a_repeat_finds_the_lost_effect_instead_of_calling_again() -> None:
    tickets = Tickets()
    run = driven(tickets, _declared(IdempotencyStrategy.RECONCILE))
    inp = _input(_declared(IdempotencyStrategy.RECONCILE).spec)
    tickets.lose = 1
    with pytest.raises(ApplicationError) as lost:
        await run(inp, None)
    assert lost.value.type == ErrorTaxonomy.NETWORK_ERROR.value  # retried: a repeat looks first
    out = await run(inp.model_copy(update={"attempt": 2}), None)
    assert out.reconciled is True
    assert tickets.by_key[inp.idempotency_key] == 1
    # The first attempt never looks (nothing can have been sent); a repeat that finds
    # nothing performs the effect and says it looked.
    fresh = _input(inp.capability, attempt=2)
    assert (await run(fresh, None)).reconciled is False
    assert tickets.finds == 2


async def test_a_refused_look_up_or_a_lost_last_answer_is_outcome_unknown() -> None:
    tickets = Tickets()
    declared = _declared(IdempotencyStrategy.RECONCILE)
    run = driven(tickets, declared)
    tickets.refuse_lookups = True
    with pytest.raises(ApplicationError) as refused:
        await run(_input(declared.spec, attempt=2), None)
    assert refused.value.type == OUTCOME_UNKNOWN
    tickets.refuse_lookups = False
    tickets.lose = 1
    last = _input(declared.spec, attempt=3)  # max_retries=2: attempt 3 is the last
    with pytest.raises(ApplicationError) as unknown:
        await run(last, None)
    assert unknown.value.type == OUTCOME_UNKNOWN
    assert tickets.by_key[last.idempotency_key] == 1


async def test_an_effect_with_no_key_and_no_look_up_is_never_repeated_blindly() -> None:
    adapter = CallOnly()
    run = driven(adapter, _declared(IdempotencyStrategy.NONE))
    with pytest.raises(ApplicationError) as unknown:
        await run(_input(_spec(IdempotencyStrategy.NONE)), None)
    assert unknown.value.type == OUTCOME_UNKNOWN
    assert unknown.value.non_retryable
    # With no effect (a read), a timeout is retried as any other.
    read = driven(CallOnly(), _declared(IdempotencyStrategy.NONE, effect=EffectType.NONE))
    with pytest.raises(ApplicationError) as timed_out:
        await read(_input(_spec(IdempotencyStrategy.NONE, EffectType.NONE)), None)
    assert timed_out.value.type == ErrorTaxonomy.TIMEOUT.value


def test_a_reconcile_adapter_without_find_is_refused_when_made() -> None:
    with pytest.raises(AdapterLoadError, match="must have find"):
        driven(CallOnly(), _declared(IdempotencyStrategy.RECONCILE))


async def test_a_worker_makes_every_declared_adapter() -> None:
    catalog = CapabilityCatalog((*BUILTINS, _declared(IdempotencyStrategy.RECONCILE)))
    async with httpx.AsyncClient() as http:
        made = make_adapters(catalog, AdapterContext(http, HostGuard([]), MoatSettings()))
    assert set(made) >= {c.spec.adapter for c in installed()} | {"acme_test"}
    assert catalog.get("acme.test") is not None
    assert catalog.output_shape(_spec(IdempotencyStrategy.RECONCILE)) == {"ticket_id": None}


def test_a_factory_path_that_does_not_import_is_named() -> None:
    with pytest.raises(AdapterLoadError, match="acme_missing"):
        load_factory("acme_missing.adapters:make")
    with pytest.raises(AdapterLoadError, match="module:callable"):
        load_factory("tests.activities.test_plugins")


def test_the_builtins_are_installed_by_their_entry_point() -> None:
    ids = {c.spec.id for c in installed()}
    assert {c.spec.id for c in BUILTINS} <= ids
    assert CapabilityCatalog().get("slack.post_message") is not None


def test_two_declarations_of_one_capability_or_adapter_name_are_refused() -> None:
    mine = _declared(IdempotencyStrategy.RECONCILE)
    with pytest.raises(CapabilityRegistryError, match="declared twice: by a and by b"):
        checked([("a", mine), ("b", mine)])
    other_id = Capability(
        spec=mine.spec.model_copy(update={"id": "acme.other"}),
        input_model=TicketInput,
        adapter="elsewhere:make",
    )
    with pytest.raises(CapabilityRegistryError, match="adapter name 'acme_test' is taken by a"):
        checked([("a", mine), ("b", other_id)])
    # Two versions of one capability may share an adapter.
    newer = Capability(
        spec=mine.spec.model_copy(update={"version": "1.1.0"}),
        input_model=TicketInput,
        adapter=mine.adapter,
    )
    assert len(checked([("a", mine), ("a", newer)])) == 2


NOT_A_CAPABILITY = {"id": "acme.test"}


def test_an_entry_point_naming_anything_but_declarations_is_refused() -> None:
    from importlib.metadata import EntryPoint

    from schemas.registry import GROUP, _load

    wrong = EntryPoint("acme", "tests.activities.test_plugins:NOT_A_CAPABILITY", GROUP)
    with pytest.raises(CapabilityRegistryError, match=r"entry point acme .* must name"):
        _load(wrong)
    broken = EntryPoint("acme", "acme_missing.capabilities:CAPABILITIES", GROUP)
    with pytest.raises(CapabilityRegistryError, match="could not be loaded"):
        _load(broken)
    fine = EntryPoint("builtin", "schemas.capabilities:BUILTINS", GROUP)
    assert _load(fine) == BUILTINS


def _acme_region(config: dict[str, Any]) -> dict[str, Any]:
    if config.get("region") not in ("eu", "us"):
        raise ValueError("region must be eu or us")
    return config


ACME_KIND = ConnectionKind("acme_crm", "An ACME CRM API token.", check_config=_acme_region)


@pytest.fixture
def acme_installed(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The registry as if a package declaring ``acme.test`` and its connection type were
    installed."""
    from schemas import registry

    declared = Capability(
        spec=_spec(IdempotencyStrategy.RECONCILE).model_copy(
            update={"connection_types": ("acme_crm",)}
        ),
        input_model=TicketInput,
        adapter="tests.activities.test_plugins:Tickets",
        connection_kinds=(ACME_KIND,),
    )
    monkeypatch.setattr(registry, "installed", lambda: (*BUILTINS, declared))
    registry.connection_kinds.cache_clear()
    yield declared
    registry.connection_kinds.cache_clear()


def test_a_connection_type_nobody_installed_is_refused_naming_those_that_are() -> None:
    with pytest.raises(ValidationError) as refused:
        ConnectionCreate(type="acme_crm", name="n", secret="s3cret")
    message = str(refused.value)
    assert "no connection type acme_crm is installed" in message
    assert "github, http_bearer, notion, oauth2, resend, slack, smtp, webhook" in message


def test_a_package_declares_its_own_connection_type(acme_installed: Capability) -> None:
    made = ConnectionCreate(
        type="acme_crm",
        name="n",
        secret="s3cret",
        config={"region": "eu", "base_url": "https://crm.acme.test/api"},
    )
    assert made.type == "acme_crm"
    # Its own rule, then the origin rules of a type with no default origin.
    with pytest.raises(ValidationError, match="region must be eu or us"):
        ConnectionCreate(type="acme_crm", name="n", secret="s3cret", config={"region": "mars"})
    with pytest.raises(ValidationError, match="must name where its secret may be sent"):
        ConnectionCreate(type="acme_crm", name="n", secret="s3cret", config={"region": "us"})
    schema = ConnectionCreate.model_json_schema()
    assert "acme_crm" in schema["properties"]["type"]["enum"]
    assert "acme_crm" in schema["if"]["properties"]["type"]["enum"]
    assert "slack" not in schema["if"]["properties"]["type"]["enum"]


def test_one_connection_type_declared_two_ways_is_refused(
    acme_installed: Capability, monkeypatch: pytest.MonkeyPatch
) -> None:
    from schemas import registry

    rival = Capability(
        spec=_spec(IdempotencyStrategy.NONE).model_copy(
            update={"id": "rival.test", "adapter": "rival"}
        ),
        input_model=TicketInput,
        adapter="rival:make",
        connection_kinds=(ConnectionKind("acme_crm", "Someone else's."),),
    )
    monkeypatch.setattr(registry, "installed", lambda: (*BUILTINS, acme_installed, rival))
    registry.connection_kinds.cache_clear()
    with pytest.raises(CapabilityRegistryError, match=r"'acme_crm' of rival\.test"):
        registry.connection_kinds()
