"""A dependency that is briefly away is ``503 unavailable`` with ``Retry-After``, never a
500: PostgreSQL restarting or out of reach, Temporal's frontend unavailable. A 500 means a
bug. Retrying with the same idempotency key is safe: nothing is started twice.
"""

from __future__ import annotations

from temporalio.service import RPCError, RPCStatusCode

from starter.runtime.database import connection_trouble

# What a caller is told to wait before retrying: about a PostgreSQL crash-restart or a
# Temporal frontend's restart on one machine.
RETRY_AFTER_SECONDS = 2

# Temporal's answers that say it cannot serve now, not that the call is wrong.
_TEMPORAL_AWAY = frozenset(
    {RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.RESOURCE_EXHAUSTED}
)


# The SDK's own word for a connection to the frontend lost mid-call (a server killed while a
# result was being long-polled): status UNKNOWN, but about the transport, not the call.
_TRANSPORT_LOST = "transport error"


def temporal_away(exc: BaseException) -> bool:
    if not isinstance(exc, RPCError):
        return False
    if exc.status in _TEMPORAL_AWAY:
        return True
    return exc.status == RPCStatusCode.UNKNOWN and exc.message.startswith(_TRANSPORT_LOST)


def away(exc: BaseException) -> str | None:
    """The dependency ``exc`` says is briefly away (``postgres``, ``temporal``), or None
    when it is a fault."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if temporal_away(cause):
            return "temporal"
        cause = cause.__cause__ or cause.__context__
    return "postgres" if connection_trouble(exc) else None
