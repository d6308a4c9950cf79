"""The ports of ``moat up``, so two stacks can run on one machine: a default that is taken
is replaced by a free port; a port the user set is theirs, and a taken one is refused with
the ``MOAT_*`` variable to change. The choice is remembered in ``$MOAT_HOME/run/`` for the
commands run in that home (``moat execute``, ``moat codec url``, ``moat status``…).

The provider fakes' ports are also kept after the stack stops (``fake-providers.json``):
connections made to a fake name its address, so the next ``moat up`` listens there again."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from schemas.settings import MoatSettings
from starter.devstack.processes import pid_alive

STACK_FILE = "stack.json"
FAKES_FILE = "fake-providers.json"
# The provider fakes of ``moat up --fake-providers``: name -> the settings field of its port.
FAKE_PROVIDERS = {
    "slack": "fake_slack_port",
    "github": "fake_github_port",
    "webhook": "fake_webhook_port",
    "notion": "fake_notion_port",
}
# Where ``moat webhook listen`` receives deliveries by default; ``moat up`` allows it.
LISTEN_PORT = 8799
# Where a fake's API lives under its root, for a connection's ``base_url``.
FAKE_API_PATHS = {"slack": "/api", "notion": "/v1"}
# How far above a taken default to look for a free port, before asking the system for one:
# nearby ports are easier to read and to remember.
NEARBY = 20


class PortTaken(RuntimeError):
    """A port the user set is in use."""


class RunningStack(BaseModel):
    """What a running ``moat up`` remembers in ``$MOAT_HOME/run/``: its own pid and the
    ports it listens on, by settings field."""

    pid: int
    ports: dict[str, int]


def variable(field: str) -> str:
    return f"MOAT_{field.upper()}"


def _listened(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def free_or_next(field: str, port: int, *, explicit: bool, taken: set[int]) -> int:
    """``port`` if free; else, for a default, a free port near it (none of ``taken``, the
    ports already chosen); for a port the user set, ``PortTaken`` naming its variable."""
    if not _listened(port) and port not in taken:
        return port
    if explicit:
        raise PortTaken(
            f"port {port} ({variable(field)}) is already in use: set {variable(field)} "
            "to a free port"
        )
    for candidate in range(port + 1, min(port + 1 + NEARBY, 65536)):
        if candidate not in taken and not _listened(candidate):
            return candidate
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            candidate = int(sock.getsockname()[1])
        if candidate not in taken:
            return candidate


def stack_ports(settings: MoatSettings) -> dict[str, int]:
    """The ports ``moat up`` would listen on with these settings, by field."""
    ports = {"gateway_port": settings.gateway_port}
    if settings.admin_port is not None:
        ports["admin_port"] = settings.admin_port
    if settings.database_url is None:
        ports["database_port"] = settings.database_port
    if settings.temporal_address is None:
        ports["temporal_port"] = settings.temporal_port
        ports["temporal_ui_port"] = settings.temporal_ui_port
    return ports


def fake_api_url(name: str, port: int) -> str:
    """The address a connection to the fake ``name`` on ``port`` uses as its base URL."""
    return f"http://127.0.0.1:{port}{FAKE_API_PATHS.get(name, '')}"


def _fakes_file(settings: MoatSettings) -> Path:
    return settings.run_dir / FAKES_FILE


def _kept_fake_ports(settings: MoatSettings) -> dict[str, int]:
    try:
        kept = json.loads(_fakes_file(settings).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(kept, dict):
        return {}
    fields = FAKE_PROVIDERS.values()
    return {f: p for f, p in kept.items() if f in fields and isinstance(p, int) and 0 < p < 65536}


def wanted_ports(settings: MoatSettings, *, fake_providers: bool = False) -> dict[str, int]:
    """The port ``moat up`` asks for each server, by field: ``stack_ports``, and with the
    fakes each fake's port as set, else as the last ``moat up`` in this home chose it."""
    ports = stack_ports(settings)
    if fake_providers:
        kept = _kept_fake_ports(settings)
        for field in FAKE_PROVIDERS.values():
            setting = getattr(settings, field)
            ports[field] = (
                setting if field in settings.model_fields_set else kept.get(field, setting)
            )
    return ports


def choose_ports(settings: MoatSettings, *, fake_providers: bool = False) -> dict[str, int]:
    """The ports for ``moat up``: each one free, the ones the user set unchanged."""
    chosen: dict[str, int] = {}
    for field, port in wanted_ports(settings, fake_providers=fake_providers).items():
        explicit = field in settings.model_fields_set
        chosen[field] = free_or_next(field, port, explicit=explicit, taken=set(chosen.values()))
    return chosen


def _stack_file(settings: MoatSettings) -> Path:
    return settings.run_dir / STACK_FILE


def remember(settings: MoatSettings, ports: dict[str, int]) -> None:
    """Note this process's stack and its ports for the commands run in the same home."""
    path = _stack_file(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(RunningStack(pid=os.getpid(), ports=ports).model_dump_json() + "\n")
    fakes = {f: p for f, p in ports.items() if f in FAKE_PROVIDERS.values()}
    if fakes:
        _fakes_file(settings).write_text(json.dumps(fakes) + "\n")


def forget(settings: MoatSettings) -> None:
    """The stack stopped: its ports are free again (the fakes' stay kept for the next)."""
    _stack_file(settings).unlink(missing_ok=True)


def running_stack(settings: MoatSettings) -> RunningStack | None:
    """The stack a live ``moat up`` runs in this home, if any."""
    try:
        stack = RunningStack.model_validate_json(_stack_file(settings).read_text())
    except (OSError, ValueError):
        return None
    return stack if pid_alive(stack.pid) else None


def with_running_stack(settings: MoatSettings) -> MoatSettings:
    """``settings`` with the ports of the stack running in its home, except those the
    user set: the commands then reach the stack wherever ``moat up`` put it."""
    stack = running_stack(settings)
    if stack is None:
        return settings
    update: dict[str, Any] = {
        field: port
        for field, port in stack.ports.items()
        if field in MoatSettings.model_fields and field not in settings.model_fields_set
    }
    return settings.model_copy(update=update) if update else settings


def local_settings() -> MoatSettings:
    """The settings of a command run beside ``moat up``: the configured ones, on the ports
    of the stack running in ``$MOAT_HOME``."""
    return with_running_stack(MoatSettings())
