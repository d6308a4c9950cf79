"""Who the CLI acts as (docs/cli.md, "Who you are"), chosen one way for every command.

A command acts either as a tenant (its API key, through the gateway: ``AsTenant``) or as
the operator (the owner role on the database: ``AsOperator``); a few act on local files
only (``Local``). Each value is taken from the first place that has it: a flag
(``--api-key``, ``--tenant``), the environment (``MOAT_API_KEY``, ``MOAT_TENANT``,
``MOAT_GATEWAY_URL``), the profile (``--profile``, else ``MOAT_PROFILE``, else the one
``moat profile use`` chose, in ``$MOAT_HOME/profiles.toml``), and for the API key last the
demo tenant's key that ``moat up`` keeps in ``$MOAT_HOME``. Every value says where it came
from, so ``moat whoami`` and a refused key can name it.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any

import typer
from typer._click.exceptions import BadArgumentUsage, MissingParameter, UsageError
from typer._click.globals import get_current_context
from typer.core import TyperArgument, TyperCommand, TyperOption

from schemas.settings import MoatSettings

PROFILES_FILE = "profiles.toml"
PROFILE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
PROFILE_FIELDS = ("api_key", "tenant", "gateway_url")
TENANT_SOURCE = "moat.tenant_source"

AS_TENANT = (
    "Acts as the tenant: with its API key, through the gateway (--api-key, MOAT_API_KEY, "
    "the profile, else the demo key)."
)
AS_OPERATOR = (
    "Acts as the operator: on the database, as its owner role (a tenant from TENANT or "
    "--tenant, MOAT_TENANT, else the profile)."
)
LOCAL = "Acts on local files and processes only: neither as a tenant nor as the operator."


@dataclass(frozen=True)
class Chosen:
    """A value and where it came from (``--api-key``, ``MOAT_API_KEY``, ``profile acme``…)."""

    value: str | None
    source: str


def _flag(name: str) -> str | None:
    ctx = get_current_context(silent=True)
    value = ctx.meta.get(f"moat.{name}") if ctx is not None else None
    return value if isinstance(value, str) else None


def tenant_source() -> str:
    """Where the running operator command's tenant came from (its argument, ``--tenant``,
    ``MOAT_TENANT``, a profile), or "" outside one."""
    ctx = get_current_context(silent=True)
    source = ctx.meta.get(TENANT_SOURCE) if ctx is not None else None
    return source if isinstance(source, str) else ""


def profiles_path(settings: MoatSettings) -> Path:
    return settings.home / PROFILES_FILE


def read_profiles(settings: MoatSettings) -> dict[str, Any]:
    """The profiles file as ``{"current": name, "profiles": {name: {field: value}}}``."""
    path = profiles_path(settings)
    if not path.exists():
        return {"current": None, "profiles": {}}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        from starter.cli.output import usage

        raise usage(f"cannot read {path}: {exc}", "fix or remove the file") from None
    profiles = data.get("profiles")
    return {
        "current": data.get("current"),
        "profiles": profiles if isinstance(profiles, dict) else {},
    }


def write_profiles(settings: MoatSettings, data: dict[str, Any]) -> Path:
    """Write the profiles file, mode 0600 from its creation on (it holds key secrets)."""
    lines = ["# Who the moat CLI acts as: `moat profile set/use/list`, `moat whoami`."]
    if data.get("current"):
        lines.append(f"current = {json.dumps(data['current'], ensure_ascii=False)}")
    for name, fields in sorted(data["profiles"].items()):
        lines += ["", f"[profiles.{name}]"]
        for field in PROFILE_FIELDS:
            if fields.get(field):
                lines.append(f"{field} = {json.dumps(fields[field], ensure_ascii=False)}")
    path = profiles_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write("\n".join(lines) + "\n")
    path.chmod(0o600)
    return path


def profile(settings: MoatSettings) -> tuple[str | None, dict[str, str], str]:
    """The profile in use: its name, its fields, and where the name came from."""
    data = read_profiles(settings)
    for name, source in (
        (_flag("profile"), "--profile"),
        (settings.profile, "MOAT_PROFILE"),
        (data["current"], f"`moat profile use` ({profiles_path(settings)})"),
    ):
        if name:
            fields = data["profiles"].get(name)
            if fields is None:
                from starter.cli.output import usage

                raise usage(
                    f"no profile {name!r} (from {source})",
                    "see `moat profile list`; create it with `moat profile set NAME`",
                    code="profile_not_found",
                )
            return name, fields, source
    return None, {}, ""


def api_key(settings: MoatSettings) -> Chosen:
    """The API key a tenant command uses, and where it came from."""
    if (flag := _flag("api_key")) is not None:
        return Chosen(flag, "--api-key")
    if settings.api_key:
        return Chosen(settings.api_key, "MOAT_API_KEY")
    name, fields, _ = profile(settings)
    if fields.get("api_key"):
        return Chosen(fields["api_key"], f"profile {name}")
    demo = settings.demo_api_key_path
    if demo.exists():
        return Chosen(demo.read_text().strip(), f"the demo key in {demo}")
    return Chosen(None, "")


def gateway_url(settings: MoatSettings) -> Chosen:
    """The gateway a tenant command talks to, and where it came from."""
    if settings.gateway_url:
        return Chosen(settings.gateway_url, "MOAT_GATEWAY_URL")
    name, fields, _ = profile(settings)
    if fields.get("gateway_url"):
        return Chosen(fields["gateway_url"], f"profile {name}")
    return Chosen(settings.local_gateway_url, "the local stack of moat up")


def tenant(settings: MoatSettings) -> Chosen:
    """The tenant an operator command acts on when its command line names none."""
    if (flag := _flag("tenant")) is not None:
        return Chosen(flag, "--tenant")
    if settings.tenant:
        return Chosen(settings.tenant, "MOAT_TENANT")
    name, fields, _ = profile(settings)
    if fields.get("tenant"):
        return Chosen(fields["tenant"], f"profile {name}")
    return Chosen(None, "")


def key_prefix(key: str) -> str:
    """The public start of an API key (``moat_<id>_``): never its secret."""
    parts = key.split("_", 2)
    return f"{parts[0]}_{parts[1]}_" if len(parts) == 3 else "(not a moat_<id>_… key)"


def _remember(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    if value is not None and param.name:
        ctx.meta[f"moat.{param.name}"] = value
    return value


def _who(
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            help="The tenant's API key (else MOAT_API_KEY, the profile's, the demo key).",
            expose_value=False,
            callback=_remember,
            is_eager=True,
        ),
    ] = None,
    tenant: Annotated[
        str | None,
        typer.Option(
            "--tenant",
            help="The tenant (id or name), instead of TENANT (else MOAT_TENANT, the profile's).",
            expose_value=False,
            callback=_remember,
            is_eager=True,
        ),
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile",
            help="The profile to act with (else MOAT_PROFILE, else the one that moat profile "
            "use chose).",
            expose_value=False,
            callback=_remember,
            is_eager=True,
        ),
    ] = None,
) -> None:
    """The options saying who a command acts as (their values land in ``ctx.meta``)."""


@cache
def _options() -> dict[str, Any]:
    """``_who``'s options as click parameters, by name: built once, shared by commands."""
    probe = typer.Typer()
    probe.command()(_who)
    return {p.name: p for p in typer.main.get_command(probe).params}


