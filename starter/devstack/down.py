"""``moat down``: stop what ``moat up`` started in a ``$MOAT_HOME``, from another terminal.

The ``moat up`` process (``run/stack.json``) is asked to stop as Ctrl-C would ask it: it
stops its children in order (gateway and worker before the servers they use). Processes
still named in ``run/<name>.pid`` after that (a ``moat up`` killed outright leaves them) are
stopped one by one, in the same order. Nothing running is not an error."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from schemas.settings import MoatSettings
from starter.devstack.ports import STACK_FILE, running_stack
from starter.devstack.processes import pid_alive

# The members of a stack, stopped in this order; PostgreSQL stops fast on SIGINT.
STOP_ORDER = ("gateway", "worker", "providers", "temporal", "postgres")
STOP_SIGNALS = {"postgres": signal.SIGINT}
# Seconds ``moat up`` gets to stop its children (each of which it gives 15 s at most).
UP_GRACE = 90.0
MEMBER_GRACE = 15.0


@dataclass(frozen=True)
class Stopped:
    name: str
    pid: int
    killed: bool = False  # it ignored the signal and was killed


def gone(pid: int) -> bool:
    """Whether ``pid`` has ended (an ended child not yet reaped by its parent counts)."""
    if not pid_alive(pid):
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] == "Z"


def _stop(pid: int, sig: signal.Signals, grace: float) -> bool:
    """Signal ``pid`` and wait up to ``grace`` seconds; SIGKILL after. True if killed."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if gone(pid):
            return False
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def _pid_of(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None


def stop_stack(settings: MoatSettings) -> list[Stopped]:
    """Stop the stack of ``settings.home``; what was stopped, ``moat up`` first."""
    stopped: list[Stopped] = []
    run_dir = settings.run_dir
    up = running_stack(settings)
    if up is not None and not gone(up.pid) and up.pid != os.getpid():
        stopped.append(Stopped("moat up", up.pid, _stop(up.pid, signal.SIGTERM, UP_GRACE)))
    names = {p.stem for p in run_dir.glob("*.pid")} if run_dir.is_dir() else set()
    for name in sorted(names, key=lambda n: (*STOP_ORDER, n).index(n)):
        pidfile = run_dir / f"{name}.pid"
        pid = _pid_of(pidfile)
        if pid is not None and pid != os.getpid() and not gone(pid):
            sig = STOP_SIGNALS.get(name, signal.SIGTERM)
            stopped.append(Stopped(name, pid, _stop(pid, sig, MEMBER_GRACE)))
        pidfile.unlink(missing_ok=True)
    (run_dir / STACK_FILE).unlink(missing_ok=True)
    return stopped
