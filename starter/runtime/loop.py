"""The event loop of Moat's long-running processes (gateway, worker).

uvloop where it is installed (every platform but Windows): libuv's loop costs the gateway
about a third less CPU per request than asyncio's, which a duplicate storm of 1,000
connections feels most (``bench.speed``). Elsewhere, asyncio's own loop.

``settle_heap``, once a process is built and before it serves: the objects made at startup
(modules, the app, schemas, compiled queries) live as long as the process, and without it
Python's full garbage collections would scan all of them every time, stopping the loop.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop constructor, or None (asyncio's default) when it is not installed."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - Windows, or a build without it
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the fastest loop this platform has."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)


def settle_heap() -> None:
    """Collect what startup left behind, then take every object still alive out of the
    garbage collector's future scans (``gc.freeze``): they live as long as the process. A
    full collection then scans only what the process made since (some 20,000 objects, not
    210,000), so it does not hold the event loop for the 100 ms and more a collection of the
    whole heap takes, in which the loop answers nothing."""
    gc.collect()
    gc.freeze()
