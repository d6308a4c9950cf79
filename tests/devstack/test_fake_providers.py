"""``moat up --fake-providers`` runs the fakes as ``python -m starter.devstack.providers``:
they listen on the ports given, answer like the providers, and stop on SIGTERM."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx

from starter.devstack.processes import free_port


def test_the_fakes_process_serves_and_stops() -> None:
    ports = {name: free_port() for name in ("slack", "github", "webhook")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "starter.devstack.providers"]
        + [f"--{name}={port}" for name, port in ports.items()],
    )
    try:
        slack = f"http://127.0.0.1:{ports['slack']}"
        for _ in range(300):
            try:
                if httpx.get(f"{slack}/_fake/state", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        posted = httpx.post(
            f"{slack}/api/chat.postMessage",
            json={"channel": "C1", "text": "hi"},
            headers={"Authorization": "Bearer xoxb-demo"},
        ).json()
        assert posted["ok"] is True and posted["channel"] == "C1"
        issues = httpx.get(
            f"http://127.0.0.1:{ports['github']}/repos/o/r/issues",
            headers={"Authorization": "Bearer ghp_demo"},
        )
        assert issues.status_code == 200 and issues.json() == []
        hook = httpx.post(f"http://127.0.0.1:{ports['webhook']}/in", content=b"{}")
        assert hook.status_code == 400  # no webhook-id: not a Standard Webhooks delivery
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
