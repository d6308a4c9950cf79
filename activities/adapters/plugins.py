"""How a worker makes the adapters its catalog declares, and the shape an adapter may take
(``docs/adapters.md``).

An adapter is either

- a callable ``(AdapterInput, Credential | None) -> AdapterOutput`` that does everything
  itself (the built-ins), or
- an object with ``call(inp, credential)`` and, for a ``reconcile`` capability,
  ``find(inp, credential)``. Moat drives it (``driven``): before any attempt that may repeat
  an earlier one, ``find`` looks for the earlier attempt's effect by the downstream key, and
  its answer (marked ``reconciled``) stands for the call; otherwise ``call`` performs the
  effect. A look-up that fails, or a call that ends without an answer on the last attempt,
  ends ``outcome_unknown``: never a blind repeat. A capability with a side effect and the
  strategy ``none`` has nothing to look with: a call without an answer ends
  ``outcome_unknown`` at once. ``looks_in(inp)``, when the adapter has it, names what the
  look-up reads for a failure's message (``the history of channel C1``).

Either way an adapter keeps no state between calls, fails with ``fail(...)`` in its own
words, sends every request through ``send`` (the host guard, the byte cap on answers, the
secret scrubbed), and opens any other connection only to the address ``HostGuard.check``
answers for its host and port.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import httpx
from temporalio.exceptions import ApplicationError

from activities.adapters.base import Adapter
from activities.adapters.guard import HostGuard
from activities.adapters.reconcile import (
    ambiguous,
    call_failed,
    lookup_failed,
    outcome_unknown,
    window_start,
)
from schemas.capabilities import Capability, CapabilityCatalog, EffectType, IdempotencyStrategy
from schemas.connections import Credential
from schemas.provider_evidence import ProviderEvidence, ReconcileProof
from schemas.run import AdapterInput, AdapterOutput
from schemas.settings import MoatSettings


@dataclass(frozen=True)
class AdapterContext:
    """What a worker gives an adapter's factory, once: the HTTP client every adapter shares
    (no cookies kept, no redirects followed), the host guard with the worker's allow-list,
    and the worker's settings."""

    http: httpx.AsyncClient
    guard: HostGuard
    settings: MoatSettings


@runtime_checkable
class CallAdapter(Protocol):
    async def call(self, inp: AdapterInput, credential: Credential | None) -> AdapterOutput: ...


@runtime_checkable
class FindAdapter(CallAdapter, Protocol):
    async def find(
        self, inp: AdapterInput, credential: Credential | None
    ) -> AdapterOutput | None: ...


class AdapterLoadError(RuntimeError):
    """A declaration whose adapter cannot be made: the message names it."""


def driven(adapter: CallAdapter, declaration: Capability) -> Adapter:
    """A ``call``/``find`` adapter as the adapter step calls it (``drive``); refused when a
    ``reconcile`` capability's adapter cannot look (no ``find``)."""
    spec = declaration.spec
    if spec.idempotency == IdempotencyStrategy.RECONCILE and not isinstance(adapter, FindAdapter):
        raise AdapterLoadError(
            f"{spec.id} is a reconcile capability: its adapter ({declaration.adapter}) must "
            "have find(inp, credential) beside call(inp, credential)"
        )

    async def run(inp: AdapterInput, credential: Credential | None) -> AdapterOutput:
        return await drive(adapter, inp, credential)

    return run


async def drive(
    adapter: CallAdapter, inp: AdapterInput, credential: Credential | None
) -> AdapterOutput:
    """One attempt of a ``call``/``find`` adapter under its capability's strategy."""
    spec = inp.capability
    finds = spec.idempotency == IdempotencyStrategy.RECONCILE
    finder = adapter if finds and isinstance(adapter, FindAdapter) else None
    # No key, no look-up: a repeat after a call that may have landed would be blind.
    blind = spec.idempotency == IdempotencyStrategy.NONE and spec.effect_type != EffectType.NONE
    what = f"{spec.id}'s call"
    looked = False
    if finder is not None and inp.repeat:
        looked = True
        try:
            found = await finder.find(inp, credential)
        except ApplicationError as err:
            raise lookup_failed(inp, err, _looks_in(adapter, inp)) from None
        if found is not None:
            return found.model_copy(
                update={"reconciled": True, "evidence": _proved(adapter, inp, found)}
            )
    try:
        out = await adapter.call(inp, credential)
    except ApplicationError as err:
        if finder is not None:
            raise call_failed(inp, err, what) from None
        if blind and ambiguous(err):
            raise outcome_unknown(f"{what} ended without an answer ({err.type})") from None
        raise
    return out.model_copy(update={"reconciled": False}) if looked else out


def _looks_in(adapter: object, inp: AdapterInput) -> str:
    """What the look-up reads, for its failure's message: the adapter's ``looks_in(inp)``
    when it has one."""
    looks_in = getattr(adapter, "looks_in", None)
    return str(looks_in(inp)) if callable(looks_in) else f"what {inp.capability.id} looks in"


def _proved(adapter: object, inp: AdapterInput, found: AdapterOutput) -> ProviderEvidence:
    """The found effect's evidence with how it was found: the adapter's own account of its
    look-up when it gives one, else what the look-up reads and the mark it matched."""
    evidence = found.evidence or ProviderEvidence(provider=inp.capability.adapter_id)
    if evidence.reconciled is not None:
        return evidence
    proof = ReconcileProof(
        looked_in=_looks_in(adapter, inp),
        mark=inp.idempotency_key,
        since=window_start(inp),
        attempt=inp.attempt,
    )
    return evidence.model_copy(update={"reconciled": proof})


class Driven:
    """A ``call``/``find`` adapter callable as the adapter step calls adapters (``drive``):
    what a test or a bench does with it directly is what the worker does."""

    async def __call__(
        self, inp: AdapterInput, credential: Credential | None = None
    ) -> AdapterOutput:
        assert isinstance(self, CallAdapter)
        return await drive(self, inp, credential)


def load_factory(path: str) -> object:
    """The callable ``package.module:name`` names."""
    module, _, name = path.partition(":")
    try:
        target: object = importlib.import_module(module)
        for part in name.split(".") if name else ():
            target = getattr(target, part)
    except (ImportError, AttributeError) as err:
        raise AdapterLoadError(f"the adapter factory {path!r} cannot be imported: {err}") from err
    if not name or not callable(target):
        raise AdapterLoadError(f"the adapter factory {path!r} is not a `module:callable` path")
    return target


def make_adapters(catalog: CapabilityCatalog, ctx: AdapterContext) -> Mapping[str, Adapter]:
    """One adapter per declaration of ``catalog``, by adapter name."""
    made: dict[str, Adapter] = {}
    for declaration in catalog.declarations():
        factory = load_factory(declaration.adapter)
        adapter = factory(ctx)  # type: ignore[operator]
        if isinstance(adapter, CallAdapter):
            made[declaration.spec.adapter] = driven(adapter, declaration)
        elif callable(adapter):
            made[declaration.spec.adapter] = adapter
        else:
            raise AdapterLoadError(
                f"{declaration.adapter} made a {type(adapter).__name__}: an adapter is an "
                "object with call(inp, credential) (and find for reconcile) or a callable"
            )
    return made
