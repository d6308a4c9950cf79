"""Redaction's cost and reach: every pattern runs in linear time, one call does bounded
work whatever it is given (an adversarial string at the gateway's body limit takes at most
``LINEAR`` times what its half takes, measured in the same run, and never ``CEILING_MS``),
past its bounds it hides rather than leaks, and secret query parameters are redacted in
relative references and bare query strings too."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.redaction import (
    MAX_REDACTED_CHARS,
    MAX_REDACTED_MATCHES,
    MAX_REDACTED_TEXT_CHARS,
    REDACTED,
    WEBHOOK_URLS,
    redact,
    redact_string,
    redact_text,
    redacted_hash,
)
from schemas.settings import MoatSettings

BODY_LIMIT: int = MoatSettings.model_fields["max_body_bytes"].default
# Doubling a string at most triples its redaction's time: linear work doubles it, a pattern
# that backtracks or weighs candidates one by one (quadratic) quadruples it. Measured as a
# ratio in the same run, so that the machine's speed cancels out; the ceiling holds on any
# machine the suite runs on (tens of ms at the limit on a 2-CPU VM), far below what would
# stall a gateway's event loop or Temporal's 2 s deadlock detector.
LINEAR = 3.0
CEILING_MS = 250.0
# What a redaction of a few ms may take more on one call than on another (a string of the
# body limit is allocated and its pages faulted in anew each time, counted as its CPU time).
SLACK_MS = 5.0
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"


def _thread_ms(redaction: Callable[[Any], Any], value: Any) -> float:
    """The CPU time of one redaction of ``value``, in ms (this thread's only)."""
    start = time.thread_time()
    redaction(value)
    return (time.thread_time() - start) * 1000


def cpu_ms(redaction: Callable[[Any], Any], value: Any) -> float:
    """The CPU time one redaction takes, in ms: the best of three, so that other processes
    on a busy machine do not count."""
    return min(_thread_ms(redaction, value) for _ in range(3))


def cpu_ms_paired(
    redaction: Callable[[Any], Any], value: Any, other: Any, rounds: int = 5
) -> tuple[float, float]:
    """``cpu_ms`` of ``value`` and of ``other``, measured in turn, round after round (the
    best of each): what warms up on the first call (a cache, the allocator) counts for
    neither."""
    took: list[float] = []
    took_other: list[float] = []
    for _ in range(rounds):
        took_other.append(_thread_ms(redaction, other))
        took.append(_thread_ms(redaction, value))
    return min(took), min(took_other)


def at_body_limit(unit: str, tail: str = "", limit: int = BODY_LIMIT) -> str:
    """``unit`` repeated, then ``tail``: as long as a string in a body at the limit can be
    (or at ``limit``)."""
    return unit * ((limit - len(tail)) // len(unit)) + tail


def assert_redacted_quickly(full: str, half: str) -> None:
    """Both redactions of ``full`` (a string at the body limit) take at most ``LINEAR``
    times what those of ``half`` (the same shape at half the limit) take, give or take
    ``SLACK_MS``, and less than ``CEILING_MS``."""
    for redaction, value, halved in (
        (redact, {"input": full}, {"input": half}),
        (redact_text, full, half),
    ):
        took, took_half = cpu_ms_paired(redaction, value, halved)
        assert took < CEILING_MS
        assert took <= LINEAR * took_half + SLACK_MS, (took, took_half)


# Each shape once made a pattern backtrack, recurse, or weigh candidates one by one; each
# made as long as a string of ``n`` characters in a body can be.
def adversarial(n: int) -> dict[str, str]:
    return {
        "issue-200KiB": "a" * (200 * 1024 * n // BODY_LIMIT) + " b://",
        "scheme-run": at_body_limit("a", "b://", limit=n),
        "schemes": at_body_limit("a://", limit=n),
        "userinfos": at_body_limit("a://a@", limit=n),
        "url-chars": at_body_limit("x", "", limit=n) + "https://",
        "long-url": "https://" + at_body_limit("a", limit=n),
        "nested-urls": at_body_limit("https://a.example/?next=", limit=n),
        "nested-secret-params": at_body_limit("https://a.example/?token=", limit=n),
        "jwt-headers": at_body_limit("-eyJ", limit=n),
        "jwt-unterminated": at_body_limit("eyJaaaaaaaaaa.eyJ", limit=n),
        "jwt-dots": at_body_limit("eyJ.", limit=n),
        "jwt-no-header": at_body_limit("x.eyJaaaaaaaa.bbbbbbbb ", limit=n),
        "jwts": at_body_limit(JWT + " ", limit=n),
        "bare-params": at_body_limit("&a=1", limit=n),
        "word-params": at_body_limit(" a=", limit=n),
        "secret-params": at_body_limit("&token=x", limit=n),
        "hinted-params": at_body_limit("&monkey=x", limit=n),
        "percent-params": at_body_limit("&%=x", limit=n),
        "long-secret-name": "?" + at_body_limit("token", limit=n),
        "webhooks": at_body_limit("https://hooks.slack.com/services/x ", limit=n),
        "private-key-headers": at_body_limit("-----BEGIN PRIVATE KEY-----", limit=n),
        "private-key-label": "-----BEGIN " + at_body_limit("A", limit=n),
        "bearers": at_body_limit("Bearer ", limit=n),
        "bearer-spaces": "Bearer" + at_body_limit(" ", limit=n),
        "credentials": "://" + at_body_limit("a:", limit=n),
        "moat-keys": at_body_limit("-moat_a_b", limit=n),
        "mixed": at_body_limit(" a=&b=a://a@x.eyJ-eyJ", limit=n),
    }


ADVERSARIAL = adversarial(BODY_LIMIT)
HALVED = adversarial(BODY_LIMIT // 2)


@pytest.mark.parametrize("name", ADVERSARIAL)
def test_adversarial_strings_at_the_body_limit_are_redacted_quickly(name: str) -> None:
    text = ADVERSARIAL[name]
    assert len(text) <= BODY_LIMIT + 64
    assert_redacted_quickly(text, HALVED[name])


def test_the_issues_200KiB_body_is_redacted_in_a_fraction_of_a_second() -> None:
    """The shape that held a gateway for 55 s (its regex backtracked quadratically)."""
    body = {"message": "a" * (200 * 1024) + " b://"}
    start = time.perf_counter()
    digest = redacted_hash(body)
    assert time.perf_counter() - start < 2.0
    assert digest.startswith("sha256:")


# A few characters that matter to some pattern, and filler; a unit of them is repeated to
# the body limit.
pieces = st.sampled_from(
    [
        "a",
        "b",
        " ",
        "://",
        "/",
        "?",
        "&",
        "=",
        "#",
        "@",
        ":",
        ".",
        "-",
        "_",
        "%",
        "eyJ",
        "token",
        "key",
        "Bearer ",
        "-----BEGIN ",
        "PRIVATE KEY-----",
        "hooks.slack.com/services/",
        "moat_",
        "sk-",
        "ghp_",
        "AKIA",
    ]
)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(pieces, min_size=1, max_size=12).map("".join), pieces)
def test_any_repeated_shape_at_the_body_limit_is_redacted_quickly(unit: str, tail: str) -> None:
    half = at_body_limit(unit, tail, BODY_LIMIT // 2)
    assert_redacted_quickly(at_body_limit(unit, tail), half)


# --- Past the bounds: hidden, never leaked -------------------------------------------------


def test_a_call_past_its_character_budget_redacts_what_is_left_whole() -> None:
    chunk = "x" * (1024 * 1024)
    value = {"a": chunk, "b": chunk, "c": chunk, "d": [chunk, 42, True, None], "e": "plain"}
    out = redact(value)
    assert out["a"] == out["b"] == out["c"] == chunk  # 3 Mi characters: within the budget
    assert out["d"] == [REDACTED, REDACTED, REDACTED, None]
    assert out["e"] == REDACTED
    assert redact_string("y" * (MAX_REDACTED_CHARS + 1)) == REDACTED


def test_a_call_past_its_candidate_budget_redacts_what_is_left_whole() -> None:
    many = "&token=x" * (MAX_REDACTED_MATCHES + 1)
    assert redact_string(many) == REDACTED
    assert redact_text(many) == REDACTED
    out = redact({"first": many, "then": "?page=2"})
    assert out == {"first": REDACTED, "then": REDACTED}
    # Within the budget, each is redacted in place.
    assert redact_string("&token=x" * 100) == f"&token={REDACTED}" * 100


def test_a_text_past_its_length_is_cut_at_white_space_with_a_marker() -> None:
    secret = "ghp_" + "S" * 36
    words = f"word {secret} https://h.example/?api_key=K3Y "
    text = words * (MAX_REDACTED_TEXT_CHARS // len(words) + 10)
    out = redact_text(text)
    assert len(out) <= MAX_REDACTED_TEXT_CHARS
    assert secret not in out and "K3Y" not in out
    kept, _, marker = out.rpartition(" ")
    assert marker.endswith("more characters, not examined]") or "[REDACTED:" in out
    assert text.startswith(kept.split(REDACTED)[0])
    assert redact_text(out) == out  # a cut text is not cut again
    # No white space to cut at: nothing is kept.
    assert redact_text("z" * (MAX_REDACTED_TEXT_CHARS + 1)).startswith("[REDACTED:")


# --- Where secrets hide --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # A provider echoing the path it was asked, or answering a relative next link.
        ("/ok/q?api_key=SECRET", f"/ok/q?api_key={REDACTED}"),
        ("/ok/q?page=2&access_token=SECRET", f"/ok/q?page=2&access_token={REDACTED}"),
        ("../items?cursor=abc&token=SECRET#top", f"../items?cursor=abc&token={REDACTED}"),
        ("?token=SECRET", f"?token={REDACTED}"),
        ("?sig=SECRET&se=2030", f"?sig={REDACTED}&se=2030"),
        # Bare query strings, and a form-encoded token answer.
        ("a=1&access_token=SECRET", f"a=1&access_token={REDACTED}"),
        (
            "access_token=SECRET&token_type=bearer&scope=repo",
            f"access_token={REDACTED}&token_type={REDACTED}&scope=repo",
        ),
        ("page=2&Client_Secret=SECRET", f"page=2&Client_Secret={REDACTED}"),
        ("x=1&api%5Fkey=SECRET", f"x=1&api%5Fkey={REDACTED}"),
        # A fragment's value runs to the next parameter.
        ("#access_token=SEC#RET&state=s", f"#access_token={REDACTED}&state=s"),
        # Nested, in a parameter that is not secret.
        ("/go?next=/in?key=SECRET&lang=en", f"/go?next=/in?key={REDACTED}&lang=en"),
    ],
)
def test_secret_parameters_of_relative_references_and_query_strings(
    value: str, expected: str
) -> None:
    assert redact({"v": value}) == {"v": expected}
    assert redact_text(f"got {value} back") == f"got {expected} back"


@pytest.mark.parametrize(
    "value",
    [
        "/ok/q?page=2&per_page=50",
        "a=1&b=2",
        "?q=api+key+rotation&keyword=session",
        "key=value",  # a short URL-only name, not a query: the key deny-list decides
        "exit code=1",
        "monkey=1&encoded=2",
    ],
)
def test_query_strings_without_secrets_are_kept(value: str) -> None:
    assert redact({"v": value}) == {"v": value}
    assert redact_text(value) == value


@pytest.mark.parametrize(
    "text",
    [
        f"authorization=Bearer {'T' * 30} and more",
        f"token: {JWT}.",
        f"prefix-{JWT}",
        f"key=-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAK{'Q' * 40}\n-----END RSA PRIVATE",
        f"https://user:{'P' * 12}@hooks.slack.com/services/T000/B000/{'W' * 24}",
    ],
)
def test_free_text_keeps_no_part_of_a_secret(text: str) -> None:
    out = redact_text(text)
    for part in ("T" * 30, JWT[-20:], "Q" * 40, "P" * 12, "W" * 24):
        assert part not in out, out
    assert redact_text(out) == out


def test_every_webhook_host_is_looked_for() -> None:
    urls = [
        "https://hooks.slack.com/services/T/B/SECRET",
        "https://discord.com/api/webhooks/1/SECRET",
        "https://x.webhook.office.com/webhookb2/SECRET",
        "https://outlook.office365.com/webhook/SECRET",
        "https://hooks.zapier.com/hooks/catch/1/SECRET",
        "https://maker.ifttt.com/trigger/e/with/key/SECRET",
    ]
    assert len(urls) == len(WEBHOOK_URLS)
    for url in urls:
        assert "SECRET" not in redact_string(url) and "SECRET" not in redact_text(url)


def test_a_whole_budget_of_work_stays_far_below_the_workflow_deadlock_timeout() -> None:
    """``redact`` runs in workflow code, where a task that holds the thread for 2 s is
    taken for a deadlock: the worst shape found, filling the whole budget, takes far less."""
    half = "a://a@" * (MAX_REDACTED_CHARS // 12)
    assert cpu_ms(redact, {"x": half, "y": half, "z": half}) < 1500
