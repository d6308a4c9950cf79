"""Verified API keys kept in memory: by hash, for the TTL from when their lookup began,
bounded in number, forgotten at once when revoked through this gateway."""

from __future__ import annotations

from starter.service.executions.keycache import KeyCache
from store.api_keys import AuthenticatedTenant


def test_verified_keys_are_kept_by_hash_for_the_ttl_and_bounded() -> None:
    now = [10.0]
    cache = KeyCache(1.0, max_keys=2, clock=lambda: now[0])
    tenant = AuthenticatedTenant("ten_a", "k1", "audit", 3600)
    cache.keep("moat_k1_secret", tenant, since=9.5)  # the lookup began half a second ago
    assert cache.get("moat_k1_secret") == tenant
    assert cache.get("moat_k1_other") is None
    assert all(b"secret" not in digest for digest in cache._keys)  # never the key itself
    now[0] = 10.5
    assert cache.get("moat_k1_secret") is None  # 1 s after the lookup began
    cache.keep("moat_k1_secret", tenant, since=now[0])
    cache.forget("k1")
    assert cache.get("moat_k1_secret") is None
    for i in range(3):
        cache.keep(f"moat_k{i}_s", AuthenticatedTenant("ten_a", f"k{i}", "audit", 1), now[0])
    assert len(cache) == 2 and cache.get("moat_k0_s") is None
    off = KeyCache(0.0)
    off.keep("moat_k1_secret", tenant, since=0.0)
    assert off.get("moat_k1_secret") is None and len(off) == 0
