"""The gateway's answers from memory are bounded by bytes, not by count: repeating many
executions whose outputs are about 1 MiB each grows the gateway by about the bound, and a
kept answer is held as the bytes it is sent as, never as the output's Python objects (a
1 MiB output of small JSON objects is some 20 MB of them once parsed)."""

from __future__ import annotations

import gc
import tracemalloc
import uuid
from typing import Any

import httpx
import psutil
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas.names import REPLAYED_HEADER
from starter.devstack import serve_asgi
from starter.gateway.app import create_app
from starter.service.executions.memory import AnswerCache
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import StackFactory

MIB = 1024 * 1024
ANSWERS = 6
BOUND = 2 * MIB


def _output(i: int) -> dict[str, Any]:
    """About 1 MiB of JSON, a provider's answer (the output of ``http.request``); in 1 KiB
    strings, which the worker redacts quickly (a test of seconds)."""
    return {"run": i, "items": [f"{n:04d}" + "x" * 1020 for n in range(1024)]}


async def test_answers_held_in_memory_are_bounded_by_bytes(
    make_stack: StackFactory,
    app_sessions: async_sessionmaker[AsyncSession],
    provider: FakeProvider,
) -> None:
    url = provider.script("/big", Step(200, _output(0)))
    request = {"method": "GET", "url": url}
    async with make_stack(
        http_allow_hosts=[provider.allow_entry],
        http_max_response_bytes=2 * MIB,
        answer_cache_bytes=BOUND,
    ) as stack:
        keys = [f"big-{i}-{uuid.uuid4().hex}" for i in range(ANSWERS)]
        for key in keys:
            done = await stack.execute("http.request", request, key=key)
            assert done.status_code == 200, done.text[:300]
        size = len(done.content)
        assert MIB < size < 1.5 * MIB

        # A gateway of its own, its memory empty: every first repeat is Postgres's and
        # is kept, the attack on the cache.
        app = create_app(stack.settings, client=stack.client, sessions=app_sessions)
        async with serve_asgi(app) as gateway, httpx.AsyncClient(timeout=60) as http:
            answers: AnswerCache = app.state.deps.executions.answers
            body = {"schema_version": "1", "capability_id": "http.request", "input": request}
            headers = {"Authorization": f"Bearer {stack.api_key}"}
            gc.collect()
            process = psutil.Process()
            rss_before = process.memory_info().rss
            tracemalloc.start()
            try:
                for key in keys:
                    again = await http.post(
                        f"{gateway}/v1/executions",
                        json=body,
                        headers={**headers, "Idempotency-Key": key},
                    )
                    assert again.status_code == 200, again.text[:300]
                    assert again.headers[REPLAYED_HEADER] == "true"
                    del again
                gc.collect()
                retained, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            gc.collect()
            rss_growth = process.memory_info().rss - rss_before
            held = len(answers)
            print(
                f"\n{ANSWERS} first repeats of {size / MIB:.2f} MiB answers, bound "
                f"{BOUND / MIB:.0f} MiB: {held} kept ({answers.bytes / MIB:.2f} MiB counted); "
                f"retained {retained / MIB:.1f} MiB (tracemalloc; peak {peak / MIB:.0f} MiB), "
                f"RSS +{rss_growth / MIB:.1f} MiB"
            )
            # Bounded, and each kept answer is its bytes, not its parsed objects.
            assert 0 < held < ANSWERS
            assert answers.bytes <= BOUND
            # Counted by entries, all 6 were kept: 6 MiB and more.
            assert retained < BOUND + 2 * MIB, f"retained {retained / MIB:.1f} MiB"
            assert rss_growth < 64 * MIB, f"RSS grew {rss_growth / MIB:.1f} MiB"
            # The ones still kept answer from memory: the first answer, said to be a replay.
            last = await http.post(
                f"{gateway}/v1/executions",
                json=body,
                headers={**headers, "Idempotency-Key": keys[-1]},
            )
            assert last.status_code == 200 and last.json() == {**done.json(), "replayed": True}
