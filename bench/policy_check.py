"""The policy check of a fresh execution, decided ahead of its reads against read first.

    .venv/bin/python -m bench.policy_check [--n 300]

Starts its own embedded PostgreSQL in a temporary folder (loopback, migrated, fsync and
synchronous commit on, as deployed) and runs ``PolicyStep.check_policy`` as the
application role, as the worker does, for fresh executions of one tenant's ``demo.echo``:

- ``decided ahead``: a worker that has checked the tenant's capability before sends the
  reads, its expectation of them, the decision, its events and the COMMIT in one round
  trip (``PolicyStep._ahead``);
- ``read first``: the same step with nothing remembered, as on a worker's first check of
  a tenant or after the tenant's policy changed: the reads, then the decision (two).

Each round runs one of each in a shuffled order, so the machine's drift falls on both; the
median of the rounds' differences is printed beside each series' p50, and the ratio. With
``--budget``, the capability has a budget (its lock, guard and hold in the same trips).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from temporalio.testing import ActivityEnvironment

from activities.execute.policy import Expected, ExpectedChecks, PolicyStep
from schemas.capabilities import CapabilityCatalog
from schemas.identity import ExecutionRef
from schemas.ids import uuid7
from schemas.run import PolicyInput
from schemas.settings import MoatSettings
from schemas.start import StartClaims
from starter.devstack import EmbeddedPostgres, free_port
from store import budgets, make_engine, make_sessionmaker, tenants, upgrade
from store.keyrings.start import StartKeyring

KEYS = StartKeyring({"bench": os.urandom(32)}, "bench")


class _Forgetful(ExpectedChecks):
    """Remembers nothing: every check reads first."""

    def of(self, inp: PolicyInput) -> Expected | None:
        return None


def _input(tenant_id: str, i: int) -> PolicyInput:
    echo = CapabilityCatalog().get("demo.echo")
    assert echo is not None
    receipt_id = str(uuid7())
    ref = ExecutionRef(
        tenant_id=tenant_id,
        receipt_id=receipt_id,
        idempotency_key=f"bench-{i}-{receipt_id}",
        input_hash="sha256:bench",
        workflow_id=f"bench-{receipt_id}",
        run_id=str(uuid7()),
    )
    inp = PolicyInput(
        ref=ref,
        capability=echo,
        idempotency_ttl_seconds=86400,
        scopes=["execute:*"],
        log_first_attempt=True,
    )
    return inp.model_copy(update={"start_signature": KEYS.sign(StartClaims.of_policy(inp))})


async def measure(url: str, n: int, budget: bool) -> None:
    settings = MoatSettings(database_url=url)
    owner_engine = make_engine(settings.sqlalchemy_url)
    app_engine = make_engine(settings.app_sqlalchemy_url)
    owner, app = make_sessionmaker(owner_engine), make_sessionmaker(app_engine)
    async with owner.begin() as session:
        tenant_id = (await tenants.create_tenant(session, "bench-policy")).id
        if budget:
            await budgets.set_budget(session, tenant_id, "demo.echo", 10 * n + 100, "day")
    ahead, first = PolicyStep(app, KEYS), PolicyStep(app, KEYS)
    first._expected = _Forgetful()
    steps = {"decided ahead": ahead, "read first": first}
    env = ActivityEnvironment()
    series: dict[str, list[float]] = {name: [] for name in steps}
    rng = random.Random(1)
    warmup = 30
    for i in range(warmup + n):
        order = list(steps)
        rng.shuffle(order)
        for name in order:
            inp = _input(tenant_id, i)
            started = time.perf_counter()
            await env.run(steps[name].check_policy, inp)
            if i >= warmup:
                series[name].append((time.perf_counter() - started) * 1000)
    await owner_engine.dispose()
    await app_engine.dispose()
    a, f = (statistics.median(series[k]) for k in ("decided ahead", "read first"))
    paired = statistics.median(x - y for x, y in zip(*series.values(), strict=True))
    print(f"fresh policy checks, {n} of each{' (with a budget)' if budget else ''}:")
    print(f"  decided ahead p50 {a:.2f} ms, read first p50 {f:.2f} ms: {a / f:.2f} x")
    print(f"  paired median difference {paired:+.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.policy_check", description=__doc__)
    parser.add_argument("--n", type=int, default=300, help="checks of each kind")
    parser.add_argument("--budget", action="store_true", help="the capability has a budget")
    args = parser.parse_args()
    before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="moat-bench-policy-") as folder:
        pg = EmbeddedPostgres(Path(folder) / "data", free_port())
        url = pg.start()
        try:
            upgrade(MoatSettings(database_url=url).sqlalchemy_url)
            asyncio.run(measure(url, args.n, args.budget))
        finally:
            pg.stop()
    print(f"  at {datetime.now(UTC):%H:%M} UTC, load {before:.2f} -> {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