class _Role(TyperCommand):
    role = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        help = (kwargs.get("help") or "").rstrip()
        kwargs["help"] = f"{help}\n\n{self.role}" if help else self.role
        super().__init__(*args, **kwargs)


class Local(_Role):
    """A command on local files and processes (``--help`` says so)."""

    role = LOCAL


class AsTenant(_Role):
    """A command acting as a tenant, through the gateway: ``--api-key`` and ``--profile``."""

    role = AS_TENANT

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params += [_options()["api_key"], _options()["profile"]]


class AsOperator(_Role):
    """A command acting as the operator on the database: ``--profile``, and ``--tenant``
    beside a TENANT argument, which may then be left out (as with MOAT_TENANT or the
    profile's tenant)."""

    role = AS_OPERATOR

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self._tenant_argument() is not None:
            self.params.append(_options()["tenant"])
        self.params.append(_options()["profile"])

    def _tenant_argument(self) -> TyperArgument | None:
        return next(
            (p for p in self.params if isinstance(p, TyperArgument) and p.name == "tenant"),
            None,
        )

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if self._tenant_argument() is None or ctx.resilient_parsing:
            return super().parse_args(ctx, args)
        args = self._with_tenant(ctx, list(args))
        try:
            return super().parse_args(ctx, args)
        except MissingParameter as exc:
            if ctx.meta.get(TENANT_SOURCE) is not None or exc.param not in self.params:
                raise
            names = " ".join(
                (p.name or "").upper()
                for p in self.params
                if isinstance(p, TyperArgument) and p.required
            )
            raise BadArgumentUsage(
                f"give {names}; the tenant may come from --tenant, MOAT_TENANT or the "
                "profile instead",
                ctx,
            ) from None

    def _with_tenant(self, ctx: Any, args: list[str]) -> list[str]:
        """``args`` with the tenant put first where TENANT was left out; ``ctx.meta`` says
        where the tenant came from (``tenant_source``), unless none was found."""
        flag, given = _scan(self, args)
        arguments = [p for p in self.params if isinstance(p, TyperArgument)]
        required = sum(1 for p in arguments if p.required and p.nargs == 1)
        variadic = any(p.nargs == -1 for p in arguments)
        if flag is not None:
            if given >= required and not variadic:
                raise UsageError("the tenant is given twice: as TENANT and --tenant", ctx)
            ctx.meta[TENANT_SOURCE] = "--tenant"
            return [flag, *args]
        if given < required:
            chosen = tenant(MoatSettings())
            if chosen.value is not None:
                ctx.meta[TENANT_SOURCE] = chosen.source
                return [chosen.value, *args]
            return args
        ctx.meta[TENANT_SOURCE] = "the TENANT argument"
        return args


def _scan(command: TyperCommand, args: list[str]) -> tuple[str | None, int]:
    """The value of ``--tenant`` in ``args``, and how many positional arguments they hold."""
    takes_value = {
        name
        for p in command.params
        if isinstance(p, TyperOption) and not p.is_flag and not p.count
        for name in p.opts
    }
    flag, given, i = None, 0, 0
    while i < len(args):
        token = args[i]
        if token == "--":
            return flag, given + len(args) - i - 1
        name, eq, value = token.partition("=")
        if name == "--tenant":
            flag = value if eq else (args[i + 1] if i + 1 < len(args) else None)
            i += 1 if eq else 2
            continue
        if token.startswith("-") and len(token) > 1:
            i += 2 if name in takes_value and not eq else 1
            continue
        given += 1
        i += 1
    return flag, given
