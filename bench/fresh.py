"""Fresh executes against the floor alone, quickly: ``bench.speed``'s first comparison and
its breakdown, without the rest of its phases, for trying a change to the execute path.

    .venv/bin/python -m bench.fresh --n 60

Run it alternately from checkouts of two commits (each its own stack) to compare them: the
machine's speed drifts between runs, so read the ratio of each run, and more than one.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
import uuid

from bench.bare_workflow import FLOOR_WORKFLOW
from bench.breakdown import breakdown, compared
from bench.speed import Calls, load, sequential
from bench.speed_stack import speed_stack


async def measure(n: int, warmup: int, seed: int) -> None:
    async with speed_stack() as stack:
        calls = Calls(stack, f"fresh-{uuid.uuid4().hex[:8]}")
        series = {"moat": calls.fresh, "floor": calls.bare(FLOOR_WORKFLOW, "floor")}
        rng = random.Random(seed)
        before = load()
        samples = await sequential(series, n, warmup, rng, time.monotonic() + 3600)
        moat, floor = statistics.median(samples["moat"]), statistics.median(samples["floor"])
        print(
            f"fresh p50 {moat:.1f} ms, floor p50 {floor:.1f} ms: {moat / floor:.3f} x "
            f"(n={n}, load {before:.1f} -> {load():.1f})"
        )
        ours = await breakdown(stack.moat_client, calls.runs["moat"][-n:])
        theirs = await breakdown(stack.bare_client, calls.runs["floor"][-n:])
        for name, a, b in compared(ours, theirs):
            print(f"  {name:24s} {a:6.1f} {b:6.1f} {a - b:+6.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fresh", description=__doc__)
    parser.add_argument("--n", type=int, default=60, help="measured requests per series")
    parser.add_argument("--warmup", type=int, default=20, help="warm-up requests per series")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    asyncio.run(measure(args.n, args.warmup, args.seed))


if __name__ == "__main__":
    main()
