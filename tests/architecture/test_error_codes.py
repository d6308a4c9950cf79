"""Every error code Moat raises or answers is a member of ``schemas.errors.ErrorCode``, and
every refusal code has its HTTP status in the gateway's one table.

The raise sites are read from the source (``ast``): the code given to ``MoatError`` and
``error_response`` (refusals), to ``ApplicationError(type=...)``, an adapter's
``fail(code=...)`` and a connection's ``refused`` (failures a run records). A code is a
string literal, an ``ErrorCode`` member, or a module constant naming one of those."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

from schemas.approvals import ApprovalStatus
from schemas.errors import ErrorCode
from schemas.execute import ERROR_MESSAGES, WARNING_MESSAGES
from schemas.records import ErrorTaxonomy
from starter.gateway.errors import _CODE_OF_STATUS, _FAILED_EXECUTION_STATUS, STATUS
from tests.support.stack import repo_root
from workflows.execute import DENIAL_CODES

ROOT = repo_root()
SOURCES = ("schemas", "store", "workflows", "activities", "starter", "worker.py")
# Refusals: answered with STATUS's status. The argument holding the code: position or keyword.
REFUSALS = {"MoatError": (0, "code"), "error_response": (0, "code")}
FAILURES = {"ApplicationError": (None, "type"), "fail": (None, "code"), "refused": (0, "code")}
CODES = {c.value for c in ErrorCode}
# Being restructured on another branch; their raise sites name codes as literals until then.
# Path prefixes: the execute service is a module or a package of them.


def source_files() -> Iterator[Path]:
    for name in SOURCES:
        path = ROOT / name
        files = [path] if path.is_file() else sorted(path.rglob("*.py"))
        # The agents' client is a distribution of its own, with its own copy of the codes.
        yield from (f for f in files if "client" not in f.relative_to(ROOT).parts[:2])


def module_of(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def constants(tree: ast.Module) -> dict[str, ast.expr]:
    """A module's top-level ``NAME = <expr>``."""
    found: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                found[target.id] = node.value
    return found


def imported(tree: ast.Module) -> dict[str, str]:
    """Names a module imports with ``from x import name``, anywhere in it: name -> module."""
    return {
        alias.asname or alias.name: node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and not node.level
        for alias in node.names
    }


def code_of(expr: ast.expr, tree: ast.Module) -> str | None:
    """The code an argument names, or None when it is computed (a variable, a call)."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value
    if (
        isinstance(expr, ast.Attribute)
        and isinstance(expr.value, ast.Name)
        and expr.value.id == "ErrorCode"
    ):
        return ErrorCode[expr.attr].value
    if isinstance(expr, ast.Name):
        local = constants(tree).get(expr.id)
        if local is not None:
            return code_of(local, tree)
        module = imported(tree).get(expr.id)
        if module is not None:
            value = getattr(importlib.import_module(module), expr.id, None)
            return value if isinstance(value, str) else None
    return None


def code_arguments(
    kinds: dict[str, tuple[int | None, str]],
) -> Iterator[tuple[Path, ast.Module, ast.expr]]:
    """Every argument that names a code in a call named in ``kinds`` (name -> the code's
    position and keyword), with the module it is in."""
    for path in source_files():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name not in kinds:
                continue
            position, keyword = kinds[name]
            yield from ((path, tree, k.value) for k in node.keywords if k.arg == keyword)
            if position is not None and len(node.args) > position:
                yield path, tree, node.args[position]


def raised(kinds: dict[str, tuple[int | None, str]]) -> dict[str, set[str]]:
    """Every code the calls named in ``kinds`` are given: code -> the modules raising it."""
    found: dict[str, set[str]] = {}
    for path, tree, arg in code_arguments(kinds):
        code = code_of(arg, tree)
        if code is not None:
            found.setdefault(code, set()).add(module_of(path))
    return found


def test_every_refusal_is_a_code_with_a_status() -> None:
    refusals = raised(REFUSALS)
    assert len(refusals) > 30, "few refusals found: the scan is broken"
    assert {c: m for c, m in refusals.items() if c not in CODES} == {}
    assert {c: m for c, m in refusals.items() if c not in STATUS} == {}


def test_every_failure_a_run_records_is_a_code() -> None:
    failures = raised(FAILURES)
    assert len(failures) > 5, "few failures found: the scan is broken"
    assert {c: m for c, m in failures.items() if c not in CODES} == {}


def literal_codes() -> list[str]:
    """Raise sites that spell a code as a string literal: ``path:line 'code'``."""
    return [
        f"{path.relative_to(ROOT).as_posix()}:{arg.lineno} {arg.value!r}"
        for path, _, arg in code_arguments({**REFUSALS, **FAILURES})
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
    ]


def test_raise_sites_name_codes_by_their_member() -> None:
    assert literal_codes() == []


def test_the_tables_are_keyed_by_codes() -> None:
    for table in (STATUS, _FAILED_EXECUTION_STATUS, ERROR_MESSAGES):
        assert [k for k in table if not isinstance(k, ErrorCode)] == []
    assert [c for c in DENIAL_CODES.values() if not isinstance(c, ErrorCode)] == []
    assert [c for c in _CODE_OF_STATUS.values() if not isinstance(c, ErrorCode)] == []


def test_every_code_an_execution_answers_is_a_code() -> None:
    answered = {*ERROR_MESSAGES, *WARNING_MESSAGES}
    answered |= {t.value for t in ErrorTaxonomy if t != ErrorTaxonomy.NONE}
    assert sorted(answered - CODES) == []


def test_a_refused_approval_records_a_code() -> None:
    # The workflow records ``approval_<status>`` for a decided approval other than approved.
    decided = set(ApprovalStatus) - {ApprovalStatus.APPROVED, ApprovalStatus.PENDING}
    assert (
        sorted(f"approval_{s.value}" for s in decided if f"approval_{s.value}" not in CODES) == []
    )
    assert decided, "no refused approval status: the check is empty"


def test_the_scan_reads_every_form_of_a_code() -> None:
    tree = ast.parse(
        "from schemas.start import START_NOT_SIGNED\nLOCAL = 'x_local'\n"
        "MoatError('a_literal'); MoatError(ErrorCode.RATE_LIMITED); MoatError(LOCAL)\n"
        "MoatError(START_NOT_SIGNED); MoatError(variable)\n"
    )
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert [code_of(c.args[0], tree) for c in calls] == [
        "a_literal",
        "rate_limited",
        "x_local",
        "start_not_signed",
        None,
    ]
