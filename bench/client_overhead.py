"""What the agents' client adds: the send log's bookkeeping per send, and the client's own
cost per call, apart from the network and the gateway.

* ``sendlog``: one ``decide`` + ``record`` (two SQLite transactions, WAL, synchronous=NORMAL)
  per send on a fresh file, sequential in one process, then the same from two processes on
  one file at once (each its own keys, so every send is a full decision);
* ``client``: ``MoatClient.execute`` (retry flow, envelope parsed into the typed result)
  against an in-memory transport answering a canned envelope, beside a bare ``httpx.Client``
  POST on the same transport, so the difference is the client's own work.

Run: ``python -m bench.client_overhead [--n 2000]``. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from moat_client import Envelope, ExecutionResult, MoatClient, SendLog
from moat_client.sendlog import SendPlan

ENVELOPE = {
    "receipt_id": "0194d6c2-0000-7000-8000-000000000000",
    "trace_id": "0" * 32,
    "status": "executed",
    "idempotency_key": "k",
    "output": {"hello": "world"},
}


def _sends(path: str, n: int, sender: str) -> list[float]:
    log = SendLog(path, sender=sender)
    delivered = ExecutionResult(200, Envelope.model_validate(ENVELOPE), False)
    samples = []
    for i in range(n):
        plan = SendPlan(f"{sender}-task{i}:report:C1", "demo.echo", "C1", 42)
        started = time.perf_counter()
        decision = log.decide(plan)
        if decision.final is None:
            log.record(plan, decision, delivered)
        samples.append(time.perf_counter() - started)
    log.close()
    return samples


def _both(args: tuple[str, int, str]) -> list[float]:
    return _sends(*args)


def _answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json=ENVELOPE)


def _client_calls(n: int) -> tuple[list[float], list[float]]:
    transport = httpx.MockTransport(_answer)
    bare, moat = [], []
    with (
        httpx.Client(transport=transport) as http,
        MoatClient("http://gateway.test", "moat_x_y", http_client=http) as client,
    ):
        for i in range(n):
            started = time.perf_counter()
            http.post("http://gateway.test/v1/executions", json={"input": {"i": i}}).json()
            bare.append(time.perf_counter() - started)
            started = time.perf_counter()
            client.execute("demo.echo", {"i": i}, idempotency_key=f"k{i}")
            moat.append(time.perf_counter() - started)
    return bare, moat


def _row(name: str, samples: list[float]) -> dict[str, float | str | int]:
    ordered = sorted(samples)
    return {
        "series": name,
        "n": len(samples),
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p95_ms": round(ordered[int(len(ordered) * 0.95) - 1] * 1000, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        one = str(Path(folder) / "one.sqlite3")
        rows.append(_row("sendlog decide+record, 1 process", _sends(one, args.n, "a")))
        shared = str(Path(folder) / "shared.sqlite3")
        SendLog(shared).close()
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            results = pool.map(_both, [(shared, args.n, "p1"), (shared, args.n, "p2")])
        rows.append(_row("sendlog decide+record, 2 processes", results[0] + results[1]))
    bare, moat = _client_calls(args.n)
    rows.append(_row("bare httpx POST (in-memory transport)", bare))
    rows.append(_row("MoatClient.execute (in-memory transport)", moat))
    width = max(len(str(r["series"])) for r in rows)
    print(f"{'series':<{width}}  {'n':>6}  {'median ms':>10}  {'p95 ms':>8}")
    for r in rows:
        print(f"{r['series']:<{width}}  {r['n']:>6}  {r['median_ms']:>10}  {r['p95_ms']:>8}")
    print(json.dumps({"rows": rows, "load_average": os.getloadavg(), "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
