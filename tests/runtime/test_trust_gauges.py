"""Trust scores as Prometheus gauges on the Temporal runtime's metrics endpoint."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

from schemas.trust import TrustCounts, TrustWindow, report
from starter.devstack import free_port
from starter.runtime.observability import TrustGauges, temporal_runtime


def test_scores_are_served_as_gauges() -> None:
    address = f"127.0.0.1:{free_port()}"
    runtime = temporal_runtime(address)
    assert runtime is not None
    counts = TrustCounts(
        capability_id="demo.echo",
        capability_version="1.0.0",
        is_synthetic=False,
        samples=40,
        successes=30,
        rate_limited=4,
        excluded=2,
        latency_histogram={10: 40},
    )
    now = datetime.now(UTC)
    TrustGauges(runtime.metric_meter).publish(
        report(TrustWindow.H1, TrustWindow.H1.bounds(now), [counts], [], 20)
    )
    text = httpx.get(f"http://{address}/metrics").text
    labels = ('capability="demo.echo"', 'traffic="real"', 'version="1.0.0"', 'window="1h"')
    rate = [
        line
        for line in text.splitlines()
        if line.startswith("moat_trust_success_rate{") and all(lab in line for lab in labels)
    ]
    assert len(rate) == 1 and rate[0].endswith(" 0.8")
    assert "moat_trust_samples{" in text
    # No synthetic traffic: its rate is NaN, never a made-up number.
    synthetic = [
        line
        for line in text.splitlines()
        if line.startswith("moat_trust_success_rate{") and 'traffic="synthetic"' in line
    ]
    assert synthetic and synthetic[0].endswith(" NaN")
