"""What an adapter package imports from Moat (``docs/adapters.md``): the declaration of a
capability, the adapter's input and output, and the tools every adapter must use.

A package declares its capabilities under the entry point group ``moat.capabilities``::

    [project.entry-points."moat.capabilities"]
    acme = "moat_acme_crm.capabilities:CAPABILITIES"

where ``CAPABILITIES`` is a ``Capability`` or a sequence of them. Each names, as
``package.module:factory``, a callable that takes an ``AdapterContext`` and returns the
adapter: an object with ``async call(inp, credential) -> AdapterOutput`` and, for a
``reconcile`` capability, ``async find(inp, credential) -> AdapterOutput | None``.

The rules an adapter keeps (the conformance kit, ``moat.testing``, checks them):

- no state between calls: one adapter object serves every tenant and every attempt;
- every outbound HTTP call through ``send`` (the host guard, the byte cap on answers, the
  connection's secret scrubbed from what comes back); any other connection only to an
  address ``HostGuard.check`` answers for the host and port (the address it vetted, to
  connect to in place of the name);
- failures in its own words, through ``fail`` with an ``ErrorTaxonomy`` value (or a stable
  code), never a library's exception text, which may hold a secret;
- what it returns through ``recorded`` (redacted, hashed as the receipt holds it);
- an effect it cannot settle (no answer, and nothing to look it up with) ends
  ``outcome_unknown``, never a blind repeat.
"""

from __future__ import annotations

from activities.adapters.base import fail, parse_input
from activities.adapters.guard import HostGuard
from activities.adapters.plugins import AdapterContext, Driven
from activities.adapters.reconcile import outcome_unknown
from activities.adapters.responses import ProviderResponse, recorded
from activities.adapters.sender import SendRequest, send
from schemas.capabilities import (
    Capability,
    CapabilitySpec,
    EffectType,
    IdempotencyStrategy,
    ProbeSpec,
    RetrySettings,
)
from schemas.connections import ConnectionKind, ConnectionType, Credential
from schemas.records import ErrorTaxonomy
from schemas.run import AdapterInput, AdapterOutput

__all__ = [
    "AdapterContext",
    "AdapterInput",
    "AdapterOutput",
    "Capability",
    "CapabilitySpec",
    "ConnectionKind",
    "ConnectionType",
    "Credential",
    "Driven",
    "EffectType",
    "ErrorTaxonomy",
    "HostGuard",
    "IdempotencyStrategy",
    "ProbeSpec",
    "ProviderResponse",
    "RetrySettings",
    "SendRequest",
    "fail",
    "outcome_unknown",
    "parse_input",
    "recorded",
    "send",
]
