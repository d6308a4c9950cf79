"""``bench.notion_cost`` runs, and counts the round trips the Notion look-up costs: one
query per repeated attempt under 2022-06-28, the data source's read and the query under
2025-09-03, whatever else the database holds."""

from __future__ import annotations

from activities import http_client
from bench import notion_cost


async def test_the_lookup_costs_one_query_and_under_data_sources_one_read() -> None:
    http = http_client()
    try:
        report = await notion_cost.series(http, n=3, depth=5)
    finally:
        await http.aclose()
    trips = {name: r["round_trips"] for name, r in report.items()}
    assert trips == {
        "notion 2022-06-28 first attempt": 1.0,
        "notion 2022-06-28 repeat, found": 1.0,
        "notion 2022-06-28 repeat, not found": 2.0,
        "notion 2022-06-28 repeat, not found, 5 deep": 2.0,
        "notion 2025-09-03 first attempt": 2.0,
        "notion 2025-09-03 repeat, found": 2.0,
        "notion 2025-09-03 repeat, not found": 4.0,
        "notion 2025-09-03 repeat, not found, 5 deep": 4.0,
    }
    assert all(r["n"] == 3 and r["median_ms"] > 0 for r in report.values())
