"""The send log: each agent's local, metadata-only record of what it sent through Moat.

One SQLite file (``MOAT_STATE_DIR``/sendlog.sqlite3 unless given), one row per attempt:
``id``, ``sender``, ``target`` (capability id), ``timestamp`` (UTC), ``idempotent_key``
(``<task_id>:<action>:<cycle_ts>``), ``payload_chars``, ``outcome`` (``delivered`` |
``timeout`` | ``error``), ``attempt``, ``max_attempts``, ``cycle_id``,
``dead_letter_task_id``, and the ``receipt_id`` Moat gave (so a skipped send answers with
it without asking the gateway). Never the payload, never a secret.

The rules, each decided in one SQLite transaction (WAL, ``BEGIN IMMEDIATE``) so several
processes of one agent can share the file:

- a key already attempted this cycle with an outcome other than ``timeout`` is skipped,
  answering the logged outcome; a new cycle timestamp is a new key, so it is sent;
- at most ``max_attempts`` attempts per key and cycle; the attempt that makes it that many
  timeouts files a dead letter (a row with ``dead_letter_task_id``, and the agent's
  callback) and the key is not sent again this cycle;
- an attempt is logged as a ``timeout`` before it is sent and corrected when the answer
  comes, so an attempt whose process died counts as what it is: an attempt without answer;
- the current cycle and the two before it are kept; older rows are purged on open and when
  a new cycle begins, except dead letters.

The log is the agent's own: its file (and SQLite's ``-wal`` and ``-shm`` beside it) is
readable by its owner only (0600), and every folder the log creates is 0700. A folder that
already exists is left as it is when the user chose it (``path=``, ``MOAT_STATE_DIR``:
it may be shared on purpose, and changing a folder one did not make is not the library's
call); Moat's own state folder is tightened to 0700.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from moat_client._config import default_sendlog_path, state_dir_is_moats
from moat_client.errors import ExecutionPending, GatewayUnavailable, MoatError
from moat_client.keys import cycle_timestamp, send_key

if TYPE_CHECKING:
    from moat_client._results import ExecutionResult

Outcome = Literal["delivered", "timeout", "error"]
KEPT_CYCLES = 3
DEFAULT_MAX_ATTEMPTS = 3

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sends (
    id TEXT PRIMARY KEY,
    sender TEXT NOT NULL,
    target TEXT NOT NULL,
    timestamp TEXT NOT NULL,
    idempotent_key TEXT NOT NULL,
    payload_chars INTEGER NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('delivered', 'timeout', 'error')),
    attempt INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    cycle_id TEXT,
    dead_letter_task_id TEXT,
    receipt_id TEXT,
    UNIQUE (idempotent_key, cycle_id, attempt)
);
CREATE INDEX IF NOT EXISTS sends_by_cycle ON sends (cycle_id, timestamp);
"""
COLUMNS = (
    "id",
    "sender",
    "target",
    "timestamp",
    "idempotent_key",
    "payload_chars",
    "outcome",
    "attempt",
    "max_attempts",
    "cycle_id",
    "dead_letter_task_id",
    "receipt_id",
)
_INSERT = f"INSERT INTO sends ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"


@dataclass(frozen=True)
class SendRecord:
    """One attempt, as the log keeps it."""

    id: str
    sender: str
    target: str
    timestamp: str
    idempotent_key: str
    payload_chars: int
    outcome: Outcome
    attempt: int
    max_attempts: int
    cycle_id: str | None
    dead_letter_task_id: str | None
    receipt_id: str | None


@dataclass(frozen=True)
class DeadLetter:
    """What the agent's callback gets after the last attempt timed out: enough to file a
    task for a person (never the payload). The callback may return the id of the task it
    filed; the log keeps it as ``dead_letter_task_id`` (else its own ``dl_`` id)."""

    dead_letter_task_id: str
    idempotent_key: str
    sender: str
    target: str
    cycle_id: str
    attempts: int
    receipt_id: str | None


