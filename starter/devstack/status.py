"""What ``moat up`` runs in a home, for ``moat status``: each process (from the pid files in
``$MOAT_HOME/run/``, alive or not), where it answers and on which port, the provider fakes
of ``moat up --fake-providers`` included."""

from __future__ import annotations

from pydantic import BaseModel

from schemas.settings import MoatSettings
from starter.devstack.ports import (
    FAKE_PROVIDERS,
    fake_api_url,
    running_stack,
    with_running_stack,
)
from starter.devstack.processes import pid_alive


class Member(BaseModel):
    """One process of the stack, or one more address of it (the Temporal UI, admin API)."""

    name: str
    pid: int | None
    alive: bool
    url: str | None = None
    port: int | None = None


class StackStatus(BaseModel):
    home: str
    running: bool
    pid: int | None = None
    members: list[Member]


def _pid(settings: MoatSettings, name: str) -> int | None:
    try:
        return int((settings.run_dir / f"{name}.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def stack_status(settings: MoatSettings) -> StackStatus:
    stack = running_stack(settings)
    s = with_running_stack(settings)
    ports = stack.ports if stack else {}
    gateway = f"http://127.0.0.1:{s.gateway_port}"
    addresses: list[tuple[str, str, str | None, int | None]] = [
        ("postgres", "postgres", None, None),
        ("temporal", "temporal", None, None),
        ("worker", "worker", None, None),
        ("gateway", "gateway", gateway, s.gateway_port),
        ("API docs", "gateway", f"{gateway}/docs", s.gateway_port),
        ("console", "gateway", f"{gateway}/console", s.gateway_port),
    ]
    if "database_port" in ports:
        addresses[0] = (
            "postgres", "postgres", f"postgresql://127.0.0.1:{s.database_port}/moat",
            s.database_port,
        )  # fmt: skip
    if "temporal_port" in ports:
        addresses[1] = ("temporal", "temporal", f"127.0.0.1:{s.temporal_port}", s.temporal_port)
        addresses.insert(
            2,
            (
                "Temporal UI", "temporal",
                f"http://127.0.0.1:{s.temporal_ui_port}/namespaces/{s.temporal_namespace}/workflows",
                s.temporal_ui_port,
            ),
        )  # fmt: skip
    if s.admin_port is not None:
        addresses.append(("admin API", "gateway", f"http://127.0.0.1:{s.admin_port}", s.admin_port))
    for name, field in FAKE_PROVIDERS.items():
        if field in ports:
            api = fake_api_url(name, ports[field])
            addresses.append((f"fake {name}", "providers", api, ports[field]))
    members = []
    for name, process, url, port in addresses:
        pid = _pid(settings, process)
        if pid is None and name != process:
            continue
        members.append(
            Member(name=name, pid=pid, alive=pid is not None and pid_alive(pid), url=url, port=port)
        )
    return StackStatus(
        home=str(settings.home.absolute()),
        running=stack is not None,
        pid=stack.pid if stack else None,
        members=[m for m in members if m.pid is not None or stack is not None],
    )
