"""Every ``moat`` command fails one way (docs/cli.md, "Errors and exit codes"): on stderr
the line ``error: <code>: <message>`` and the line ``hint: <what to do>``, nothing else and
never a traceback; with ``--json`` the object ``{"error": {...}}`` on stdout; exit 1 for a
refusal, 2 for a wrong command line, 3 for a service not there. Each command of the click
tree is made to fail in a way it can, against the live test stack, as the console script
runs it (``output.main_of``)."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import typer

from starter.cli import app
from starter.cli.output import main_of
from starter.devstack import free_port
from tests.support.stack import Stack

ERROR = re.compile(r"^error: (?P<code>[a-z_]+): (?P<message>.+)$")
HINT = re.compile(r"^hint: .+$")
WRONG_KEY = "moat_wrongkey_" + "x" * 32


def command_paths() -> list[str]:
    """Every runnable command of the click tree, hidden aliases included."""
    found: list[str] = []

    def walk(command: object, path: list[str]) -> None:
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for name, sub in subcommands.items():
                # The root's commands are placeholders until they load (starter/cli/lazy.py).
                walk(sub.load() if hasattr(sub, "load") else sub, [*path, name])
        else:
            found.append(" ".join(path))

    walk(typer.main.get_command(app), [])
    return found


@dataclass
class Case:
    args: list[str]
    code: str
    exit_code: int
    env: dict[str, str] = field(default_factory=dict)
    says: str = ""  # a part of the message


def cases(stack: Stack, tmp_path: Path, tenant_name: str) -> dict[str, Case]:
    """One way to fail for each command (and its hidden alias)."""
    t = stack.tenant_id
    missing = str(tmp_path / "missing.json")
    empty = tmp_path / "empty-secret"
    empty.write_text("")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a key")
    no_door = {"MOAT_CODEC_DOOR": str(tmp_path / "no-door")}
    no_db = {"MOAT_DATABASE_URL": f"postgresql://moat@127.0.0.1:{free_port()}/moat"}
    by_path = {
        "up": Case(["up", "--nope"], "no_such_option", 2),
        "worker": Case(["worker", "--nope"], "no_such_option", 2),
        "gateway": Case(["gateway", "extra"], "usage", 2),
        "migrate": Case(["migrate"], "database_unavailable", 3, no_db),
        "codec-url": Case(["codec-url"], "codec_door_missing", 2, no_door),
        "execute": Case(
            ["execute", "demo.ech", "--input", "{}"],
            "capability_not_found",
            1,
            says="did you mean 'demo.echo'?",
        ),
        "plan run": Case(["plan", "run", "--file", missing], "unreadable_file", 2),
        "plan show": Case(["plan", "show", "pln_nosuch"], "plan_not_found", 1),
        "plan resume": Case(
            ["plan", "resume", "pln_nosuch", "--effect-did-not-happen"], "plan_not_found", 1
        ),
        "plan cancel": Case(["plan", "cancel", "pln_nosuch"], "plan_not_found", 1),
        "plan list": Case(["plan", "list", "--cursor", "not-a-cursor"], "invalid_cursor", 1),
        "capabilities": Case(
            ["capabilities", "demo.ecko"],
            "capability_not_found",
            1,
            says="did you mean 'demo.echo'?",
        ),
        "down": Case(["down", "--nope"], "no_such_option", 2),
        "status": Case(["status", "--nope"], "no_such_option", 2),
        "mcp": Case(["mcp", "--port", "many"], "bad_parameter", 2),
        "trust": Case(["trust", "--tenant", "nosuch"], "tenant_not_found", 1, says="--tenant"),
        "whoami": Case(
            ["whoami"], "unauthenticated", 1, {"MOAT_API_KEY": WRONG_KEY}, "moat_wrongkey_"
        ),
        "profile set": Case(["profile", "set", "no good"], "usage", 2),
        "profile use": Case(["profile", "use", "nosuch"], "profile_not_found", 2),
        "profile remove": Case(["profile", "remove", "nosuch"], "profile_not_found", 2),
        "profile list": Case(["profile", "list", "extra"], "usage", 2),
        "tenant create": Case(["tenant", "create", tenant_name], "conflict", 1),
        "tenant list": Case(["tenant", "list"], "database_unavailable", 3, no_db),
        "tenant allow-hosts": Case(
            ["tenant", "allow-hosts", "--tenant", "nosuch"], "tenant_not_found", 1
        ),
        "tenant quotas": Case(["tenant", "quotas", t, "--set", "nope=1"], "no_such_quota", 2),
        "api-key create": Case(["api-key", "create", "nosuch"], "tenant_not_found", 1),
        "api-key list": Case(
            ["api-key", "list"], "tenant_not_found", 1, {"MOAT_TENANT": "nosuch"}, "MOAT_TENANT"
        ),
        "api-key revoke": Case(["api-key", "revoke", "nosuchkey"], "key_not_found", 1),
        "budget list": Case(["budget", "list", "nosuch"], "tenant_not_found", 1),
        "budget set": Case(["budget", "set", t, "demo.echo", "many"], "bad_parameter", 2),
        "connection add": Case(["connection", "add", t], "missing_parameter", 2),
        "connection list": Case(["connection", "list", "nosuch"], "tenant_not_found", 1),
        "connection connect": Case(
            ["connection", "connect", t, "con_nosuch"], "connection_not_found", 1
        ),
        "connection show": Case(["connection", "show", t, "con_nosuch"], "connection_not_found", 1),
        "connection rotate": Case(
            ["connection", "rotate", t, "con_nosuch", "--secret-file", str(empty)], "no_secret", 2
        ),
        "connection revoke": Case(
            ["connection", "revoke", "con_nosuch", "--tenant", t], "connection_not_found", 1
        ),
        "connection reencrypt": Case(["connection", "reencrypt"], "database_unavailable", 3, no_db),
        "policy show": Case(["policy", "show", "--version", "999"], "policy_version_not_found", 1),
        "policy set": Case(["policy", "set", "--file", missing], "unreadable_file", 2),
        "policy history": Case(
            ["policy", "history", "--api-key", WRONG_KEY], "unauthenticated", 1, says="wrongkey"
        ),
        "approvals list": Case(["approvals", "list", "--status", "bogus"], "bad_parameter", 2),
        "people list": Case(["people", "list"], "scope_missing", 1, says="people:read"),
        "people add": Case(["people", "add", "ada"], "scope_missing", 1, says="people:write"),
        "people disable": Case(["people", "disable", "ada"], "scope_missing", 1),
        "approvals show": Case(
            ["approvals", "show", "apr_nosuch"], "schema_validation_failed", 1, says="approval_id"
        ),
        "approvals approve": Case(
            ["approvals", "approve", "apr_nosuch", "--yes"],
            "schema_validation_failed",
            1,
            says="approval_id",
        ),
        "approvals reject": Case(
            ["approvals", "reject", "apr_nosuch", "--yes"],
            "schema_validation_failed",
            1,
            says="approval_id",
        ),
        "approvals channel set": Case(
            ["approvals", "channel", "set", "con_x", "C1", "--secret-file", str(empty)],
            "no_secret",
            2,
        ),
        "approvals channel show": Case(
            ["approvals", "channel", "show", "--api-key", WRONG_KEY], "unauthenticated", 1
        ),
        "approvals channel clear": Case(
            ["approvals", "channel", "clear", "--api-key", WRONG_KEY], "unauthenticated", 1
        ),
        "alerts route set": Case(
            ["alerts", "route", "set", "con_x", "C1", "--api-key", WRONG_KEY], "unauthenticated", 1
        ),
        "alerts route show": Case(
            ["alerts", "route", "show", "--api-key", WRONG_KEY], "unauthenticated", 1
        ),
        "alerts route clear": Case(
            ["alerts", "route", "clear", "--api-key", WRONG_KEY], "unauthenticated", 1
        ),
        "codec url": Case(["codec", "url"], "codec_door_missing", 2, no_door),
        "codec rotate": Case(["codec", "rotate", "--grace", "-1"], "bad_parameter", 2),
        "receipts list": Case(
            ["receipts", "list"],
            "gateway_unavailable",
            3,
            {"MOAT_GATEWAY_URL": f"http://127.0.0.1:{free_port()}"},
        ),
        "receipts show": Case(["receipts", "show", "rcpt_nosuch"], "receipt_not_found", 1),
        "runs rebuild": Case(["runs", "rebuild", "--tenant", "nosuch"], "tenant_not_found", 1),
        "runs show": Case(["runs", "show", "rcpt_nosuch"], "receipt_not_found", 1),
        "manifest get": Case(["manifest", "get", "rcpt_nosuch"], "execution_not_found", 1),
        "log checkpoint": Case(["log", "checkpoint"], "database_unavailable", 3, no_db),
        "log key": Case(["log", "key"], "unreadable", 2, {"MOAT_LOG_KEY": str(garbage)}),
        "evidence export": Case(
            [
                "evidence",
                "export",
                "--since",
                "0",
                str(tmp_path / "bundle"),
                "--api-key",
                WRONG_KEY,
            ],
            "unauthenticated",
            1,
        ),
        "evidence verify": Case(["evidence", "verify", missing], "bundle_unreadable", 2),
        "witness keygen": Case(
            ["witness", "keygen", "--name", "a b", "--out", str(tmp_path / "w.key")], "usage", 2
        ),
        "manifest verify": Case(["manifest", "verify", missing], "unreadable", 2),
        "manifest inspect": Case(["manifest", "inspect", missing], "unreadable", 2),
        "signing-key rotate": Case(["signing-key", "rotate", "--alg", "MD5"], "bad_parameter", 2),
        "signing-key publish": Case(["signing-key", "publish"], "unreadable", 2),
        "signing-key list": Case(["signing-key", "list"], "unreadable", 2),
        "webhook add": Case(
            ["webhook", "add", "https://example.com/hook", "--event", "no.such"],
            "schema_validation_failed",
            1,
            says="events",
        ),
        "webhook list": Case(
            ["webhook", "list"],
            "profile_not_found",
            2,
            {"MOAT_PROFILE": "nosuch", "MOAT_API_KEY": ""},  # no key before the profile's
        ),
        "webhook listen": Case(["webhook", "listen", "--port", "many"], "bad_parameter", 2),
        "webhook rotate": Case(["webhook", "rotate", "wh_nosuch"], "webhook_not_found", 1),
        "webhook remove": Case(["webhook", "remove", "wh_nosuch"], "webhook_not_found", 1),
        "webhook deliveries": Case(["webhook", "deliveries", "wh_nosuch"], "webhook_not_found", 1),
        "dlq list": Case(["dlq", "list", "--limit", "0"], "bad_parameter", 2),
        "dlq show": Case(["dlq", "show", "dl_nosuch"], "dead_letter_not_found", 1),
        "dlq requeue": Case(["dlq", "requeue", "dl_nosuch"], "dead_letter_not_found", 1),
        "dlq resolve": Case(
            ["dlq", "resolve", "dl_nosuch", "--note", "x"], "dead_letter_not_found", 1
        ),
        "probe add": Case(
            ["probe", "add", t, "demo.ech"], "capability_not_found", 1, says="did you mean"
        ),
        "probe list": Case(["probe", "list", "nosuch"], "tenant_not_found", 1),
        "probe pause": Case(["probe", "pause", t, "prb_nosuch"], "probe_not_found", 1),
        "probe remove": Case(["probe", "remove", t, "prb_nosuch"], "probe_not_found", 1),
    }
    for alias, name in (("key", "api-key"), ("keys", "signing-key")):
        for path, case in list(by_path.items()):
            if path.startswith(name + " "):
                args = [alias, *case.args[1:]]
                by_path[f"{alias} {path.split(' ', 1)[1]}"] = Case(
                    args, case.code, case.exit_code, case.env, case.says
                )
    return by_path


@pytest.fixture
def cli_env(stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Stack:
    for name, value in {
        "MOAT_HOME": str(tmp_path / "home"),
        "MOAT_DATABASE_URL": stack.settings.database_url or "",
        "MOAT_GATEWAY_URL": stack.url,
        "MOAT_API_KEY": stack.api_key,
        "MOAT_TASK_QUEUE": stack.settings.task_queue,
        "MOAT_TEMPORAL_ADDRESS": stack.client.service_client.config.target_host,
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("MOAT_TENANT", "MOAT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    return stack


async def moat(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``moat ARGS`` as the console script runs it: exit code, stdout, stderr. In a thread:
    the gateway answers on this test's loop."""
    code = await asyncio.to_thread(main_of, app, args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def said_one_way(case: Case, code: int, out: str, err: str) -> str | None:
    """What is wrong with how a failure was said, or None."""
    lines = err.strip().splitlines()
    if "Traceback" in out + err:
        return f"a traceback:\n{err}"
    if code != case.exit_code:
        return f"exit {code}, not {case.exit_code}:\n{err}{out}"
    if len(lines) != 2 or not HINT.match(lines[1]):
        return f"not an error line and a hint line:\n{err}"
    said = ERROR.match(lines[0])
    if said is None or said["code"] != case.code:
        return f"not `error: {case.code}: …`:\n{err}"
    if case.says not in said["message"] + lines[1]:
        return f"{case.says!r} not said:\n{err}"
    return None


async def test_every_command_fails_one_way(
    cli_env: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"errors-{uuid.uuid4().hex[:8]}"
    await cli_env.new_tenant(name)
    table = cases(cli_env, tmp_path, name)
    assert sorted(table) == sorted(command_paths()), "every command needs a way to fail here"
    wrong: dict[str, str] = {}
    for path, case in table.items():
        with pytest.MonkeyPatch.context() as patch:
            for variable, value in case.env.items():
                patch.setenv(variable, value)
            code, out, err = await moat(case.args, capsys)
        problem = said_one_way(case, code, out, err)
        if problem is not None:
            wrong[path] = problem
    assert not wrong, "\n\n".join(f"moat {path}: {why}" for path, why in wrong.items())


@pytest.mark.parametrize("path", command_paths())
def test_a_wrong_command_line_is_a_usage_error(
    path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MOAT_HOME", str(tmp_path))
    code = main_of(app, [*path.split(), "--no-such-option"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines() == [
        "error: no_such_option: No such option: --no-such-option",
        f"hint: see `moat {path} --help`",
    ]


def test_with_json_the_error_is_an_object_on_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MOAT_HOME", str(tmp_path))
    monkeypatch.delenv("MOAT_API_KEY", raising=False)
    monkeypatch.delenv("MOAT_PROFILE", raising=False)
    code = main_of(app, ["receipts", "list", "--json"])
    captured = capsys.readouterr()
    assert code == 2 and captured.err == ""
    error = json.loads(captured.out)["error"]
    assert error["code"] == "no_api_key"
    assert set(error) == {"code", "message", "hint", "details"} and error["hint"]
    code = main_of(app, ["tenant", "list", "--json", "--nope"])
    captured = capsys.readouterr()
    assert code == 2 and json.loads(captured.out)["error"]["code"] == "no_such_option"


def test_a_mistyped_command_gets_did_you_mean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MOAT_HOME", str(tmp_path))
    assert main_of(app, ["exeucte"]) == 2
    assert "error: no_such_command: No such command 'exeucte'. Did you mean 'execute'?" in (
        capsys.readouterr().err
    )
    assert main_of(app, ["approvals", "aprove"]) == 2
    assert "Did you mean 'approve'?" in capsys.readouterr().err
