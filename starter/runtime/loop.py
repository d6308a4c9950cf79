"""The event loop of Moat's long-running processes (gateway, worker).

uvloop where it is installed (every platform but Windows): libuv's loop costs the gateway
about a third less CPU per request than asyncio's, which a duplicate storm of 1,000
connections feels most (``bench.speed``). Elsewhere, asyncio's own loop.
"""

from __future__ import annotations

import asyncio
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
