"""What the transparency log costs per execution, and what proving costs at a million leaves.

    .venv/bin/python -m bench.translog [--records 200] [--leaves 1000000] [--proofs 200]

Starts its own embedded PostgreSQL in a temporary folder (loopback, migrated, fsync and
synchronous commit on, as deployed) and measures, as the application role:

- the record step's transaction (``RecordStep``: receipt, outcome event, budget, sealed
  answer, events) with and without the leaf's append, ``--records`` of each, interleaved
  in a shuffled order, same process and database: the latency the append adds; and the
  append statement alone (digest of the receipt's RFC 8785 form included);
- ``--leaves`` leaves bulk-loaded for a scratch tenant (one ``INSERT … SELECT`` of
  ``generate_series``, each leaf's data the SHA-256 of its number, as the owner), then
  sequenced by the real sequencer (``store.translog.sequence``, 10,000 per transaction,
  as the checkpoint job runs it): its throughput; the root checked against one computed
  in Python from the same data;
- bytes per execution (2 leaves and the nodes they complete): the tables' and indexes'
  sizes (``pg_total_relation_size``) per leaf, after ``VACUUM`` and after ``VACUUM FULL``;
- at that size, inclusion proofs of ``--proofs`` random leaves and consistency proofs from
  random sizes (``starter.service.translog``: head, leaf lookup, nodes; one transaction
  each, no HTTP): their size and read time.

Prints a table and writes ``bench/results/translog.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from activities.execute import record as record_module
from activities.execute.record import RecordStep
from schemas import translog as formats
from schemas.capabilities import CapabilitySpec, EffectType
from schemas.ids import uuid7
from schemas.records import ExecutionStatus
from schemas.run import RecordInput
from schemas.settings import MoatSettings
from starter.devstack import EmbeddedPostgres, free_port
from starter.service import translog as log_service
from store import make_engine, make_sessionmaker, receipts, tenancy, tenants, translog, upgrade
from store.db import DriverStatement
from store.keyrings.codec import OutputSealer

RESULTS = Path(__file__).with_name("results") / "translog.json"
CAP = CapabilitySpec(
    id="demo.echo", version="1.0.0", adapter="echo", adapter_id="echo-v1",
    effect_type=EffectType.API_CALL,
)  # fmt: skip
FILL = (
    "INSERT INTO log_leaves (tenant_id, kind, ref_id, digest) "
    "SELECT :t, 'receipt', 'r' || g, sha256(convert_to(g::text, 'UTF8')) "
    "FROM generate_series(1, :n) g"
)
BATCH = 10_000


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "p50_ms": _ms(statistics.median(ordered)),
        "p90_ms": _ms(ordered[int(0.9 * (len(ordered) - 1))]),
        "max_ms": _ms(ordered[-1]),
    }


def _record_input(tenant_id: str, i: int) -> RecordInput:
    receipt_id = str(uuid7())
    return RecordInput(
        receipt_id=receipt_id,
        tenant_id=tenant_id,
        idempotency_key=f"bench-{i}-{uuid.uuid4().hex[:8]}",
        input_hash="sha256:" + hashlib.sha256(str(i).encode()).hexdigest(),
        capability=CAP,
        request_id=str(uuid7()),
        trace_id=uuid.uuid4().hex,
        submitted_at=datetime.now(UTC),
        workflow_id=f"exec/{tenant_id}/{receipt_id}",
        run_id=str(uuid.uuid4()),
        policy_decision_id=str(uuid7()),
        success=True,
        status=ExecutionStatus.SUCCESS,
        output_hash="sha256:" + "0" * 64,
        output={"echo": {"i": i}},
        adapter_called=True,
        budget_held=False,
    )


async def record_step(
    app: async_sessionmaker[AsyncSession], settings: MoatSettings, tenant_id: str, n: int
) -> dict[str, Any]:
    """The record transaction with and without the append, interleaved."""
    step = RecordStep(app, OutputSealer.from_settings(settings))
    # The receipt's statement writes its leaf: the same statement without it.
    statements = {
        "with append": receipts._INSERT_WITH_OUTPUT,
        "without append": DriverStatement(receipts._insert_with_outcome(leaf=False, output=True)),
    }
    series: dict[str, list[float]] = {"with append": [], "without append": []}
    for i in range(10):  # warm-up: connections, statement caches
        await step._record(_record_input(tenant_id, -i - 1), datetime.now(UTC))
    for i in range(n):
        order = list(series)
        random.shuffle(order)
        for name in order:
            receipts._INSERT_WITH_OUTPUT = statements[name]
            started = time.perf_counter()
            await step._record(_record_input(tenant_id, i), datetime.now(UTC))
            series[name].append(time.perf_counter() - started)
    receipts._INSERT_WITH_OUTPUT = statements["with append"]
    out: dict[str, Any] = {name: _summary(samples) for name, samples in series.items()}
    out["added_p50_ms"] = round(out["with append"]["p50_ms"] - out["without append"]["p50_ms"], 2)
    # Each round ran both, one after the other: the median of the rounds' differences
    # cancels most of what the machine's other work adds to both.
    pairs = zip(series["with append"], series["without append"], strict=True)
    out["added_paired_median_ms"] = _ms(statistics.median(w - wo for w, wo in pairs))
    out["append statement"] = _summary(await append_alone(app, tenant_id, n))
    return out


async def append_alone(
    app: async_sessionmaker[AsyncSession], tenant_id: str, n: int
) -> list[float]:
    """The append statement alone (the receipt's RFC 8785 form and digest included), each in
    a transaction of its own after the tenant is set, as in the record step."""
    samples = []
    for i in range(n):
        inp = _record_input(tenant_id, i)
        receipt = record_module._receipt(inp, datetime.now(UTC))
        async with tenancy.tenant_transaction(app, tenant_id) as session:
            started = time.perf_counter()
            await translog.append_receipt(session, receipt)
            samples.append(time.perf_counter() - started)
    return samples


async def _timed(call: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


async def sequence_all(app: async_sessionmaker[AsyncSession], tenant_id: str) -> int:
    total = 0
    while True:
        async with tenancy.tenant_transaction(app, tenant_id) as session:
            before = (await translog.head(session, tenant_id)).size
            after = (await translog.sequence(session, tenant_id, BATCH)).size
        total += after - before
        if after - before < BATCH:
            return total


async def sizes(owner: async_sessionmaker[AsyncSession]) -> dict[str, int]:
    async with owner() as session:
        row = (
            await session.execute(
                text(
                    "SELECT pg_total_relation_size('log_leaves') AS leaves, "
                    "pg_total_relation_size('log_nodes') AS nodes, "
                    "(SELECT count(*) FROM log_leaves) AS leaf_rows, "
                    "(SELECT count(*) FROM log_nodes) AS node_rows"
                )
            )
        ).one()
    return dict(row._mapping)


def _vacuum(url: str, full: bool) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for table in ("log_leaves", "log_nodes"):
            conn.execute(f"VACUUM {'FULL ' if full else ''}ANALYZE {table}")


def _per_execution(measured: dict[str, int]) -> dict[str, float]:
    per_leaf = (measured["leaves"] + measured["nodes"]) / measured["leaf_rows"]
    return {
        **measured,
        "bytes_per_leaf": round(per_leaf, 1),
        "bytes_per_execution": round(2 * per_leaf, 1),
        "nodes_per_leaf": round(measured["node_rows"] / measured["leaf_rows"], 3),
    }


async def proofs(
    app: async_sessionmaker[AsyncSession], tenant_id: str, size: int, n: int
) -> dict[str, Any]:
    rng = random.Random(7)
    inclusion: list[float] = []
    lengths: list[int] = []
    answer_bytes: list[int] = []
    for _ in range(n):
        g = rng.randint(1, size)
        leaf = hashlib.sha256(str(g).encode()).hexdigest()
        async with tenancy.tenant_transaction(app, tenant_id) as session:
            started = time.perf_counter()
            proved = await log_service.inclusion(session, tenant_id, leaf, size)
            inclusion.append(time.perf_counter() - started)
        lengths.append(len(proved.proof))
        answer_bytes.append(len(proved.model_dump_json()))
    consistency: list[float] = []
    c_lengths: list[int] = []
    for _ in range(n):
        old = rng.randint(1, size - 1)
        async with tenancy.tenant_transaction(app, tenant_id) as session:
            started = time.perf_counter()
            c = await log_service.consistency(session, tenant_id, old, size)
            consistency.append(time.perf_counter() - started)
        c_lengths.append(len(c.proof))
    return {
        "inclusion": {
            **_summary(inclusion),
            "hashes_max": max(lengths),
            "proof_bytes_max": 32 * max(lengths),
            "json_answer_bytes_max": max(answer_bytes),
        },
        "consistency": {
            **_summary(consistency),
            "hashes_max": max(c_lengths),
            "proof_bytes_max": 32 * max(c_lengths),
        },
    }


async def measure(args: argparse.Namespace, url: str, home: Path) -> dict[str, Any]:
    settings = MoatSettings(database_url=url, home=home)
    owner_engine = make_engine(settings.sqlalchemy_url)
    app_engine = make_engine(settings.app_sqlalchemy_url)
    owner, app = make_sessionmaker(owner_engine), make_sessionmaker(app_engine)
    async with owner.begin() as session:
        await receipts.ensure_outcome_partitions(session, datetime.now(UTC))
        recording = (await tenants.create_tenant(session, "bench-record")).id
        scratch = (await tenants.create_tenant(session, "bench-log")).id
    result: dict[str, Any] = {"records": await record_step(app, settings, recording, args.records)}
    started = time.perf_counter()
    async with owner.begin() as session:
        await session.execute(text(FILL), {"t": scratch, "n": args.leaves})
    result["bulk_load_s"] = round(time.perf_counter() - started, 1)
    _vacuum(settings.sqlalchemy_url.replace("+psycopg", ""), full=False)
    started = time.perf_counter()
    sequenced = await sequence_all(app, scratch)
    elapsed = time.perf_counter() - started
    result["sequencer"] = {
        "leaves": sequenced,
        "seconds": round(elapsed, 1),
        "leaves_per_s": round(sequenced / elapsed),
        "batch": BATCH,
    }
    async with tenancy.tenant_transaction(app, scratch) as session:
        head = await translog.head(session, scratch)
    hashes = [
        formats.leaf_hash(hashlib.sha256(str(g).encode()).digest())
        for g in range(1, args.leaves + 1)
    ]
    result["root_matches_python"] = head.root == formats.root_of(hashes)
    plain = settings.sqlalchemy_url.replace("+psycopg", "")
    _vacuum(plain, full=False)
    result["storage_after_vacuum"] = _per_execution(await sizes(owner))
    _vacuum(plain, full=True)
    result["storage_after_vacuum_full"] = _per_execution(await sizes(owner))
    result["proofs"] = await proofs(app, scratch, head.size, args.proofs)
    await owner_engine.dispose()
    await app_engine.dispose()
    return result


def render(result: dict[str, Any]) -> None:
    r = result["records"]
    print(f"record step transaction, n={r['with append']['n']} each, interleaved:")
    for name in ("without append", "with append"):
        s = r[name]
        print(
            f"  {name:<16} p50 {s['p50_ms']:>7} ms  p90 {s['p90_ms']:>7} ms  max {s['max_ms']} ms"
        )
    print(
        f"  added by the append: p50 difference {r['added_p50_ms']} ms, median of the rounds' "
        f"differences {r['added_paired_median_ms']} ms"
    )
    a = r["append statement"]
    print(f"  the append statement alone: p50 {a['p50_ms']} ms  p90 {a['p90_ms']} ms")
    seq = result["sequencer"]
    print(
        f"bulk load {seq['leaves']:,} leaves: {result['bulk_load_s']} s; sequenced in "
        f"{seq['seconds']} s ({seq['leaves_per_s']:,} leaves/s, {seq['batch']:,} per "
        f"transaction); root matches Python: {result['root_matches_python']}"
    )
    for label in ("storage_after_vacuum", "storage_after_vacuum_full"):
        s = result[label]
        print(
            f"{label.replace('_', ' ')}: leaves {s['leaves'] / 2**20:.1f} MiB, nodes "
            f"{s['nodes'] / 2**20:.1f} MiB ({s['nodes_per_leaf']} nodes/leaf): "
            f"{s['bytes_per_leaf']} B/leaf, {s['bytes_per_execution']} B/execution"
        )
    for kind in ("inclusion", "consistency"):
        p = result["proofs"][kind]
        print(
            f"{kind} proof at {seq['leaves']:,}: {p['hashes_max']} hashes ({p['proof_bytes_max']}"
            f" B), read p50 {p['p50_ms']} ms p90 {p['p90_ms']} ms max {p['max_ms']} ms (n={p['n']})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200)
    parser.add_argument("--leaves", type=int, default=1_000_000)
    parser.add_argument("--proofs", type=int, default=200)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="moat-bench-translog-") as folder:
        pg = EmbeddedPostgres(Path(folder) / "data", free_port())
        url = pg.start()
        try:
            upgrade(MoatSettings(database_url=url).sqlalchemy_url)
            result = asyncio.run(measure(args, url, Path(folder) / "home"))
        finally:
            pg.stop()
    result["environment"] = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "loadavg_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "wall_s": round(time.perf_counter() - started, 1),
        "args": vars(args),
    }
    render(result)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
