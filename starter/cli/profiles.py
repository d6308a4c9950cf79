"""``moat profile``: named sets of who the CLI acts as (an API key, a tenant, a gateway),
kept in ``$MOAT_HOME/profiles.toml`` (mode 0600: it holds key secrets); and ``moat whoami``,
which says who a command would act as and where each part of that came from."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from schemas.settings import MoatSettings
from starter.cli import identity
from starter.cli.identity import Local
from starter.cli.output import AsJson, out, print_json, usage
from starter.cli.tenant_api import call

profile_app = typer.Typer(
    no_args_is_help=True, help="Profiles: who the CLI acts as (key, tenant, gateway)."
)

ProfileName = Annotated[str, typer.Argument(help="The profile's name (letters, digits, - _).")]


def _settings() -> MoatSettings:
    from starter.devstack.ports import local_settings

    return local_settings()


def _named(data: dict[str, Any], name: str) -> dict[str, str]:
    fields = data["profiles"].get(name)
    if fields is None:
        raise usage(f"no profile {name!r}", "see `moat profile list`", code="profile_not_found")
    return dict(fields)


@profile_app.command("set", cls=Local)
def set_(
    name: ProfileName,
    api_key: Annotated[
        str | None, typer.Option("--api-key", help="The tenant's API key (moat_<id>_<secret>).")
    ] = None,
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="The tenant operator commands act on.")
    ] = None,
    gateway_url: Annotated[
        str | None, typer.Option("--gateway-url", help="The gateway tenant commands call.")
    ] = None,
    use: Annotated[bool, typer.Option("--use", help="Make it the profile in use.")] = False,
) -> None:
    """Create a profile, or change the fields given; the first profile is put in use."""
    if not identity.PROFILE_NAME.match(name):
        raise usage(f"{name!r} is not a profile name", "use letters, digits, - and _")
    settings = _settings()
    data = identity.read_profiles(settings)
    fields = dict(data["profiles"].get(name, {}))
    given = {"api_key": api_key, "tenant": tenant, "gateway_url": gateway_url}
    fields.update({k: v for k, v in given.items() if v is not None})
    data["profiles"][name] = fields
    if use or not data["current"]:
        data["current"] = name
    path = identity.write_profiles(settings, data)
    current = " (in use)" if data["current"] == name else ""
    out.print(f"profile {name}{current} saved in {path}", soft_wrap=True)


@profile_app.command("use", cls=Local)
def use(name: ProfileName) -> None:
    """Act with this profile from now on (MOAT_PROFILE and --profile still come first)."""
    settings = _settings()
    data = identity.read_profiles(settings)
    _named(data, name)
    data["current"] = name
    identity.write_profiles(settings, data)
    out.print(f"profile {name} in use")


@profile_app.command("remove", cls=Local)
def remove(name: ProfileName) -> None:
    """Forget a profile (and its key secret)."""
    settings = _settings()
    data = identity.read_profiles(settings)
    _named(data, name)
    del data["profiles"][name]
    if data["current"] == name:
        data["current"] = None
    identity.write_profiles(settings, data)
    out.print(f"profile {name} removed")


@profile_app.command("list", cls=Local)
def list_(as_json: AsJson = False) -> None:
    """The profiles (keys by their public prefix, never their secret)."""
    data = identity.read_profiles(_settings())
    rows = [
        {
            "name": name,
            "in_use": name == data["current"],
            "key_prefix": identity.key_prefix(f["api_key"]) if f.get("api_key") else None,
            "tenant": f.get("tenant"),
            "gateway_url": f.get("gateway_url"),
        }
        for name, f in sorted(data["profiles"].items())
    ]
    if as_json:
        print_json(rows)
        return
    if not rows:
        out.print("no profiles; create one with `moat profile set NAME --api-key KEY`")
        return
    table = Table("", "name", "key", "tenant", "gateway")
    for row in rows:
        table.add_row(
            "*" if row["in_use"] else "",
            row["name"],
            row["key_prefix"] or "",
            row["tenant"] or "",
            row["gateway_url"] or "",
        )
    out.print(table)


def whoami(as_json: AsJson = False) -> None:
    """Who tenant commands act as: the gateway, the API key (its id, never its secret), its
    tenant (id and name) and scopes, as the gateway knows them; and the tenant operator
    commands act on. Each with where it came from."""
    settings = _settings()
    name, _, profile_source = identity.profile(settings)
    gateway = identity.gateway_url(settings)
    key = identity.api_key(settings)
    tenant = identity.tenant(settings)
    known = call(settings, "GET", "/v1/whoami")
    report = {
        "profile": {"value": name, "source": profile_source or None},
        "gateway_url": {"value": gateway.value, "source": gateway.source},
        "key_id": {"value": known["key_id"], "source": key.source},
        "key_prefix": known["key_prefix"],
        "tenant_id": known["tenant_id"],
        "tenant_name": known["tenant_name"],
        "scopes": known["scopes"],
        "operator_tenant": {"value": tenant.value, "source": tenant.source or None},
    }
    if as_json:
        print_json(report)
        return
    rows = [
        ("gateway", gateway.value or "", gateway.source),
        ("api key", f"{known['key_prefix']}…", key.source),
        ("tenant", f"{known['tenant_id']} ({known['tenant_name']})", "the key's"),
        ("scopes", " ".join(known["scopes"]), "the key's"),
    ]
    if name:
        rows.append(("profile", name, profile_source))
    if tenant.value:
        rows.append(("operator tenant", tenant.value, tenant.source))
    # One line a value, whole (ids and URLs are copied from here), where it came from after.
    label = max(len(row[0]) for row in rows)
    for what, value, source in rows:
        out.print(f"{what:<{label}}  {value}  [dim]({escape(source)})[/]", soft_wrap=True)