@dataclass(frozen=True)
class SendOutcome:
    """What ``send`` did: ``skipped`` (the log answered, nothing was sent) or the last
    attempt's ``outcome``, with Moat's ``receipt_id`` when it gave one. ``result`` or
    ``error`` is this call's answer (neither when skipped)."""

    idempotent_key: str
    outcome: Outcome
    attempt: int
    skipped: bool
    receipt_id: str | None = None
    dead_letter_task_id: str | None = None
    result: ExecutionResult | None = None
    error: MoatError | None = None

    @property
    def delivered(self) -> bool:
        """Whether the send (or the logged attempt it skipped to) was delivered."""
        return self.outcome == "delivered"


@dataclass(frozen=True)
class SendPlan:
    key: str
    target: str
    cycle_id: str
    payload_chars: int


@dataclass(frozen=True)
class Decision:
    """Send attempt ``attempt`` (its row is ``row_id``), or answer ``final`` without sending."""

    attempt: int
    row_id: str
    final: SendOutcome | None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _row_id(key: str, cycle_id: str, attempt: int) -> str:
    digest = hashlib.sha256(f"{key}\n{cycle_id}".encode()).hexdigest()[:24]
    return f"{digest}-{attempt}"


FOLDER_MODE = 0o700
FILE_MODE = 0o600


def _private_folder(folder: Path, *, moats: bool) -> None:
    """Create ``folder`` and its missing parents 0700; an existing one is tightened only
    when it is Moat's own (``moats``)."""
    missing = []
    level = folder
    while not level.exists():
        missing.append(level)
        level = level.parent
    for level in reversed(missing):
        level.mkdir(mode=FOLDER_MODE, exist_ok=True)
        os.chmod(level, FOLDER_MODE)  # mkdir's mode is cut by the umask, never widened
    if moats and not missing:
        os.chmod(folder, FOLDER_MODE)


def _private_file(path: Path) -> None:
    """The log file, and SQLite's files beside it, readable by their owner only. SQLite
    gives the files it creates the database file's mode, so the file is made first."""
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, FILE_MODE))
    for name in (path.name, f"{path.name}-wal", f"{path.name}-shm"):
        if (path.parent / name).exists():
            os.chmod(path.parent / name, FILE_MODE)


