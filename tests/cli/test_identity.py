"""One model for who the CLI acts as (docs/cli.md, "Who you are"): a flag, else the
environment, else the profile (``$MOAT_HOME/profiles.toml``, mode 0600), else the demo key;
``moat whoami`` says the gateway, the key, its tenant and scopes and where each came from;
a refused key names its prefix and where it came from; operator commands take ``--tenant``
(or ``MOAT_TENANT``, the profile's tenant) wherever they take a TENANT; and each command's
help says whether it acts as the tenant or as the operator."""

from __future__ import annotations

import asyncio
import json
import stat
import uuid
from pathlib import Path

import pytest
import typer

from starter.cli import app
from starter.cli.identity import AS_OPERATOR, AS_TENANT, LOCAL
from starter.cli.output import main_of
from tests.cli.test_errors import command_paths
from tests.support.stack import Stack

WRONG_KEY = "moat_wrongkey_" + "x" * 32


@pytest.fixture
def home(stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("MOAT_HOME", str(home))
    monkeypatch.setenv("MOAT_GATEWAY_URL", stack.url)
    monkeypatch.setenv("MOAT_DATABASE_URL", stack.settings.database_url or "")
    monkeypatch.setenv("COLUMNS", "200")
    for name in ("MOAT_API_KEY", "MOAT_TENANT", "MOAT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    return home


def write_demo_key(home: Path, key: str) -> None:
    """As ``moat up`` leaves it."""
    home.mkdir(parents=True)
    (home / "demo_api_key").write_text(key + "\n")


async def moat(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main_of, app, list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def whoami(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    code, out, err = await moat(capsys, "whoami", "--json", *args)
    assert code == 0, err + out
    report: dict[str, object] = json.loads(out)
    return report


async def test_the_key_comes_from_flag_env_profile_then_demo_key(
    stack: Stack, home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key_id = stack.api_key.split("_")[1]
    _, other_key = await stack.new_tenant()
    other_id = other_key.split("_")[1]

    code, _, err = await moat(capsys, "whoami")
    assert code == 2 and err.startswith("error: no_api_key: ")

    write_demo_key(home, other_key)
    report = await whoami(capsys)
    assert report["key_id"] == {"value": other_id, "source": f"the demo key in {home}/demo_api_key"}

    code, out, _ = await moat(capsys, "profile", "set", "work", "--api-key", stack.api_key)
    assert code == 0, out
    profiles = home / "profiles.toml"
    assert stat.S_IMODE(profiles.stat().st_mode) == 0o600
    report = await whoami(capsys)
    assert report["key_id"] == {"value": key_id, "source": "profile work"}
    assert report["tenant_id"] == stack.tenant_id and report["tenant_name"]
    assert report["profile"] == {"value": "work", "source": f"`moat profile use` ({profiles})"}
    assert "execute:*" in report["scopes"]  # type: ignore[operator]

    monkeypatch.setenv("MOAT_API_KEY", other_key)
    assert (await whoami(capsys))["key_id"] == {"value": other_id, "source": "MOAT_API_KEY"}
    flagged = await whoami(capsys, "--api-key", stack.api_key)
    assert flagged["key_id"] == {"value": key_id, "source": "--api-key"}
    assert flagged["gateway_url"] == {"value": stack.url, "source": "MOAT_GATEWAY_URL"}


async def test_whoami_prints_each_part_and_where_it_came_from(
    stack: Stack, home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOAT_API_KEY", stack.api_key)
    monkeypatch.setenv("MOAT_TENANT", "acme")
    code, out, err = await moat(capsys, "whoami")
    assert code == 0, err
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert stack.url in lines["gateway"] and "MOAT_GATEWAY_URL" in lines["gateway"]
    assert f"moat_{stack.api_key.split('_')[1]}_" in lines["api"] and "MOAT_API_KEY" in lines["api"]
    assert stack.tenant_id in lines["tenant"] and "execute:*" in lines["scopes"]
    assert "acme" in lines["operator"] and "MOAT_TENANT" in lines["operator"]
    assert stack.api_key.split("_", 2)[2] not in out


async def test_a_refused_key_names_its_prefix_and_where_it_came_from(
    stack: Stack, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = await moat(capsys, "profile", "set", "stale", "--api-key", WRONG_KEY)
    assert code == 0
    for args, source in (
        (["receipts", "list"], "profile stale"),
        (["policy", "show", "--api-key", WRONG_KEY], "--api-key"),
        (["execute", "demo.echo", "--input", "{}"], "profile stale"),
    ):
        code, _, err = await moat(capsys, *args)
        error, hint = err.splitlines()
        assert code == 1
        assert error.startswith("error: unauthenticated: The API key moat_wrongkey_… "), error
        assert hint.startswith(f"hint: the key came from {source};"), hint
        assert "x" * 32 not in err


async def test_profile_use_list_and_remove(
    stack: Stack, home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, other_key = await stack.new_tenant()
    assert (await moat(capsys, "profile", "set", "a", "--api-key", stack.api_key))[0] == 0
    assert (await moat(capsys, "profile", "set", "b", "--api-key", other_key))[0] == 0
    code, out, _ = await moat(capsys, "profile", "list", "--json")
    rows = {row["name"]: row for row in json.loads(out)}
    assert rows["a"]["in_use"] and not rows["b"]["in_use"]
    assert rows["b"]["key_prefix"] == f"moat_{other_key.split('_')[1]}_"
    assert other_key not in out and stack.api_key not in out
    assert (await moat(capsys, "profile", "use", "b"))[0] == 0
    assert (await whoami(capsys))["key_id"] == {
        "value": other_key.split("_")[1],
        "source": "profile b",
    }
    monkeypatch.setenv("MOAT_PROFILE", "a")
    assert (await whoami(capsys))["profile"] == {"value": "a", "source": "MOAT_PROFILE"}
    assert (await whoami(capsys, "--profile", "b"))["profile"] == {
        "value": "b",
        "source": "--profile",
    }
    assert (await moat(capsys, "profile", "remove", "a"))[0] == 0
    code, _, err = await moat(capsys, "whoami")
    assert code == 2 and err.startswith(
        "error: profile_not_found: no profile 'a' (from MOAT_PROFILE)"
    )


async def test_operator_commands_take_the_tenant_every_way(
    stack: Stack, home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"who-{uuid.uuid4().hex[:8]}"
    tenant_id, _ = await stack.new_tenant(name)

    async def listed(*args: str) -> str:
        code, out, err = await moat(capsys, "api-key", "list", *args, "--json")
        assert code == 0, err
        [key] = json.loads(out)
        tenant: str = key["tenant_id"]
        return tenant

    assert await listed(name) == tenant_id
    assert await listed("--tenant", name) == tenant_id
    monkeypatch.setenv("MOAT_TENANT", name)
    assert await listed() == tenant_id
    monkeypatch.delenv("MOAT_TENANT")
    assert (await moat(capsys, "profile", "set", "ops", "--tenant", name))[0] == 0
    assert await listed() == tenant_id

    # A tenant before other arguments: --tenant anywhere, or MOAT_TENANT.
    code, _, err = await moat(capsys, "connection", "show", "con_nosuch", "--tenant", name)
    assert code == 1 and err.startswith("error: connection_not_found: "), err
    code, _, err = await moat(capsys, "connection", "show", name, "con_x", "--tenant", name)
    assert code == 2 and "the tenant is given twice" in err

    monkeypatch.setenv("MOAT_TENANT", "nosuch")
    code, _, err = await moat(capsys, "budget", "list")
    assert code == 1
    assert err.startswith("error: tenant_not_found: no tenant 'nosuch' (from MOAT_TENANT)"), err
    code, _, err = await moat(capsys, "budget", "list", "--tenant", "gone")
    assert err.startswith("error: tenant_not_found: no tenant 'gone' (from --tenant)"), err


@pytest.mark.parametrize("path", command_paths())
def test_each_command_says_whom_it_acts_as(path: str) -> None:
    command = typer.main.get_command(app)
    for name in path.split():
        command = command.commands[name]  # type: ignore[attr-defined]
        # The root's commands are placeholders until they load (starter/cli/lazy.py).
        command = command.load() if hasattr(command, "load") else command
    said = command.help or ""
    assert sum(role in said for role in (AS_TENANT, AS_OPERATOR, LOCAL)) == 1, said
    names = {opt for p in command.params for opt in getattr(p, "opts", [])}
    if AS_TENANT in said:
        assert {"--api-key", "--profile"} <= names
    if AS_OPERATOR in said and any(p.name == "tenant" for p in command.params):
        assert "--tenant" in names
