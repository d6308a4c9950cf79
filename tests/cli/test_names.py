"""``moat api-key`` and ``moat signing-key`` are the names; ``moat key`` and ``moat keys``
still work for one release, hidden from the help."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schemas.settings import MoatSettings
from starter.cli import app as cli


def test_the_help_lists_the_new_names_only() -> None:
    listed = CliRunner().invoke(cli, ["--help"], env={"COLUMNS": "200"})
    assert listed.exit_code == 0, listed.output
    # The first word of each line of the commands' box is a command's name.
    commands = {line.split()[1] for line in listed.output.splitlines() if line.startswith("│ ")}
    assert {"api-key", "signing-key"} <= commands
    assert not {"key", "keys"} & commands


@pytest.mark.parametrize("name", ["signing-key", "keys"])
def test_both_names_manage_the_signing_keyring(name: str, tmp_path: Path) -> None:
    env = {"MOAT_HOME": str(tmp_path / "home")}
    runner = CliRunner()
    assert runner.invoke(cli, [name, "list"], env=env).exit_code == 2  # no keyring yet
    rotated = runner.invoke(cli, [name, "rotate"], env=env)
    assert rotated.exit_code == 0, rotated.output
    listed = runner.invoke(cli, [name, "list"], env=env)
    assert listed.exit_code == 0 and "ES256" in listed.output


@pytest.mark.parametrize("name", ["api-key", "key"])
def test_both_names_manage_api_keys(
    name: str, base_settings: MoatSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert base_settings.database_url is not None
    monkeypatch.setenv("MOAT_DATABASE_URL", base_settings.database_url)
    monkeypatch.setenv("MOAT_HOME", str(base_settings.home))
    runner = CliRunner()
    tenant = f"names-{uuid.uuid4().hex[:8]}"
    assert runner.invoke(cli, ["tenant", "create", tenant]).exit_code == 0
    made = runner.invoke(cli, [name, "create", tenant, "--name", name, "--json"])
    assert made.exit_code == 0, made.output
    key = json.loads(made.output)
    listed = runner.invoke(cli, [name, "list", tenant, "--json"])
    assert key["id"] in [k["id"] for k in json.loads(listed.output)]
    revoked = runner.invoke(cli, [name, "revoke", key["id"]])
    assert revoked.exit_code == 0 and "revoked" in revoked.output
    missing = runner.invoke(cli, [name, "revoke", "nosuchkey"])
    assert missing.exit_code == 1 and "no API key" in missing.output
