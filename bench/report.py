"""How ``bench.execute_latency`` shows its results: a rich table and a recommendation."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

MOAT_LOCAL = "moat local"
MOAT_REGULAR = "moat regular"


def recommendation(series: dict[str, Any]) -> tuple[bool, str]:
    """Whether local activities won on the sequential medians, and the sentence saying so."""
    local = series[MOAT_LOCAL]["median_ms"]
    regular = series[MOAT_REGULAR]["median_ms"]
    faster, slower = ("local", "regular") if local <= regular else ("regular", "local")
    low, high = sorted((local, regular))
    text = (
        f"Recommendation: {faster} activities for Moat's bookkeeping steps "
        f"(MOAT_LOCAL_ACTIVITIES={'true' if faster == 'local' else 'false'}): median "
        f"{low:.1f} ms vs {high:.1f} ms with {slower} activities "
        f"({(high - low) / high:.0%} less)."
    )
    return local <= regular, text


def render(report: dict[str, Any], console: Console) -> None:
    s = report["settings"]
    table = Table(
        title=f"Moat execute latency (n={s['n']} per series after {s['warmup']} warm-up; "
        f"Temporal db {s['temporal_db']}, tracing {'on' if s['tracing'] else 'off'})",
        caption="ratio = median / median of the baseline (same mode, same clients)",
    )
    for column in ("series", "clients", "n", "median ms", "p95 ms", "req/s", "ratio"):
        table.add_column(column, justify="left" if column == "series" else "right")
    table.add_column("baseline")
    for row_key, row in report["series"].items():
        name = row_key.removesuffix(f" x{row['clients']}")
        rate = row.get("throughput_rps")
        table.add_row(
            name,
            str(row["clients"]),
            str(row["n"]),
            f"{row['median_ms']:.1f}",
            f"{row['p95_ms']:.1f}",
            f"{rate:.1f}" if rate else "",
            f"{row['ratio']:.2f}" if row["ratio"] is not None else "",
            (row["baseline"] or "").removesuffix(f" x{row['clients']}"),
        )
    console.print(table)
    env = report["environment"]
    before, after = env["loadavg_1m_before_after"]
    if before > env["cpus"] / 2:  # "after" includes the bench's own load
        console.print(
            f"[yellow]Note: the machine was busy (1-min load {before} before, {after} after, "
            f"{env['cpus']} CPUs): absolute figures are inflated; the series are interleaved, "
            "so comparisons between them hold better.[/]"
        )
    short = [k for k, row in report["series"].items() if row["n"] < row["requested"]]
    if short:
        console.print(
            f"[yellow]The --max-seconds {s['max_seconds']:g} budget cut {len(short)} series "
            "short; n shows how many requests each measured.[/]"
        )
    console.print(report["recommendation"])
