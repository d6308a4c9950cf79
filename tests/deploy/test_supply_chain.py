"""What gets installed is exactly what was locked: every requirement pinned and hashed, the
hashes enforced by the Makefile and the image, the image built from runtime dependencies
only, on a base image pinned by digest."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.stack import repo_root

ROOT = repo_root()
FULL_LOCK = ROOT / "requirements.lock"
RUNTIME_LOCK = ROOT / "requirements-runtime.lock"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
DEV_TOOLS = {"pytest", "schemathesis", "mypy", "ruff", "hypothesis"}
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==(?P<version>\S+)$")
HASH = re.compile(r"^--hash=sha256:[0-9a-f]{64}$")


def locked(path: Path) -> dict[str, str]:
    """Name -> version of a lock file, asserting each entry is pinned and hashed."""
    text = re.sub(r"\s*\\\n\s*", " ", path.read_text())  # join continuation lines
    versions: dict[str, str] = {}
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        requirement, *options = line.split()
        pinned = PIN.match(requirement)
        assert pinned, f"{path.name}: not pinned with ==: {line}"
        assert options and all(HASH.match(o) for o in options), f"{path.name}: unhashed: {line}"
        versions[canonicalize_name(pinned["name"])] = pinned["version"]
    return versions


def project() -> dict[str, list[str]]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {"runtime": meta["dependencies"], "dev": meta["optional-dependencies"]["dev"]}


def names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


@pytest.mark.parametrize("lock", [FULL_LOCK, RUNTIME_LOCK], ids=lambda p: p.name)
def test_every_locked_requirement_is_pinned_and_hashed(lock: Path) -> None:
    assert locked(lock)


def test_the_runtime_lock_is_the_full_lock_without_the_dev_tools() -> None:
    full, runtime = locked(FULL_LOCK), locked(RUNTIME_LOCK)
    assert not DEV_TOOLS & runtime.keys()
    assert not names(project()["dev"]) & runtime.keys()
    assert names(project()["runtime"]) <= runtime.keys()
    assert names(project()["runtime"]) | names(project()["dev"]) <= full.keys()
    assert {name: full.get(name) for name in runtime} == runtime


def test_installs_enforce_the_hashes() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipes = [line for line in makefile.splitlines() if line.startswith("\t")]
    installs = [line for line in recipes if "pip install" in line]
    (locked_install,) = [line for line in installs if "-r requirements.lock" in line]
    assert "--require-hashes" in locked_install
    assert all("--no-deps" in line for line in installs if line is not locked_install)

    dockerfile = DOCKERFILE.read_text()
    commands = [line for line in dockerfile.splitlines() if not line.startswith("#")]
    runs = [line for line in commands if "pip install" in line]
    (image_install,) = [line for line in runs if "-r " in line]
    assert "--require-hashes" in image_install and "-r requirements-runtime.lock" in image_install
    assert "requirements.lock" not in dockerfile.replace("requirements-runtime.lock", "")
    assert all("--no-deps" in line for line in runs if line is not image_install)


def test_the_image_is_pinned_and_runs_as_a_user() -> None:
    lines = DOCKERFILE.read_text().splitlines()
    bases = [line.split()[1] for line in lines if line.startswith("FROM ")]
    assert bases and all(
        re.fullmatch(r"python:3\.11-slim@sha256:[0-9a-f]{64}", base) for base in bases
    ), bases
    (user,) = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert user.split(":")[0] not in {"0", "root"}
