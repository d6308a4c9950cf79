"""``moat up``: the whole stack on one machine until Ctrl-C or SIGTERM.

Embedded PostgreSQL and Temporal dev server (unless external ones are configured),
migrations, the demo tenant, one worker and the gateway; a worker or gateway that crashes is
restarted with a backoff. State stays under ``$MOAT_HOME``
(data, ``logs/<name>.log``, ``run/<name>.pid``, ``run/stack.json``: the ports), so a second
``moat up`` keeps the data; the provider fakes' ports stay in ``run/fake-providers.json``.
Taken default ports are replaced by free ones (``ports``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import httpx
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from schemas.settings import APP_DATABASE_ROLE, OWNER_DATABASE_ROLE, MoatSettings
from starter.devstack.home import (
    ADMIN_KEY_FILE,
    ensure_admin_key,
    ensure_database_passwords,
    ensure_demo_approver,
    ensure_demo_tenant,
)
from starter.devstack.ports import (
    FAKE_PROVIDERS,
    LISTEN_PORT,
    choose_ports,
    fake_api_url,
    forget,
    remember,
    variable,
    wanted_ports,
)
from starter.devstack.postgres import EmbeddedPostgres
from starter.devstack.processes import (
    ChildProcess,
    Service,
    pid_alive,
    require_free,
)
from starter.devstack.temporal import TemporalDevServer
from starter.runtime.codec_door import current_token
from store import upgrade


class _Stack:
    """What ``moat up`` started, in start order; stopped in reverse, so the gateway and
    worker go before the servers they use."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.members: list[tuple[str, ChildProcess | Service]] = []

    def add(self, name: str, member: ChildProcess | Service) -> None:
        """Track ``member`` before it starts, so an interrupted start is still stopped."""
        self.members.append((name, member))

    def write_pid(self, name: str, pid: int | None) -> None:
        (self.run_dir / f"{name}.pid").write_text(f"{pid}\n")

    def first_dead(self) -> tuple[str, ChildProcess | Service, int] | None:
        for name, member in self.members:
            code = member.poll()
            if code is not None:
                return name, member, code
        return None

    def stop_all(self, console: Console) -> None:
        for name, member in reversed(self.members):
            if member.pid is not None and member.poll() is None:
                console.print(f"stopping {name}…")
            member.stop()
            (self.run_dir / f"{name}.pid").unlink(missing_ok=True)


def run_up(settings: MoatSettings, *, fake_providers: bool = False) -> int:
    """Start everything, print where it is, and supervise until interrupted. Returns the exit
    code: 0 after Ctrl-C/SIGTERM, non-zero when starting fails, a server dies, or a worker or
    gateway keeps crashing.

    ``fake_providers`` also starts the local fakes of Slack, GitHub and a webhook receiver
    (``starter.devstack.providers``) and lets the worker call them, for working offline."""
    console = Console()
    home = settings.home.absolute()
    run_dir, logs = home / "run", home / "logs"
    for folder in (home, run_dir, logs):
        folder.mkdir(parents=True, exist_ok=True)
    for name, pid in _live_pids(run_dir):
        console.print(f"[red]error:[/] {name} already running (pid {pid}); stop it first")
        return 1
    stack = _Stack(run_dir)
    restore = _sigterm_as_interrupt()
    try:
        wanted = wanted_ports(settings, fake_providers=fake_providers)
        ports = choose_ports(settings, fake_providers=fake_providers)
        for field, port in ports.items():
            if port != wanted[field]:
                console.print(
                    f"port {wanted[field]} is taken: using {port} (set {variable(field)} to choose)"
                )
        settings = settings.model_copy(update=ports)
        remember(settings, ports)
        _start(settings, home, stack, console, ports, fake_providers=fake_providers)
        return _supervise(stack, console)
    except KeyboardInterrupt:
        console.print()
        return 0
    except Exception as exc:
        console.print(f"[red]error:[/] {exc}")
        return 1
    finally:
        with _signals_ignored():
            stack.stop_all(console)
            forget(settings)
        restore()


