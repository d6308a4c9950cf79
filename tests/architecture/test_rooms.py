"""What the import contracts (``make lint``) cannot say: ``worker.py`` imports nothing of
``starter``; every code a refusal carries has its HTTP status in the gateway's one table;
the sandbox's contracts import without the settings' dependencies."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from schemas.errors import ErrorCode
from starter.gateway.errors import STATUS
from tests.support.stack import repo_root

ROOT = repo_root()


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_worker_builds_from_floors_below_it_only() -> None:
    roots = {name.split(".")[0] for name in imported_modules(ROOT / "worker.py")}
    assert "starter" not in roots
    assert {"activities", "workflows"} <= roots


def test_every_refusal_code_has_its_status() -> None:
    codes: set[str] = set()
    for path in (ROOT / "starter").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "MoatError"
                and node.args
            ):
                code = node.args[0]
                if isinstance(code, ast.Constant):
                    codes.add(code.value)
                elif isinstance(code, ast.Attribute) and code.attr.isupper():
                    codes.add(ErrorCode[code.attr].value)
    assert codes, "no MoatError found: the scan is broken"
    assert sorted(codes - STATUS.keys()) == []


def test_importing_the_contracts_loads_no_settings_library() -> None:
    probe = "import sys, schemas; print('pydantic_settings' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "False"
