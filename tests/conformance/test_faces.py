"""``moat.adapters`` is the whole of what an adapter package needs from Moat: every name it
lists resolves, and the example package (``examples/acme-crm``) imports nothing of Moat's
server beyond ``moat.adapters`` and, for its fake, ``moat.testing``."""

from __future__ import annotations

import ast
from pathlib import Path

import moat.adapters
from tests.support.stack import repo_root

SERVER = ("schemas", "store", "workflows", "activities", "starter", "worker")


def test_every_name_of_the_facade_resolves() -> None:
    assert sorted(moat.adapters.__all__) == moat.adapters.__all__
    for name in moat.adapters.__all__:
        assert getattr(moat.adapters, name) is not None, name


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_the_example_package_imports_only_the_public_faces() -> None:
    package = repo_root() / "examples" / "acme-crm" / "src" / "moat_acme_crm"
    modules = sorted(package.glob("*.py"))
    assert modules
    for module in modules:
        for name in _imports(module):
            top = name.split(".")[0]
            assert top not in SERVER, f"{module.name} imports {name}: use moat.adapters"
            if top == "moat":
                allowed = ("moat.adapters", "moat.testing")
                assert name.startswith(allowed), f"{module.name} imports {name}"
