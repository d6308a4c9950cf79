"""Workflow code is deterministic: a lint over the source of every module a workflow runs.

Production workers run workflows outside Temporal's sandbox (``workflow_sandbox`` off: the
sandbox re-imports the workflow modules for every run, a quarter of the worker's CPU per
execution). What the sandbox caught at run time is caught here before a commit, over more
than the code paths a test happens to run:

- in ``workflows/`` and every project module they import (transitively: ``schemas/``), no
  call to a clock, a random source, the environment, a file, a thread or a socket
  (``datetime.now``, ``time.time``, ``uuid.uuid4``, ``random.*``, ``os.*``, ``open``, …):
  ``workflow.now()``, ``workflow.uuid4()`` and ``workflow.random()`` are the deterministic ones;
- workflow modules import only the SDK, the standard library's pure modules and the project's
  ``schemas``/``workflows`` (no driver, no HTTP client, no store);
- no module state a run could change for the next one (no ``global``, no mutable container
  bound at module level in ``workflows/``).

The sandbox itself still runs in the test suite: the test stacks' workers run every
workflow in it (``moat.testing``), and the recorded histories replay in it
(``tests/histories``).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ("schemas", "workflows")

# Calls that differ from one run (or one replay) to the next, by the imported name.
NONDETERMINISTIC = {
    "datetime.datetime.now",
    "datetime.datetime.utcnow",
    "datetime.datetime.today",
    "datetime.date.today",
    "uuid.uuid1",
    "uuid.uuid4",
    "os.urandom",
    "os.getenv",
    "os.environ",
    "builtins.open",
    "builtins.input",
    "asyncio.get_event_loop",
    "asyncio.new_event_loop",
    "asyncio.to_thread",
}
# Whole modules a workflow must not call into.
FORBIDDEN_MODULES = (
    "time",
    "random",
    "secrets",
    "threading",
    "socket",
    "subprocess",
    "multiprocessing",
    "concurrent",
    "httpx",
    "psycopg",
    "sqlalchemy",
    "store",
    "activities",
    "starter",
)
# What a workflow module may import.
WORKFLOW_IMPORTS = (
    "__future__",
    "temporalio",
    "schemas",
    "workflows",
    "datetime",
    "typing",
    "collections",
    "dataclasses",
    "enum",
    "asyncio",
    "contextlib",
    "hashlib",
    "builtins",
    "functools",
    "itertools",
    "json",
    "types",
)


def _module_path(name: str) -> Path | None:
    """The project's source file of a module (None: a name imported from one)."""
    base = ROOT.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imports(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            for alias in node.names:
                yield f"{node.module}.{alias.name}"


def _closure() -> dict[str, ast.Module]:
    """Every project module a workflow module imports, transitively, by name."""
    seen: dict[str, ast.Module] = {}
    todo = [f"workflows.{p.stem}" for p in (ROOT / "workflows").glob("*.py")]
    while todo:
        name = todo.pop()
        if name in seen or not name.startswith(PROJECT):
            continue
        path = _module_path(name)
        if path is None:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        seen[name] = tree
        todo.extend(i for i in _imports(tree) if i.split(".")[0] in PROJECT)
    return seen


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name → the dotted name it was imported as."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                names[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node: ast.expr, aliases: dict[str, str]) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    head = aliases.get(node.id, f"builtins.{node.id}" if node.id in {"open", "input"} else None)
    if head is None:
        return None
    return ".".join([head, *reversed(parts)])


def _violations(name: str, tree: ast.Module) -> Iterator[str]:
    aliases = _aliases(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute | ast.Name) and not isinstance(
            getattr(node, "ctx", None), ast.Store
        ):
            dotted = _dotted(node, aliases)
            if dotted is None:
                continue
            if dotted in NONDETERMINISTIC or dotted.split(".")[0] in FORBIDDEN_MODULES:
                yield f"{name}:{node.lineno}: {dotted}"
        elif isinstance(node, ast.Global):
            yield f"{name}:{node.lineno}: global {', '.join(node.names)}"


def test_workflow_code_calls_nothing_nondeterministic() -> None:
    closure = _closure()
    assert "workflows.execute" in closure and "schemas.run" in closure
    found = sorted({v for name, tree in closure.items() for v in _violations(name, tree)})
    assert found == [], "nondeterministic calls reachable from workflow code:\n" + "\n".join(found)


def test_workflow_modules_import_only_pure_modules() -> None:
    found = []
    for name, tree in _closure().items():
        if not name.startswith("workflows"):
            continue
        for imported in _imports(tree):
            top = imported.split(".")[0]
            if top not in WORKFLOW_IMPORTS and top not in sys.stdlib_module_names | {"schemas"}:
                found.append(f"{name}: {imported}")
            elif top not in WORKFLOW_IMPORTS:
                found.append(f"{name}: {imported} (a standard module not known to be pure)")
    assert found == []


def test_workflow_modules_keep_no_mutable_state() -> None:
    found = []
    for name, tree in _closure().items():
        if not name.startswith("workflows"):
            continue
        for node in tree.body:
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            if isinstance(value, ast.List | ast.Dict | ast.Set | ast.ListComp | ast.DictComp):
                found.append(f"{name}:{node.lineno}")
    assert found == [], "module-level mutable containers in workflow modules"


@pytest.mark.parametrize(
    "source",
    [
        "from datetime import datetime\ndef f():\n    return datetime.now()\n",
        "import uuid\ndef f():\n    return uuid.uuid4()\n",
        "import time as t\ndef f():\n    t.sleep(1)\n",
        "import random\nX = random.random()\n",
        "def f():\n    return open('x')\n",
        "import os\ndef f():\n    return os.environ['X']\n",
        "COUNT = 0\ndef f():\n    global COUNT\n",
    ],
)
def test_the_lint_catches(source: str) -> None:
    assert list(_violations("m", ast.parse(source))) != []