def _start(
    settings: MoatSettings,
    home: Path,
    stack: _Stack,
    console: Console,
    ports: dict[str, int],
    *,
    fake_providers: bool = False,
) -> None:
    logs = home / "logs"
    # The children listen and connect where this process chose.
    env = {"home": str(home), **{field: str(port) for field, port in ports.items()}}
    ui_url = None
    require_free(settings.gateway_port)  # else a stranger could answer our health check
    host = settings.gateway_host if settings.gateway_host not in ("0.0.0.0", "::") else "127.0.0.1"
    gateway_url = f"http://{host}:{settings.gateway_port}"
    env["admin_api_key"] = ensure_admin_key(settings)
    codec_url = f"{gateway_url}/codec/ui/{current_token(settings)}"
    pg = None
    if settings.database_url is None:
        # Every process derives the URLs from the passwords kept in the home, so none of
        # them is in an environment or on a command line.
        passwords = ensure_database_passwords(settings)
        pg = EmbeddedPostgres(home / "postgres", settings.database_port,
                              log_file=logs / "postgres.log",
                              password=passwords[OWNER_DATABASE_ROLE])  # fmt: skip
        stack.add("postgres", pg)
        with _step(console, "starting PostgreSQL"):
            pg.start()
        stack.write_pid("postgres", pg.pid)
    if settings.temporal_address is None:
        temporal = TemporalDevServer(settings.temporal_port, settings.temporal_ui_port,
                                     settings.temporal_namespace, home / "temporal.db",
                                     logs / "temporal.log", codec_url)  # fmt: skip
        if not settings.codec_cors_origins:
            env["codec_cors_origins"] = ",".join(temporal.ui_origins)
        stack.add("temporal", temporal)
        with _step(console, "starting Temporal dev server"):
            env["temporal_address"] = temporal.start()
            temporal.ensure_retention(settings.namespace_retention_hours)
        stack.write_pid("temporal", temporal.pid)
        ui_url = f"{temporal.ui_url}/namespaces/{settings.temporal_namespace}/workflows"
    with _step(console, "migrating the database"):
        upgrade(settings.sqlalchemy_url)
        if pg is not None:  # the migration creates the application role
            pg.set_password(APP_DATABASE_ROLE, passwords[APP_DATABASE_ROLE])
        api_key = ensure_demo_tenant(settings)
        approver_key = ensure_demo_approver(settings)
    fakes: dict[str, int] = {}
    if fake_providers:
        fakes = _start_fakes(settings, stack, console, logs)
    # The fakes and `moat webhook listen` listen on loopback, which the host guard (and the
    # gateway, for a webhook's URL) refuses unless allow-listed.
    loopback = [LISTEN_PORT, *fakes.values()]
    env["http_allow_hosts"] = ",".join(
        [*settings.http_allow_hosts, *(f"127.0.0.1:{port}" for port in loopback)]
    )
    children = {}
    for name in ("worker", "gateway"):
        child = ChildProcess([sys.executable, "-m", "starter.cli", name], logs / f"{name}.log",
                             env=settings.child_environment(**env))  # fmt: skip
        stack.add(name, child)
        child.start()
        stack.write_pid(name, child.pid)
        children[name] = child
    with _step(console, "starting worker and gateway"):
        children["gateway"].wait_ready("gateway", lambda: healthy(gateway_url), timeout=60)
    admin = "MOAT_ADMIN_API_KEY" if settings.admin_api_key else str(home / ADMIN_KEY_FILE)
    # The dev server's UI is given the codec address; an external UI must be told it.
    codec = "the UI decodes payloads through the gateway" if ui_url else codec_url
    console.print(_banner(gateway_url, ui_url, api_key, admin, codec, logs, fakes, approver_key))


def _start_fakes(
    settings: MoatSettings, stack: _Stack, console: Console, logs: Path
) -> dict[str, int]:
    """The provider fakes in a child process of their own, on the ports chosen for them;
    their ports by name."""
    ports = {name: getattr(settings, field) for name, field in FAKE_PROVIDERS.items()}
    args = [f"--{name}={port}" for name, port in ports.items()]
    child = ChildProcess([sys.executable, "-m", "starter.devstack.providers", *args],
                         logs / "providers.log", env=settings.child_environment())  # fmt: skip
    stack.add("providers", child)
    child.start()
    stack.write_pid("providers", child.pid)
    urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    with _step(console, "starting the provider fakes"):
        child.wait_ready("provider fakes", lambda: all(map(_answers, urls.values())), timeout=30)
    return ports


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/_fake/state", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _supervise(stack: _Stack, console: Console) -> int:
    """Wait for Ctrl-C. A worker or gateway that ends on its own is started again after a
    backoff, and the restart is logged; the servers hold the data, so if one of them ends,
    or a child keeps crashing, the stack stops and says which and where its log is."""
    backoffs: dict[str, Backoff] = {}
    while True:
        dead = stack.first_dead()
        if dead is None:
            time.sleep(0.5)
            continue
        name, member, code = dead
        backoff = backoffs.setdefault(name, Backoff())
        delay = backoff.next_delay(time.monotonic())
        if name not in RESTARTED or not isinstance(member, ChildProcess) or delay is None:
            console.print(f"[red]error:[/] {name} exited unexpectedly (code {code})")
            if delay is None:
                console.print(f"  it crashed {backoff.attempt} times in a row; not restarted")
            console.print(f"  log: {member.log_file}", soft_wrap=True)
            return 1
        notice = (
            f"{name} exited unexpectedly (code {code}); restarting it in {delay:.1f} s "
            f"(restart {backoff.attempt} in a row)"
        )
        console.print(f"[yellow]warning:[/] {notice}")
        console.print(f"  log: {member.log_file}", soft_wrap=True)
        _note(member, notice)
        time.sleep(delay)
        member.start()
        stack.write_pid(name, member.pid)


