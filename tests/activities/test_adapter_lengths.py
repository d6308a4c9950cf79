"""The adapters stay readable in one sitting: no function in ``activities/adapters/`` runs
past 60 lines (from its ``def`` to its last line, decorators aside)."""

from __future__ import annotations

import ast
from pathlib import Path

import activities.adapters

MAX_LINES = 60
PACKAGE = Path(activities.adapters.__file__).parent


def _long_functions(source: str, path: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_LINES:
                found.append(f"{path}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_adapter_function_is_longer_than_60_lines() -> None:
    modules = sorted(PACKAGE.glob("*.py"))
    assert len(modules) > 1
    long = [name for module in modules for name in _long_functions(module.read_text(), module.name)]
    assert long == []


def test_the_measure_sees_a_long_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    assert _long_functions(f"async def f():\n{body}\n", "m.py") == ["m.py:1 f (61 lines)"]
