"""The commands a user reaches for first: ``moat capabilities [ID]``, ``moat execute
--dry-run`` and ``--input @FILE``/``@-``, ``moat --version`` and shell completion."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from starter.cli import app as cli
from tests.support.stack import Stack

runner = CliRunner()


@pytest.fixture
def cli_env(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Stack:
    monkeypatch.setenv("MOAT_GATEWAY_URL", stack.url)
    monkeypatch.setenv("MOAT_API_KEY", stack.api_key)
    monkeypatch.setenv("COLUMNS", "200")
    return stack


async def moat(*args: str, stdin: str | None = None) -> Result:
    # The CLI blocks; the gateway answers on this test's loop, so it runs in a thread.
    return await asyncio.to_thread(runner.invoke, cli, list(args), input=stdin)


async def test_capabilities_lists_the_catalog(cli_env: Stack) -> None:
    table = await moat("capabilities")
    assert table.exit_code == 0, table.output
    rows = {line.split("│")[1].strip(): line for line in table.output.splitlines() if "│" in line}
    assert {"demo.echo", "http.request"} <= rows.keys()
    assert "effect" in table.output and "idempotency" in table.output
    assert "webhook" in rows["http.request"] or "http" in rows["http.request"]

    listed = json.loads((await moat("capabilities", "--json")).stdout)
    echo = next(c for c in listed if c["id"] == "demo.echo")
    assert {"effect_type", "idempotency", "connection_types", "input_schema"} <= echo.keys()


async def test_one_capability_shows_its_input_schema(cli_env: Stack) -> None:
    shown = await moat("capabilities", "http.request")
    assert shown.exit_code == 0, shown.output
    assert shown.output.startswith("http.request ")
    assert "input schema:" in shown.output and '"properties": {' in shown.output
    assert '"url"' in shown.output

    as_json = json.loads((await moat("capabilities", "http.request", "--json")).stdout)
    assert as_json[0]["id"] == "http.request" and "url" in as_json[0]["input_schema"]["properties"]

    mistyped = await moat("capabilities", "demo.ecko")
    assert mistyped.exit_code == 1
    assert mistyped.output.startswith("error: capability_not_found: No capability 'demo.ecko'")
    assert "did you mean 'demo.echo'?" in mistyped.output


async def test_a_dry_run_says_the_decision_and_runs_nothing(cli_env: Stack) -> None:
    planned = await moat(
        "execute", "demo.echo", "--input", '{"n": 1}', "--key", "dry-1", "--dry-run"
    )
    assert planned.exit_code == 0, planned.output
    assert planned.output.startswith("planned  ")
    assert "policy: allow by rule" in planned.output
    assert "dry run: nothing executed" in planned.output
    assert "output:" not in planned.output

    # The key stays free: the real call executes (it is no replay of the dry run).
    real = await moat("execute", "demo.echo", "--input", '{"n": 1}', "--key", "dry-1", "--json")
    assert real.exit_code == 0, real.output
    envelope = json.loads(real.stdout)
    assert envelope["status"] == "executed" and envelope["replayed"] is False


async def test_input_from_a_file_or_stdin(cli_env: Stack, tmp_path: Path) -> None:
    given = tmp_path / "input.json"
    given.write_text('{"from": "file"}')
    from_file = await moat("execute", "demo.echo", "--input", f"@{given}", "--json")
    assert from_file.exit_code == 0, from_file.output
    assert json.loads(from_file.stdout)["output"] == {"from": "file"}

    from_stdin = await moat("execute", "demo.echo", "--input", "@-", "--json", stdin='{"s": 1}')
    assert from_stdin.exit_code == 0, from_stdin.output
    assert json.loads(from_stdin.stdout)["output"] == {"s": 1}

    missing = await moat("execute", "demo.echo", "--input", f"@{tmp_path / 'none.json'}")
    assert missing.exit_code == 2 and "cannot read --input @" in missing.output
    given.write_text("[1]")
    not_object = await moat("execute", "demo.echo", "--input", f"@{given}")
    assert not_object.exit_code == 2 and "must hold a JSON object" in not_object.output


def test_version_names_both_distributions() -> None:
    shown = runner.invoke(cli, ["--version"])
    assert shown.exit_code == 0, shown.output
    assert f"moat-execution {version('moat-execution')}" in shown.output
    assert f"moat-client {version('moat-client')}" in shown.output


def complete(words: str, shell: str = "bash") -> str:
    """What the shell's completion function gets from ``moat`` for ``words`` (the
    ``_MOAT_COMPLETE`` protocol the installed scripts speak)."""
    env = {**os.environ, "_MOAT_COMPLETE": f"complete_{shell}", "_TYPER_COMPLETE_ARGS": words}
    env |= {"COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1)}
    env["_TYPER_COMPLETE_FISH_ACTION"] = "get-args"
    done = subprocess.run(
        [Path(sys.executable).parent / "moat"], env=env, capture_output=True, text=True, timeout=60
    )
    return done.stdout


def test_completion_offers_commands_and_subcommands() -> None:
    assert complete("moat rec").split() == ["receipts"]
    assert complete("moat webhook li").split() == ["listen", "list"]
    assert '"receipts":"Receipts, read through the gateway."' in complete("moat rec", "zsh")
    assert complete("moat rec", "fish").strip() == "receipts\tReceipts, read through the gateway."


@pytest.mark.parametrize(
    ("shell", "line"),
    [
        ("bash", "complete -o default -F _moat_completion moat"),
        ("zsh", "compdef _moat_completion moat"),
        ("fish", "complete --command moat"),
    ],
)
def test_show_completion_prints_each_shells_script(
    shell: str, line: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Named on the command line rather than detected from the shell this test runs in.
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    shown = runner.invoke(cli, ["--show-completion", shell], prog_name="moat")
    assert shown.exit_code == 0, shown.output
    assert f"_MOAT_COMPLETE=complete_{shell}" in shown.output and line in shown.output


async def test_manifest_get_fetches_the_file_and_verifies_it(
    cli_env: Stack, tmp_path: Path
) -> None:
    body = (await cli_env.execute("demo.echo", {"audit": "cli"}, key="mf-cli")).json()
    receipt = body["receipt_id"]
    to_stdout = await moat("manifest", "get", receipt)
    assert to_stdout.exit_code == 0, to_stdout.output
    assert json.loads(to_stdout.stdout)["correlation_id"] == receipt

    saved = tmp_path / "manifest.json"
    written = await moat("manifest", "get", receipt, "-o", str(saved))
    assert written.exit_code == 0, written.output
    assert saved.read_bytes() == to_stdout.stdout_bytes  # byte for byte, as stored
    jwks = f"{cli_env.url}/.well-known/jwks.json"
    assert f"verify it: moat manifest verify {saved} --jwks {jwks}" in written.stderr
    verified = await moat("manifest", "verify", str(saved), "--jwks", jwks)
    assert verified.exit_code == 0 and "valid" in verified.output

    checked = await moat("manifest", "get", receipt, "-o", str(saved), "--verify")
    assert checked.exit_code == 0, checked.output
    assert "valid: 1 signature(s)" in checked.stderr

    unknown = await moat("manifest", "get", receipt[:-4] + "0000")
    assert unknown.exit_code == 1 and "manifest_not_found" in unknown.output
