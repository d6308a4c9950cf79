"""Replay: a repeat of a finished execution answered with its stored answer, from memory
(``from_memory``) or from Postgres (``from_postgres``), without Temporal.

Either way the repeat is an idempotent hit, counted in memory (``hits``: no write on a
replay), and another input under the same key is ``idempotency_key_reused``.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession

from schemas.execute import envelope_for_receipt
from starter.service.executions.call import Outcome, Unfinished, key_reused
from starter.service.executions.hits import HitLedger
from starter.service.executions.ingest import Prepared
from starter.service.executions.memory import AnswerCache, RememberedAnswer, render
from store import api_keys, idempotency, outputs
from store.api_keys import AuthenticatedTenant
from store.held import HeldReads
from store.keyrings.codec import OutputSealer


def answerable(prepared: Prepared) -> bool:
    """Whether a stored answer may answer the request as it is: not a dry run, and no
    connection to check first."""
    return not prepared.request.dry_run and prepared.request.connection_id is None


def from_memory(
    answers: AnswerCache, hits: HitLedger, tenant_id: str, prepared: Prepared
) -> Outcome | None:
    """A repeat of a finished execution answered from memory (``memory``), counted as a hit
    like one from Postgres; ``409`` for another input under the key. None: ask Postgres
    (not kept, expired, a dry run, or a connection to check)."""
    if not answerable(prepared):
        return None
    now = datetime.now(UTC)
    answer = answers.get(tenant_id, prepared.idempotency_key, now)
    if answer is None:
        return None
    if answer.input_hash != prepared.input_hash:
        raise key_reused(prepared.idempotency_key, answer.receipt_id)
    hits.note(tenant_id, answer.receipt_id, answer.capability_id, prepared.idempotency_key, now)
    encoded = [answer.rendered] if answer.rendered is not None else []
    return Outcome(answer.envelope, stored=True, encoded=encoded)


async def from_postgres(
    session: AsyncSession,
    sealer: OutputSealer,
    hits: HitLedger,
    answers: AnswerCache,
    tenant_id: str,
    prepared: Prepared,
) -> Outcome | Unfinished | None:
    """The stored answer for a live key, from Postgres alone (reads only: the hit is
    counted by ``hits``), kept in memory for the next repeat; otherwise go on to Temporal
    with the execution that holds the key (``Unfinished``) or a new one (None)."""
    if prepared.request.dry_run:
        return None
    now = datetime.now(UTC)
    # Claim, receipt and kept output in one statement: a replay reads once.
    found = await idempotency.find_replay(session, tenant_id, prepared.idempotency_key, now)
    return _answer(found, sealer, hits, answers, tenant_id, prepared, now)


async def authenticated_from_postgres(
    reads: HeldReads,
    sealer: OutputSealer,
    hits: HitLedger,
    answers: AnswerCache,
    presented: str,
    known: AuthenticatedTenant,
    prepared: Prepared,
) -> tuple[Outcome | Unfinished | None, AuthenticatedTenant | None] | None:
    """``from_postgres`` for an ``answerable`` request whose key was verified moments ago
    (``known``), in one statement on a held connection and with no session
    (``idempotency.replay_authenticated``). A stored answer is replayed on the key verified
    moments ago, as memory replays it; otherwise the key is authenticated in Postgres by
    the same statement, for the run to start or join.

    What ``from_postgres`` says, and the key's tenant (None: the key is unknown or revoked
    now); None when it was not read (read it in a transaction)."""
    lookup = api_keys.lookup_params(presented)
    if lookup is None:
        return None
    now = datetime.now(UTC)
    key = prepared.idempotency_key
    read = await idempotency.replay_authenticated(reads, lookup, known.tenant_id, key, now)
    if read is None:
        return None
    found, tenant = read
    if found is not None and found[1] is not None:  # a recorded receipt: not looked up
        tenant = known
    if tenant is None:
        return None, None
    return _answer(found, sealer, hits, answers, known.tenant_id, prepared, now), tenant


def _answer(
    found: idempotency.Replay | None,
    sealer: OutputSealer,
    hits: HitLedger,
    answers: AnswerCache,
    tenant_id: str,
    prepared: Prepared,
    now: datetime,
) -> Outcome | Unfinished | None:
    """What a replay's read comes to (``from_postgres``)."""
    if found is None:
        return None
    claim, receipt, output = found
    if claim.input_hash != prepared.input_hash:
        raise key_reused(prepared.idempotency_key, claim.receipt_id)
    if receipt is None:
        return Unfinished(claim.receipt_id)
    # Counted in memory and added to the execution's counter in batches: no write, and
    # no Temporal call, on a replay.
    hits.note(tenant_id, receipt.id, receipt.capability_id, prepared.idempotency_key, now)
    kept = outputs.opened(sealer, output) if output is not None else None
    envelope = envelope_for_receipt(receipt, kept, replayed=True)
    # What Postgres answers stays true until the key or the kept output expires.
    until = min(claim.expires_at, output.expires_at) if output is not None else claim.expires_at
    # Encoded once: this answer and every one from memory send these bytes.
    encoded = render(envelope)
    answers.keep(
        tenant_id,
        prepared.idempotency_key,
        RememberedAnswer(
            claim.input_hash, receipt.id, receipt.capability_id, envelope, until, encoded
        ),
    )
    return Outcome(envelope, stored=True, encoded=[encoded])
