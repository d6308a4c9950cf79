"""The execute path stays readable: its route is headers → call → service → answer (at most
``ROUTE_LINES`` lines), and no function or method of its modules is longer than
``FUNCTION_LINES``. A function's lines run from its ``def`` to its last line (decorators
not counted, its signature and docstring counted)."""

from __future__ import annotations

import ast

from tests.support.stack import repo_root

ROOT = repo_root()
ROUTE_LINES = 30
FUNCTION_LINES = 60
ROUTE = ("starter/gateway/routes/executions.py", "execute")
# The rooms of the execute path, from the request to its answer (a folder: all its modules).
EXECUTE_PATH = (
    "starter/gateway/routes/executions.py",
    "starter/gateway/answering.py",
    "starter/service/executions/",
    "workflows/execute.py",
    "activities/execute/",
    "activities/adapters/",
)


def modules() -> list[str]:
    """Every module of the execute path, by its path in the repository."""
    found: list[str] = []
    for entry in EXECUTE_PATH:
        if entry.endswith("/"):
            found += sorted(str(p.relative_to(ROOT)) for p in (ROOT / entry).glob("*.py"))
        else:
            found.append(entry)
    return found


def function_lengths(path: str) -> dict[str, int]:
    """Every function and method of the module at ``path`` (``Class.method`` for methods,
    ``outer.inner`` for nested functions), with its length in lines."""
    return lengths_in((ROOT / path).read_text())


def lengths_in(source: str) -> dict[str, int]:
    tree = ast.parse(source)
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                assert child.end_lineno is not None
                lengths[name] = child.end_lineno - child.lineno + 1
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return lengths


def test_every_listed_module_exists() -> None:
    assert [p for p in EXECUTE_PATH if not (ROOT / p).exists()] == []
    assert ROUTE[0] in modules()
    assert len(modules()) > len(EXECUTE_PATH)


def test_the_execute_route_is_short() -> None:
    path, name = ROUTE
    length = function_lengths(path)[name]
    print(f"\n{path}: {name} is {length} lines (at most {ROUTE_LINES})")
    assert length <= ROUTE_LINES


def test_no_function_on_the_execute_path_is_long() -> None:
    offenders = [
        (path, name, length)
        for path in modules()
        for name, length in function_lengths(path).items()
        if length > FUNCTION_LINES
    ]
    for path, name, length in offenders:
        print(f"{path}: {name} is {length} lines (at most {FUNCTION_LINES})")
    assert offenders == []


def test_the_measure_counts_from_def_to_the_last_line() -> None:
    source = (
        "@decorated\n"
        "async def f(\n"
        "    a: int,\n"
        ") -> None:\n"
        "    def inner() -> None:\n"
        "        pass\n"
        "\n"
        "    inner()\n"
        "class C:\n"
        "    def m(self) -> None:\n"
        "        return None\n"
    )
    assert lengths_in(source) == {"f": 7, "f.inner": 2, "C.m": 2}
