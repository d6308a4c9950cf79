"""Resolving a run's connection at the moment of the adapter call: read and opened under the
tenant's row-level security, on every attempt, so a rotation applies from the next one.

A resolved credential goes only to the origins its connection names (``check_origin``,
called by ``activities.adapters.send`` before anything is sent), and an answer that echoes
it has it replaced before anything reads the answer (``Scrubber``)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import quote, quote_plus

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.exceptions import ApplicationError

from schemas.connections import Credential, Origin
from schemas.errors import ErrorCode
from schemas.oauth import OAUTH2
from schemas.records import ErrorTaxonomy
from schemas.redaction import REDACTED
from store import connections, tenancy
from store.connection_tokens import TokenState
from store.keyrings.connections import ConnectionCipher

# Shorter forms of a secret are not looked for: they would match ordinary text.
MIN_SCRUBBED = 6
# The shortest head of a secret a cut answer may end with that is still cut off.
MIN_TAIL = 4


def refused(code: str, message: str, connection_id: str) -> ApplicationError:
    """A connection the run cannot use: the tenant's to fix, so never retried, and counted
    like a policy refusal rather than against the provider."""
    return ApplicationError(
        message,
        {
            "error_code": code,
            "taxonomy": ErrorTaxonomy.POLICY_DENIED.value,
            "connection_id": connection_id[:80],
        },
        type=code,
        non_retryable=True,
    )


class TokenSource(Protocol):
    """Gives a connection whose secret is not what is sent (a GitHub App's private key) the
    means to get the short-lived token that is: ``wrap`` does no I/O, the adapter asks."""

    def holds(self, credential: Credential) -> bool: ...

    def wrap(self, tenant_id: str, credential: Credential) -> Credential: ...


class OAuthTokenSource(Protocol):
    """An OAuth 2 connection's access token, fresh (``activities.oauth.OAuthTokens``)."""

    async def access_token(
        self,
        tenant_id: str,
        connection_id: str,
        config: dict[str, Any],
        client_secret: str,
        *,
        refused_generation: int | None = None,
    ) -> TokenState: ...


class StoreConnectionResolver:
    """``schemas.connections.ConnectionResolver`` over the ``connections`` table. An
    ``oauth2`` connection resolves to its current access token (``tokens``), its sealed
    secret (the client secret) never leaving this process."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        cipher: ConnectionCipher,
        token_sources: Sequence[TokenSource] = (),
        *,
        tokens: OAuthTokenSource | None = None,
    ) -> None:
        self._sessions = sessions
        self._cipher = cipher
        self._token_sources = tuple(token_sources)
        self._tokens = tokens

    async def resolve(
        self, tenant_id: str, connection_id: str, *, refused_generation: int | None = None
    ) -> Credential:
        async with tenancy.tenant_transaction(self._sessions, tenant_id) as session:
            row = await connections.get_connection(session, tenant_id, connection_id)
            secret = (
                connections.open_secret(self._cipher, row)
                if row is not None and row.revoked_at is None
                else ""
            )
            if row is not None and secret:
                await connections.rekey_legacy_fingerprint(session, self._cipher, row, secret)
        if row is None:
            raise refused(
                ErrorCode.CONNECTION_NOT_FOUND,
                f"the tenant has no connection {connection_id[:80]!r}",
                connection_id,
            )
        if row.revoked_at is not None:
            raise refused(
                ErrorCode.CONNECTION_REVOKED,
                f"connection {row.id} was revoked at {row.revoked_at.isoformat()}: "
                "add a new connection and use its id",
                connection_id,
            )
        generation = None
        if row.type == OAUTH2:
            state = await self._access_token(
                tenant_id, row.id, row.config, secret, refused_generation
            )
            assert state.access_token is not None
            secret, generation = state.access_token, state.generation
        credential = Credential(
            connection_id=row.id,
            type=row.type,
            secret=secret,
            config=dict(row.config),
            fingerprint=row.fingerprint,
            generation=generation,
        )
        for source in self._token_sources:
            if source.holds(credential):
                return source.wrap(tenant_id, credential)
        return credential

    async def refreshed(self, tenant_id: str, stale: Credential) -> Credential:
        """``stale`` again, its access token refreshed: the provider refused it although it
        looked fresh (revoked early). One refresh across every caller that saw it refused."""
        return await self.resolve(
            tenant_id, stale.connection_id, refused_generation=stale.generation
        )

    async def _access_token(
        self,
        tenant_id: str,
        connection_id: str,
        config: Mapping[str, Any],
        client_secret: str,
        refused_generation: int | None,
    ) -> TokenState:
        if self._tokens is None:
            raise ApplicationError(
                "this worker cannot mint OAuth 2 tokens",
                {"error_code": ErrorCode.GATEWAY_ERROR},
                type=ErrorCode.GATEWAY_ERROR,
                non_retryable=True,
            )
        return await self._tokens.access_token(
            tenant_id,
            connection_id,
            dict(config),
            client_secret,
            refused_generation=refused_generation,
        )


def check_origin(credential: Credential, target: Origin) -> None:
    """Refuse, before anything is sent, a request that would carry ``credential`` to an
    origin its connection does not name (``connection_origin_mismatch``)."""
    allowed = credential.origins
    if target in allowed:
        return
    named = ", ".join(str(o) for o in allowed) or "no origin (config.base_url or allowed_origins)"
    raise ApplicationError(
        f"connection {credential.connection_id} may be sent only to {named}, not to {target}: "
        "use a connection bound to that origin, or have an admin add one that is (a "
        "connection's origins are fixed when it is created)",
        {
            "error_code": ErrorCode.CONNECTION_ORIGIN_MISMATCH,
            "taxonomy": ErrorTaxonomy.POLICY_DENIED.value,
            "connection_id": credential.connection_id,
            "origin": str(target),
            "allowed_origins": [str(o) for o in allowed],
        },
        type=ErrorCode.CONNECTION_ORIGIN_MISMATCH,
        non_retryable=True,
    )


def _base64_cores(raw: bytes) -> Iterable[bytes]:
    """What base64 of any text holding ``raw`` shows of it, at each of the three alignments
    ``raw`` may start at: the groups made of ``raw``'s bytes only (basic auth's
    ``user:secret``, a token inside a base64 blob)."""
    for shift in range(3):
        lead = (3 - shift) % 3  # bytes of ``raw`` that share a group with what precedes it
        whole = (len(raw) - lead) // 3 * 3
        if whole <= 0:
            continue
        core = base64.b64encode(raw[lead : lead + whole])
        yield core
        yield core.replace(b"+", b"-").replace(b"/", b"_")


def secret_forms(secret: str) -> tuple[bytes, ...]:
    """The ways a provider's answer may echo ``secret``, longest first: as is, escaped in
    JSON, percent-encoded, in base64 (see ``_base64_cores``); a Standard Webhooks secret's
    key too."""
    texts = {secret, json.dumps(secret)[1:-1], secret.replace("/", "\\/")}
    texts |= {quote(secret, safe=""), quote_plus(secret, safe="")}
    if secret.startswith("whsec_"):
        texts.add(secret.removeprefix("whsec_"))
    forms = {t.encode() for t in texts}
    for raw in list(forms):
        forms.update(_base64_cores(raw))
    return tuple(sorted((f for f in forms if len(f) >= MIN_SCRUBBED), key=len, reverse=True))


class Scrubber:
    """Replaces a connection's secret, in every form ``secret_forms`` knows, with
    ``[REDACTED]`` in what a provider answered, before the answer becomes an output, a
    failure's details or a manifest."""

    def __init__(self, secret: str) -> None:
        self._forms = secret_forms(secret)

    def bytes(self, data: bytes, *, cut: bool = False) -> bytes:
        """``data`` without the secret; ``cut``: ``data`` is the head of a longer answer, so
        a head of the secret it ends with goes too."""
        marker = REDACTED.encode()
        for form in self._forms:
            data = data.replace(form, marker)
        if cut:
            for form in self._forms:
                head = memoryview(form)  # sliced without copying
                for size in range(len(form) - 1, MIN_TAIL - 1, -1):
                    if data.endswith(head[:size]):
                        return data[:-size] + marker
        return data

    def text(self, value: str) -> str:
        return self.bytes(value.encode(errors="surrogateescape")).decode(errors="surrogateescape")