# The children that hold no state: restarting them is always safe.
RESTARTED = frozenset({"worker", "gateway"})


class Backoff:
    """Restart delays for one child: doubling from ``first`` up to ``longest``; a child that
    then stays up ``steady`` seconds has recovered and starts again from ``first``; after
    ``give_up`` crashes in a row it is left down (a config error will not heal itself)."""

    def __init__(
        self, first: float = 0.5, longest: float = 30.0, steady: float = 60.0, give_up: int = 8
    ) -> None:
        self.first, self.longest, self.steady, self.give_up = first, longest, steady, give_up
        self.attempt = 0
        self._restarted_at: float | None = None

    def next_delay(self, now: float) -> float | None:
        """The wait before the next restart; None once the child should stay down."""
        if self._restarted_at is not None and now - self._restarted_at >= self.steady:
            self.attempt = 0
        if self.attempt >= self.give_up:
            return None
        delay = min(self.first * 2.0**self.attempt, self.longest)
        self.attempt += 1
        self._restarted_at = now + delay
        return delay


def _note(child: ChildProcess, notice: str) -> None:
    """The restart in the child's own log too, where whoever reads why it crashed looks."""
    if child.log_file is not None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with child.log_file.open("a") as log:
            log.write(f"{stamp} moat up: {notice}\n")


def _banner(
    gateway_url: str,
    ui_url: str | None,
    api_key: str,
    admin: str,
    codec: str,
    logs: Path,
    fakes: dict[str, int] | None = None,
    approver_key: str = "",
) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_row("gateway", gateway_url)
    grid.add_row("API docs", f"{gateway_url}/docs")
    grid.add_row("console", f"{gateway_url}/console")
    if ui_url:
        grid.add_row("Temporal UI", ui_url)
    grid.add_row("payload codec", codec)
    grid.add_row("demo API key", api_key)
    if approver_key:
        grid.add_row("demo approver key", f"{approver_key} (sign in to the console with it)")
    grid.add_row("admin key", admin)
    grid.add_row("try", 'moat execute demo.echo --input \'{"hello":"world"}\'')
    for name, port in (fakes or {}).items():
        grid.add_row(f"fake {name}", fake_api_url(name, port))
    grid.add_row("logs", str(logs))
    return Panel(grid, title="Moat is up", subtitle="Ctrl-C to stop", expand=False)


def healthy(base_url: str) -> bool:
    """Whether a gateway answers its health check at ``base_url``."""
    try:
        return httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _live_pids(run_dir: Path) -> list[tuple[str, int]]:
    """Processes a previous ``moat up`` on this home left running; stale files are removed."""
    live = []
    for pidfile in sorted(run_dir.glob("*.pid")):
        try:
            pid = int(pidfile.read_text().strip())
        except ValueError:
            pid = None
        if pid is None or not pid_alive(pid):
            pidfile.unlink(missing_ok=True)
            continue
        if pid != os.getpid():
            live.append((pidfile.stem, pid))
    return live


@contextlib.contextmanager
def _step(console: Console, what: str) -> Iterator[None]:
    console.print(f"{what}…", end=" ")
    started = time.monotonic()
    try:
        yield
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]")
        raise
    except BaseException:
        console.print("[red]failed[/]")
        raise
    console.print(f"[green]ok[/] ({time.monotonic() - started:.1f} s)")


def _sigterm_as_interrupt() -> Callable[[], None]:
    """Make SIGTERM stop the stack the way Ctrl-C does; returns the undo."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    return restore


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """A second Ctrl-C must not cut the orderly stop short (each stop is time-bounded)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
