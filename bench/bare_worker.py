"""The baselines' worker as a process of its own, like Moat's: ``python -m bench.bare_worker
TARGET NAMESPACE TASK_QUEUE``; polls until SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys
from datetime import timedelta

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from bench.bare_workflow import ACTIVITIES, BareFloor, BareSteps
from starter.runtime import loop


async def main(target: str, namespace: str, task_queue: str) -> None:
    client = await Client.connect(
        target, namespace=namespace, data_converter=pydantic_data_converter
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[BareSteps, BareFloor],
        activities=ACTIVITIES,
        max_concurrent_activities=200,
        graceful_shutdown_timeout=timedelta(seconds=5),
    ):
        await stop.wait()


if __name__ == "__main__":
    # The same event loop as Moat's worker: the baselines differ from Moat in the work only.
    loop.run(main(*sys.argv[1:4]))
