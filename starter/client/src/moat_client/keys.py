"""Idempotency keys the way the send log defines them: ``<task_id>:<action>:<cycle_ts>``.

The same task, action and cycle make the same key, so a repeated send is the same logical
message (Moat runs it once); a new cycle timestamp makes a new one.
"""

from __future__ import annotations

from datetime import UTC, datetime

MAX_KEY_LENGTH = 256


def cycle_timestamp(when: datetime) -> str:
    """A cycle's timestamp as the send log writes it: ``2026-02-16T05:25Z``, always UTC.

    Args:
        when: The cycle's time, timezone-aware; seconds are written only when not zero.

    Returns:
        The timestamp, without microseconds.

    Raises:
        ValueError: ``when`` is naive.
    """
    if when.tzinfo is None:
        raise ValueError("the cycle timestamp must be timezone-aware")
    when = when.astimezone(UTC).replace(microsecond=0)
    spec = "minutes" if when.second == 0 else "seconds"
    return when.replace(tzinfo=None).isoformat(timespec=spec) + "Z"


def send_key(task_id: str, action: str, cycle: str | datetime) -> str:
    """The idempotency key of one logical send in one cycle.

    Args:
        task_id: The agent's task (non-empty, no ``:``).
        action: The action within the task (non-empty, no ``:``).
        cycle: The cycle's timestamp, as text or a timezone-aware ``datetime``.

    Returns:
        ``<task_id>:<action>:<cycle_ts>``.

    Raises:
        ValueError: A part is empty or holds ``:``, the ``datetime`` is naive, or the key is
            over 256 characters.
    """
    for name, part in (("task_id", task_id), ("action", action)):
        if not part or ":" in part:
            raise ValueError(f"{name} must be non-empty and without ':' (got {part!r})")
    cycle_ts = cycle_timestamp(cycle) if isinstance(cycle, datetime) else cycle
    if not cycle_ts:
        raise ValueError("the cycle timestamp must be non-empty")
    key = f"{task_id}:{action}:{cycle_ts}"
    if len(key) > MAX_KEY_LENGTH:
        raise ValueError(f"the key is {len(key)} characters, Moat takes at most {MAX_KEY_LENGTH}")
    return key


def split_key(key: str) -> tuple[str, str, str]:
    """The parts of a key ``send_key`` made.

    Args:
        key: ``<task_id>:<action>:<cycle_ts>``.

    Returns:
        ``(task_id, action, cycle_ts)``.

    Raises:
        ValueError: ``key`` has fewer than three parts.
    """
    task_id, action, cycle_ts = key.split(":", 2)
    return task_id, action, cycle_ts
