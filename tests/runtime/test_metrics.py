"""Temporal SDK metrics are served for Prometheus when ``MOAT_METRICS_ADDRESS`` is set."""

from __future__ import annotations

import asyncio
import uuid

import httpx

import worker as worker_module
from starter.devstack import free_port
from starter.runtime.temporal import connect
from tests.support.stack import Stack


async def test_worker_metrics_endpoint(stack: Stack) -> None:
    address = f"127.0.0.1:{free_port()}"
    settings = stack.settings.model_copy(
        update={
            "metrics_address": address,
            "temporal_address": stack.client.service_client.config.target_host,
            "task_queue": f"tq-metrics-{uuid.uuid4().hex}",
        }
    )
    client = await connect(settings)
    async with (
        worker_module.activity_deps(settings) as (sessions, http_out),
        worker_module.build_worker(client, settings, sessions, http_out),
        httpx.AsyncClient() as http,
    ):
        # The worker's pollers report themselves once they have started polling.
        for _ in range(100):
            response = await http.get(f"http://{address}/metrics")
            if worker_metric(response.text):
                break
            await asyncio.sleep(0.1)
    assert response.status_code == 200
    # The worker's pollers report themselves; Prometheus can scrape the SDK's metrics.
    assert "temporal_num_pollers" in response.text or "temporal_worker_task_slots" in response.text


def worker_metric(text: str) -> bool:
    return "temporal_num_pollers" in text or "temporal_worker_task_slots" in text