class SendLog:
    """``SendLog(path=None, sender="agent-7", on_dead_letter=...)``: opens (creates) the
    file, applies retention, and is given to a client as ``send_log=``."""

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        sender: str = "agent",
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        on_dead_letter: Callable[[DeadLetter], str | None] | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.path = Path(path) if path is not None else default_sendlog_path()
        _private_folder(self.path.parent, moats=path is None and state_dir_is_moats())
        _private_file(self.path)
        self.sender = sender
        self.max_attempts = max_attempts
        self.on_dead_letter = on_dead_letter
        self._lock = threading.Lock()
        # Autocommit: every decision opens its own BEGIN IMMEDIATE; the timeout is how
        # long a process waits for another's transaction.
        self._db = sqlite3.connect(
            self.path, isolation_level=None, timeout=30.0, check_same_thread=False
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        with self._transaction() as db:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            self._purge(db, KEPT_CYCLES)

    def close(self) -> None:
        """Close the log's SQLite connection."""
        with self._lock:
            self._db.close()

    def __enter__(self) -> SendLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def plan(
        self, target: str, task_id: str, action: str, cycle: str | datetime, chars: int
    ) -> SendPlan:
        """What one ``send`` is about to do: its key, target, cycle and size.

        Args:
            target: The capability id.
            task_id: The agent's task (non-empty, no ``:``).
            action: The action within the task (non-empty, no ``:``).
            cycle: The cycle's timestamp, as text or a timezone-aware ``datetime``.
            chars: The input's size in characters (its compact JSON).

        Returns:
            The plan that ``decide`` and ``record`` take.

        Raises:
            ValueError: The task, action or cycle cannot make a key (empty, holding ``:``, naive
                ``datetime``, over 256 characters).
        """
        cycle_id = cycle_timestamp(cycle) if isinstance(cycle, datetime) else cycle
        return SendPlan(send_key(task_id, action, cycle_id), target, cycle_id, chars)

    def decide(self, plan: SendPlan) -> Decision:
        """Skip, give up, or claim the next attempt, in one transaction.

        A claimed attempt is logged as a ``timeout`` until ``record`` corrects it, so an attempt
        whose process dies stays on record. A new cycle purges rows older than the kept cycles.

        Args:
            plan: What ``plan`` made for this send.

        Returns:
            The decision: ``final`` is the outcome to answer without sending (a key already
            answered this cycle, a dead letter, attempts used up), else None and the ``attempt``
            to make.

        Raises:
            sqlite3.OperationalError: Another process held the log longer than the 30 s timeout.
        """
        with self._transaction() as db:
            if (
                db.execute(
                    "SELECT 1 FROM sends WHERE cycle_id = ? LIMIT 1", (plan.cycle_id,)
                ).fetchone()
                is None
            ):
                # A new cycle: it is the current one, so two before it are kept.
                self._purge(db, KEPT_CYCLES - 1)
            rows = [
                self._record(row)
                for row in db.execute(
                    f"SELECT {', '.join(COLUMNS)} FROM sends"
                    " WHERE idempotent_key = ? AND cycle_id = ? ORDER BY attempt",
                    (plan.key, plan.cycle_id),
                )
            ]
            answered = [r for r in rows if r.outcome != "timeout"]
            dead = [r for r in rows if r.dead_letter_task_id is not None]
            last = answered[-1] if answered else dead[-1] if dead else None
            if last is None and len(rows) >= self.max_attempts:
                last = rows[-1]
            if last is not None:
                final = SendOutcome(
                    plan.key,
                    last.outcome,
                    last.attempt,
                    skipped=True,
                    receipt_id=last.receipt_id,
                    dead_letter_task_id=last.dead_letter_task_id,
                )
                return Decision(last.attempt, last.id, final)
            attempt = len(rows) + 1
            row_id = _row_id(plan.key, plan.cycle_id, attempt)
            db.execute(
                _INSERT,
                (
                    row_id,
                    self.sender,
                    plan.target,
                    _now(),
                    plan.key,
                    plan.payload_chars,
                    "timeout",
                    attempt,
                    self.max_attempts,
                    plan.cycle_id,
                    None,
                    None,
                ),
            )
            return Decision(attempt, row_id, None)

    def record(
        self, plan: SendPlan, decision: Decision, answer: ExecutionResult | MoatError
    ) -> SendOutcome | None:
        """Log an attempt's answer, and file a dead letter after the last timeout.

        A dead letter is filed in the log first, then handed to ``on_dead_letter`` (outside the
        transaction); the task id the callback returns replaces the log's own ``dl_`` id.

        Args:
            plan: What ``plan`` made for this send.
            decision: The claimed attempt, from ``decide``.
            answer: The execution's result, or the ``MoatError`` it raised (a
                ``GatewayUnavailable`` or ``ExecutionPending`` counts as a timeout).

        Returns:
            The outcome to answer, or None to try again (a timeout before the last attempt).

        Raises:
            sqlite3.OperationalError: Another process held the log longer than the 30 s timeout.
        """
        outcome = _outcome_of(answer)
        receipt_id = answer.receipt_id
        dead_letter: DeadLetter | None = None
        with self._transaction() as db:
            db.execute(
                "UPDATE sends SET outcome = ?, receipt_id = ? WHERE id = ?",
                (outcome, receipt_id, decision.row_id),
            )
            if outcome == "timeout" and decision.attempt < self.max_attempts:
                return None
            if outcome == "timeout":
                dead_letter = DeadLetter(
                    f"dl_{uuid.uuid4().hex}",
                    plan.key,
                    self.sender,
                    plan.target,
                    plan.cycle_id,
                    decision.attempt,
                    receipt_id,
                )
                db.execute(
                    "UPDATE sends SET dead_letter_task_id = ? WHERE id = ?",
                    (dead_letter.dead_letter_task_id, decision.row_id),
                )
        task_id = dead_letter.dead_letter_task_id if dead_letter else None
        if dead_letter is not None and self.on_dead_letter is not None:
            # Outside the transaction: the callback may take its time (file a ticket), and
            # the dead letter is already on record if it fails.
            filed = self.on_dead_letter(dead_letter)
            if filed:
                with self._transaction() as db:
                    db.execute(
                        "UPDATE sends SET dead_letter_task_id = ? WHERE id = ?",
                        (filed, decision.row_id),
                    )
                task_id = filed
        return SendOutcome(
            plan.key,
            outcome,
            decision.attempt,
            skipped=False,
            receipt_id=receipt_id,
            dead_letter_task_id=task_id,
            result=None if isinstance(answer, MoatError) else answer,
            error=answer if isinstance(answer, MoatError) else None,
        )

    def rows(self, *, key: str | None = None, limit: int | None = None) -> list[SendRecord]:
        """The logged attempts, newest first.

        Args:
            key: Only this idempotency key's attempts; None for every key.
            limit: At most this many rows; None for all.

        Returns:
            The attempts, as the log keeps them (metadata only).
        """
        query = f"SELECT {', '.join(COLUMNS)} FROM sends"
        args: list[str | int] = []
        if key is not None:
            query += " WHERE idempotent_key = ?"
            args.append(key)
        query += " ORDER BY timestamp DESC, attempt DESC"
        if limit is not None:
            query += " LIMIT ?"
            args.append(limit)
        with self._lock:
            return [self._record(row) for row in self._db.execute(query, args)]

    def dead_letters(self) -> list[SendRecord]:
        """The attempts that filed a dead letter, newest first.

        Returns:
            Each dead letter's row, with its ``dead_letter_task_id``.
        """
        with self._lock:
            return [
                self._record(row)
                for row in self._db.execute(
                    f"SELECT {', '.join(COLUMNS)} FROM sends"
                    " WHERE dead_letter_task_id IS NOT NULL ORDER BY timestamp DESC"
                )
            ]

    def purge(self) -> int:
        """Apply retention now: keep the current cycle, the two before it and dead letters.

        Returns:
            The number of rows removed.
        """
        with self._transaction() as db:
            return self._purge(db, KEPT_CYCLES)

    @staticmethod
    def _purge(db: sqlite3.Connection, keep: int) -> int:
        kept = [
            row[0]
            for row in db.execute(
                "SELECT cycle_id FROM sends GROUP BY cycle_id ORDER BY MIN(timestamp) DESC LIMIT ?",
                (keep,),
            )
        ]
        marks = ", ".join("?" * len(kept))
        removed = db.execute(
            "DELETE FROM sends WHERE dead_letter_task_id IS NULL"
            + (f" AND (cycle_id IS NULL OR cycle_id NOT IN ({marks}))" if kept else ""),
            kept,
        )
        return removed.rowcount

    @staticmethod
    def _record(row: tuple[object, ...]) -> SendRecord:
        return SendRecord(*row)  # type: ignore[arg-type]


def _outcome_of(answer: ExecutionResult | MoatError) -> Outcome:
    # A pending run (or one waiting for approval) did not answer in time, like a timeout:
    # the next attempt sends the same key and finds it.
    if isinstance(answer, GatewayUnavailable | ExecutionPending):
        return "timeout"
    if isinstance(answer, MoatError):
        return "error"
    return "delivered" if answer.ok or answer.status == "planned" else "error"
