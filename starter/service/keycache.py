"""API keys verified recently, so a repeated request skips the database round trip.

Only the execute route's answers from memory (a stored receipt, a run already in flight)
rely on it; every request that reaches Postgres authenticates there again, in its own
transaction. Kept by the SHA-256 of the presented key (never the key), for
``MOAT_AUTH_CACHE_SECONDS`` after the lookup began.

Bound on revocation: a key revoked through this gateway is forgotten at once; one revoked
elsewhere (another gateway, ``moat key revoke``) is refused by this gateway at most
``MOAT_AUTH_CACHE_SECONDS`` after the revocation committed. Only valid keys are kept; an
unknown or revoked key is looked up every time. Concurrent requests with the same key
share one lookup (a storm of copies makes one round trip, not one each).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable

from store.api_keys import AuthenticatedTenant

# Distinct keys held; past it the oldest is dropped (a key is a tenant's, so this is
# the number of keys calling within one TTL, never the number of requests).
MAX_KEYS = 10_000
DEFAULT_TTL_SECONDS = 1.0

Lookup = Callable[[str], Awaitable[AuthenticatedTenant | None]]


class KeyCache:
    """Verified keys by hash, each with the monotonic time it stops being trusted."""

    def __init__(
        self,
        ttl_seconds: float,
        max_keys: int = MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_seconds = ttl_seconds
        self._max_keys = max_keys
        self._clock = clock
        self._keys: dict[bytes, tuple[AuthenticatedTenant, float]] = {}
        self._looking: dict[bytes, asyncio.Future[AuthenticatedTenant | None]] = {}

    def __len__(self) -> int:
        return len(self._keys)

    @staticmethod
    def _digest(presented: str) -> bytes:
        return hashlib.sha256(presented.encode()).digest()

    def get(self, presented: str) -> AuthenticatedTenant | None:
        """The key's tenant if verified less than the TTL ago, else None."""
        digest = self._digest(presented)
        held = self._keys.get(digest)
        if held is None:
            return None
        if self._clock() >= held[1]:
            del self._keys[digest]
            return None
        return held[0]

    async def verified(self, presented: str, lookup: Lookup) -> AuthenticatedTenant | None:
        """The key's tenant, from memory or from ``lookup`` (shared by concurrent copies of
        the same key); None when the key is unknown or revoked."""
        if self.ttl_seconds <= 0:
            return await lookup(presented)
        held = self.get(presented)
        if held is not None:
            return held
        digest = self._digest(presented)
        looking = self._looking.get(digest)
        if looking is not None:
            return await asyncio.shield(looking)
        future: asyncio.Future[AuthenticatedTenant | None] = (
            asyncio.get_running_loop().create_future()
        )
        self._looking[digest] = future
        # Trusted from when the lookup began: a revocation committed during it still
        # counts within the bound.
        until = self._clock() + self.ttl_seconds
        try:
            tenant = await lookup(presented)
        except BaseException as err:
            future.set_exception(err)
            future.exception()  # retrieved here: copies that were waiting re-raise it
            raise
        else:
            future.set_result(tenant)
        finally:
            del self._looking[digest]
        if tenant is not None:
            self._keep(digest, tenant, until)
        return tenant

    def _keep(self, digest: bytes, tenant: AuthenticatedTenant, until: float) -> None:
        if digest not in self._keys and len(self._keys) >= self._max_keys:
            del self._keys[next(iter(self._keys))]
        self._keys[digest] = (tenant, until)

    def forget(self, key_id: str) -> None:
        """Drop a key (revoked through this gateway): its next request goes to Postgres."""
        for digest in [d for d, (t, _) in self._keys.items() if t.key_id == key_id]:
            del self._keys[digest]
