"""Key cache: API keys verified recently, so a repeated request skips the database round
trip.

Only the execute route's answers of a stored receipt (from memory, or read from Postgres
in one statement) and joins of a run already in flight rely on it; every request that
starts or resumes a run authenticates in Postgres again: in the statement that found no
stored receipt for its key (a key verified moments ago), or in its own transaction. Kept
by the SHA-256 of the presented key (never the key), for ``MOAT_AUTH_CACHE_SECONDS`` after
the lookup began.

Bound on revocation: a key revoked through this gateway, or found revoked by a run's
authentication here, is forgotten at once; one revoked
elsewhere (another gateway, ``moat key revoke``) is refused by this gateway at most
``MOAT_AUTH_CACHE_SECONDS`` after the revocation committed. Only valid keys are kept, by
the request that verified them in its own transaction (no extra round trip), and kept
again by each that verifies them once more; an unknown or revoked key is looked up every
time.

Every request is verified before any work on its body and before it joins a run in flight
(``flights``): by this cache, or by a lookup of its own, or by a lookup of the same
key already under way on this gateway (``pending``: a burst of one new key costs one
lookup), with the same bound: a lookup counts from when it began.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from store.api_keys import AuthenticatedTenant


@dataclass(frozen=True)
class Lookup:
    """A lookup of a key under way on this gateway (``KeyCache.looking_up``)."""

    presented: str
    since: float
    future: asyncio.Future[AuthenticatedTenant | Unknown | None]


class Unknown(enum.Enum):
    """A lookup that failed (Postgres away): it says nothing of the key."""

    UNKNOWN = "unknown"


UNKNOWN = Unknown.UNKNOWN

# Distinct keys held; past it the oldest is dropped (a key is a tenant's, so this is
# the number of keys calling within one TTL, never the number of requests).
MAX_KEYS = 10_000
DEFAULT_TTL_SECONDS = 1.0


class KeyCache:
    """Verified keys by hash, each with the monotonic time it stops being trusted."""

    def __init__(
        self,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        max_keys: int = MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_seconds = ttl_seconds
        self._max_keys = max_keys
        self._clock = clock
        self._keys: dict[bytes, tuple[AuthenticatedTenant, float]] = {}
        # Lookups under way: their outcome (the tenant, None for a refused key), and when
        # they began.
        self._lookups: dict[
            bytes, tuple[asyncio.Future[AuthenticatedTenant | Unknown | None], float]
        ] = {}

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

    def pending(
        self, presented: str
    ) -> asyncio.Future[AuthenticatedTenant | Unknown | None] | None:
        """The outcome of a lookup of this key under way, begun less than the TTL ago."""
        held = self._lookups.get(self.digest(presented))
        if held is None or self._clock() >= held[1] + self.ttl_seconds:
            return None
        return held[0]

    def looking_up(self, presented: str) -> Lookup:
        """Announce a lookup of ``presented`` (others may wait for it: ``pending``); hand
        its outcome to ``looked_up``, whatever it is."""
        future: asyncio.Future[AuthenticatedTenant | Unknown | None] = (
            asyncio.get_running_loop().create_future()
        )
        lookup = Lookup(presented, self._clock(), future)
        if self.ttl_seconds > 0:
            self._lookups[self.digest(presented)] = (future, lookup.since)
        return lookup

    def looked_up(self, lookup: Lookup, tenant: AuthenticatedTenant | Unknown | None) -> None:
        """The outcome of ``lookup``: kept if valid, and told to the requests waiting for it
        (``UNKNOWN`` when it failed: they look the key up themselves)."""
        if isinstance(tenant, AuthenticatedTenant):
            self.keep(lookup.presented, tenant, lookup.since)
        digest = self.digest(lookup.presented)
        held = self._lookups.get(digest)
        if held is not None and held[0] is lookup.future:
            del self._lookups[digest]
        if not lookup.future.done():
            lookup.future.set_result(tenant)

    def forget(self, key_id: str) -> None:
        """Drop a key (revoked through this gateway): its next request goes to Postgres."""
        for digest in [d for d, (t, _) in self._keys.items() if t.key_id == key_id]:
            del self._keys[digest]
