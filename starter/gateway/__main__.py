"""``python -m starter.gateway routes [FILE]``: the Markdown table of every route and what
calling it needs. With FILE, the table replaces what stands between the route markers in
that file (docs/security.md holds it; ``make docs`` writes it)."""

from __future__ import annotations

import sys
from pathlib import Path

from starter.gateway.access import ROUTES_END, ROUTES_START, gateway_table


def spliced(text: str, table: str) -> str:
    """``text`` with the table between its route markers replaced by ``table``."""
    if ROUTES_START not in text or ROUTES_END not in text:
        raise ValueError(f"no {ROUTES_START} / {ROUTES_END} markers")
    head, rest = text.split(ROUTES_START, 1)
    tail = rest.split(ROUTES_END, 1)[1]
    return f"{head}{ROUTES_START}\n{table.strip()}\n{ROUTES_END}{tail}"


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "routes" or len(argv) > 2:
        sys.stderr.write("usage: python -m starter.gateway routes [FILE]\n")
        return 2
    if len(argv) == 1:
        sys.stdout.write(gateway_table())
        return 0
    path = Path(argv[1])
    path.write_text(spliced(path.read_text(), gateway_table()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
