"""Canonicalization (RFC 8785), redaction and hashing, with generated inputs."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.canonical import (
    REDACTED,
    REDACTED_KEY_PATTERNS,
    canonical_bytes,
    is_secret_key,
    redact,
    redacted_hash,
)

SAFE_INT = 2**53 - 1
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-SAFE_INT, SAFE_INT)
    | st.floats(-SAFE_INT, SAFE_INT, allow_nan=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)


def shuffled(value: Any, rng: random.Random) -> Any:
    """The same JSON value with every object's keys in another order."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, rng) for v in value]
    return value


@given(json_values, st.integers())
def test_key_order_and_whitespace_do_not_change_the_hash(value: Any, seed: int) -> None:
    other = shuffled(value, random.Random(seed))
    reparsed = json.loads(json.dumps(other, indent=3))
    assert canonical_bytes(value) == canonical_bytes(other)
    assert redacted_hash(value) == redacted_hash(reparsed)


@given(json_values)
def test_canonical_bytes_round_trip(value: Any) -> None:
    data = canonical_bytes(value)
    assert canonical_bytes(json.loads(data)) == data
    assert b"\n" not in data


@given(json_values)
def test_different_values_hash_differently(value: Any) -> None:
    assert redacted_hash({"v": value}) != redacted_hash({"v": value, "extra": 1})


def test_rfc8785_vectors() -> None:
    assert canonical_bytes({"b": 2, "a": [1, "x", None, True]}) == b'{"a":[1,"x",null,true],"b":2}'
    assert canonical_bytes({"n": 1.0, "e": 1e21}) == b'{"e":1e+21,"n":1}'
    assert canonical_bytes({"\u20ac": 1, "a": 2}) == '{"a":2,"\u20ac":1}'.encode()


def test_integers_outside_ijson_are_refused() -> None:
    with pytest.raises(rfc8785.CanonicalizationError):
        canonical_bytes({"n": 2**53 + 1})


secret_keys = st.sampled_from(REDACTED_KEY_PATTERNS).flatmap(
    lambda p: st.tuples(st.text(max_size=5), st.text(max_size=5)).map(
        lambda t: t[0] + "".join(c.upper() if i % 2 else c for i, c in enumerate(p)) + t[1]
    )
)


@settings(max_examples=200)
@given(secret_keys, json_values, json_values)
def test_secret_keys_are_redacted_at_any_depth(key: str, secret: Any, other: Any) -> None:
    value = {"outer": [{"inner": {key: secret}}], "plain": other}
    out = redact(value)
    assert out["outer"][0]["inner"][key] == REDACTED
    assert is_secret_key(key)
    # Redaction does not change what is not secret (other is kept unless it holds secrets).
    assert redact(out) == out


@given(json_values)
def test_redaction_is_idempotent_and_hash_ignores_secret_values(value: Any) -> None:
    a = {"payload": value, "api_key": "one"}
    b = {"payload": value, "api_key": "two"}
    assert redacted_hash(a) == redacted_hash(b)
    assert redact(redact(a)) == redact(a)


@pytest.mark.parametrize(
    "value",
    [
        "xoxb-123456789012-abcdefghijklmnop",
        "ghp_" + "a" * 36,
        "github_pat_" + "A1" * 15,
        "AKIAIOSFODNN7EXAMPLE",
        "sk-" + "x" * 40,
        "sk_live_" + "y" * 24,
        "Bearer abcdefghijklmnopqrstuvwxyz",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIB...",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "https://user:hunter2@example.com/path",
        "moat_abcdefghijkl_" + "z" * 43,
    ],
)
def test_secret_value_formats_are_redacted_under_any_key(value: str) -> None:
    assert redact({"note": value, "list": [value]}) == {"note": REDACTED, "list": [REDACTED]}


@pytest.mark.parametrize(
    "value", ["hello world", "sk", "Bearer", "a-plain-slug-123", "https://example.com/x"]
)
def test_ordinary_values_are_kept(value: str) -> None:
    assert redact({"note": value}) == {"note": value}
