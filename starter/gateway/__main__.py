"""``python -m starter.gateway routes``: the Markdown table of every route and what calling
it needs (README's route table is this output)."""

from __future__ import annotations

import sys

from starter.gateway.access import gateway_table


def main(argv: list[str]) -> int:
    if argv != ["routes"]:
        sys.stderr.write("usage: python -m starter.gateway routes\n")
        return 2
    sys.stdout.write(gateway_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
