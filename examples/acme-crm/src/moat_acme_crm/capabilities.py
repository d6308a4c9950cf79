"""The package's declarations, named by its ``moat.capabilities`` entry point."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from moat.adapters import (
    Capability,
    CapabilitySpec,
    ConnectionKind,
    EffectType,
    IdempotencyStrategy,
    RetrySettings,
)


class CreateTicketInput(BaseModel):
    """Input of ``acme.create_ticket``."""

    # A refused value may be a secret: errors never repeat it.
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    subject: str = Field(min_length=1, max_length=200)
    body: str = Field(default="", max_length=20000)
    customer_id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")


# The package's own connection type: an Acme API token, sent only to the tenant's Acme API,
# which the connection's config names (``base_url``; Acme has no address of its own).
ACME_CRM = ConnectionKind("acme_crm", "An Acme CRM API token; config.base_url: the tenant's API.")

CREATE_TICKET = Capability(
    spec=CapabilitySpec(
        id="acme.create_ticket",
        version="1.0.0",
        adapter="acme_create_ticket",
        adapter_id="acme-create-ticket-v1",
        description="A ticket in Acme's CRM for a customer, created once per key.",
        effect_type=EffectType.SOR_UPDATE,
        timeout_seconds=15.0,
        retry=RetrySettings(max_retries=3, base_delay_seconds=1.0),
        idempotency=IdempotencyStrategy.RECONCILE,
        connection_types=(ACME_CRM.name,),
        connection_required=True,
    ),
    input_model=CreateTicketInput,
    adapter="moat_acme_crm.adapter:make",
    output_shape=dict.fromkeys(("ticket_id", "url", "reconciled")),
    connection_kinds=(ACME_CRM,),
)

CAPABILITIES = (CREATE_TICKET,)
