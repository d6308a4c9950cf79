"""API keys verified recently, so a repeated request skips the database round trip.

Only the execute route's answers from memory (a stored receipt, a run already in flight)
rely on it; every request that reaches Postgres authenticates there again, in its own
transaction. Kept by the SHA-256 of the presented key (never the key), for
``MOAT_AUTH_CACHE_SECONDS`` after the lookup began.

Bound on revocation: a key revoked through this gateway is forgotten at once; one revoked
elsewhere (another gateway, ``moat key revoke``) is refused by this gateway at most
``MOAT_AUTH_CACHE_SECONDS`` after the revocation committed. Only valid keys are kept, by
the request that verified them in its own transaction (no extra round trip); an unknown or
revoked key is looked up every time.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from store.api_keys import AuthenticatedTenant

# Distinct keys held; past it the oldest is dropped (a key is a tenant's, so this is
# the number of keys calling within one TTL, never the number of requests).
MAX_KEYS = 10_000
DEFAULT_TTL_SECONDS = 1.0


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

    def __len__(self) -> int:
        return len(self._keys)

    @staticmethod
    def digest(presented: str) -> bytes:
        return hashlib.sha256(presented.encode()).digest()

    def get(self, presented: str) -> AuthenticatedTenant | None:
        """The key's tenant if verified less than the TTL ago, else None."""
        if self.ttl_seconds <= 0:
            return None
        digest = self.digest(presented)
        held = self._keys.get(digest)
        if held is None:
            return None
        if self._clock() >= held[1]:
            del self._keys[digest]
            return None
        return held[0]

    def now(self) -> float:
        """The cache's clock: read it when a lookup begins and pass it to ``keep``."""
        return self._clock()

    def keep(self, presented: str, tenant: AuthenticatedTenant, since: float) -> None:
        """Trust a key Postgres verified in a lookup that began at ``since`` (a revocation
        committed during the lookup still counts within the bound)."""
        if self.ttl_seconds > 0:
            self._keep(self.digest(presented), tenant, since + self.ttl_seconds)

    def _keep(self, digest: bytes, tenant: AuthenticatedTenant, until: float) -> None:
        if digest not in self._keys and len(self._keys) >= self._max_keys:
            del self._keys[next(iter(self._keys))]
        self._keys[digest] = (tenant, until)

    def forget(self, key_id: str) -> None:
        """Drop a key (revoked through this gateway): its next request goes to Postgres."""
        for digest in [d for d, (t, _) in self._keys.items() if t.key_id == key_id]:
            del self._keys[digest]
