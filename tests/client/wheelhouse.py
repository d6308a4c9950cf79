"""Wheels for an offline install of the client: its own, assembled from ``starter/client``
(its sources and its pyproject's metadata), and its dependencies', repackaged from the
distributions installed in this environment. ``pip install --no-index --find-links`` on the
result installs exactly what a user's ``pip install ./starter/client`` would, with no network
and no build tool beyond what Python ships."""

from __future__ import annotations

import base64
import hashlib
import re
import tomllib
import zipfile
from importlib.metadata import Distribution, distribution
from pathlib import Path

from packaging.requirements import Requirement


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _write(path: Path, dist_info: str, files: dict[str, bytes]) -> None:
    record = [_record_line(name, data) for name, data in files.items()]
    record.append(f"{dist_info}/RECORD,,")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")


def _repackaged(dist: Distribution, into: Path) -> Path:
    """An installed distribution as the wheel it came from (its files, its tags)."""
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    tags = [
        line.split(":", 1)[1].strip()
        for line in (dist.read_text("WHEEL") or "").splitlines()
        if line.startswith("Tag:")
    ]
    py, abi, plat = (".".join(sorted({t.split("-")[i] for t in tags})) for i in range(3))
    files: dict[str, bytes] = {}
    for file in dist.files or ():
        located = Path(str(file.locate()))
        if str(file).startswith("..") or "__pycache__" in str(file) or file.name == "RECORD":
            continue
        if located.is_file():
            files[str(file)] = located.read_bytes()
    path = into / f"{name}-{dist.version}-{py}-{abi}-{plat}.whl"
    _write(path, f"{name}-{dist.version}.dist-info", files)
    return path


def _dependencies(requirements: list[str]) -> set[str]:
    """The names of the distributions ``requirements`` need, transitively (no extras)."""
    needed: set[str] = set()
    todo = list(requirements)
    while todo:
        requirement = Requirement(todo.pop())
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = requirement.name.lower()
        if name not in needed:
            needed.add(name)
            todo += distribution(name).requires or []
    return needed


def client_wheelhouse(source: Path, into: Path) -> Path:
    """The wheelhouse for ``source`` (a copy of ``starter/client``)."""
    into.mkdir(parents=True, exist_ok=True)
    project = tomllib.loads((source / "pyproject.toml").read_text())["project"]
    name, version = project["name"].replace("-", "_"), project["version"]
    dist_info = f"{name}-{version}.dist-info"
    metadata = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {version}",
        f"Requires-Python: {project['requires-python']}",
        *(f"Requires-Dist: {r}" for r in project["dependencies"]),
    ]
    files = {
        str(p.relative_to(source / "src")): p.read_bytes()
        for p in sorted((source / "src").rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts and ".egg-info" not in str(p)
    }
    files[f"{dist_info}/METADATA"] = ("\n".join(metadata) + "\n").encode()
    files[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    scripts = project.get("scripts", {})
    files[f"{dist_info}/entry_points.txt"] = (
        "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in scripts.items())
    ).encode()
    _write(into / f"{name}-{version}-py3-none-any.whl", dist_info, files)
    for needed in _dependencies(project["dependencies"]):
        _repackaged(distribution(needed), into)
    return into
