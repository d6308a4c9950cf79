"""Answers kept in memory: bounded by bytes and by count, held as the bytes they are sent
as (the output only as its bytes), trusted until their bound, kept by tenant and key."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from schemas.execute import Envelope, EnvelopeStatus
from starter.service.executions.memory import ENTRY_OVERHEAD, AnswerCache, RememberedAnswer


def test_the_answer_bound_counts_bytes_and_entries() -> None:
    until = datetime.now(UTC) + timedelta(hours=1)
    envelope = Envelope(trace_id="t" * 32, status=EnvelopeStatus.EXECUTED, output={"x": "y" * 1000})

    def answer(envelope: Envelope = envelope) -> RememberedAnswer:
        return RememberedAnswer("h", "r", "demo.echo", envelope, until)

    one = AnswerCache()
    one.keep("ten_a", "a", answer())
    cost = one.bytes
    assert ENTRY_OVERHEAD + 1000 < cost < ENTRY_OVERHEAD + 2000  # its bytes and the overhead
    answers = AnswerCache(max_answers=100, max_bytes=3 * cost)
    for key in "abcd":
        answers.keep("ten_a", key, answer())
    assert len(answers) == 3 and answers.get("ten_a", "a", datetime.now(UTC)) is None
    kept = answers.get("ten_a", "d", datetime.now(UTC))
    assert kept is not None and kept.rendered is not None and b"y" * 1000 in kept.rendered
    assert kept.envelope.output is None  # the output is held as its bytes only
    assert answers.bytes == 3 * cost
    # Larger than the whole bound: not kept, nothing dropped for it.
    huge = Envelope(trace_id="t" * 32, status=EnvelopeStatus.EXECUTED, output="z" * 20_000)
    answers.keep("ten_a", "e", answer(huge))
    assert answers.get("ten_a", "e", datetime.now(UTC)) is None and len(answers) == 3
    # Replacing an answer does not count it twice; expiry gives its bytes back.
    answers.keep("ten_a", "d", answer())
    assert len(answers) == 3 and answers.bytes == 3 * cost
    assert answers.get("ten_a", "d", until) is None and answers.bytes == 2 * cost
    off = AnswerCache(max_bytes=0)
    off.keep("ten_a", "a", answer())
    assert len(off) == 0


def test_the_answers_are_bounded() -> None:
    answers = AnswerCache(max_answers=2)
    until = datetime.now(UTC) + timedelta(hours=1)
    for key in ("a", "b", "c"):
        answers.keep("ten_a", key, RememberedAnswer("h", "r", "demo.echo", None, until))  # type: ignore[arg-type]
    assert len(answers) == 2
    assert answers.get("ten_a", "a", datetime.now(UTC)) is None
    assert answers.get("ten_b", "b", datetime.now(UTC)) is None
    assert answers.get("ten_a", "c", until) is None  # expired at its bound
