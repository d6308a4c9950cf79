"""A background heartbeat for an activity that waits on a third party.

Without one, a worker killed mid-call leaves its attempt to the start-to-close timeout
(the capability's whole HTTP timeout and more) before Temporal retries it elsewhere. With a
heartbeat timeout on the schedule and this beating for the whole attempt, a dead worker's
attempt is retried after the heartbeat timeout instead. The retry is an ordinary next
attempt: the same downstream key, ``attempt`` one higher, so it takes the same idempotency
path as any retry (provider key dedupe, or the reconcile look-up first). That also makes
harmless the retry of a live worker's attempt when the worker was starved of CPU for longer
than the timeout.

The beat waits before its first heartbeat, so a call that returns quickly sends none.
Webhook delivery sets a heartbeat timeout; the adapter call does not yet (see
``workflows/execute.py``): this beats only when one is set.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from temporalio import activity

# Beats per heartbeat timeout: enough that one late beat under CPU starvation is not a miss.
BEATS_PER_TIMEOUT = 5


@contextlib.asynccontextmanager
async def heartbeating() -> AsyncIterator[None]:
    """Heartbeat in the background while the block runs, if the schedule set a heartbeat
    timeout (none set: nothing to keep alive)."""
    timeout = activity.info().heartbeat_timeout
    if not timeout:
        yield
        return
    interval = timeout.total_seconds() / BEATS_PER_TIMEOUT

    async def beat() -> None:
        while True:
            await asyncio.sleep(interval)
            activity.heartbeat()

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
