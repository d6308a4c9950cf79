"""Child processes for ``moat up`` and the embedded servers: output to a log file, a
readiness wait that fails fast with the log tail, and an ordered, bounded stop; and an
ASGI app served in-process (tests, benchmarks)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

_T = TypeVar("_T")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def require_free(*ports: int) -> None:
    """Fail clearly when something already listens on one of ``ports`` of 127.0.0.1; otherwise
    a readiness probe could be answered by that stranger while our server fails to bind."""
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                raise RuntimeError(f"port {port} on 127.0.0.1 is already in use") from None


def run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine to completion from sync code, even when the caller's thread has a loop
    running (pytest-asyncio). A daemon thread, so an interrupted wait never blocks exit."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


class ChildProcess:
    """A child whose output goes to a log file, stopped with a signal then SIGKILL.

    It runs in its own session, so a Ctrl-C in the terminal reaches only its parent, which
    then stops the children in order (gateway and worker before the servers they use).
    """

    def __init__(
        self,
        argv: Sequence[str],
        log_file: Path | None,
        *,
        env: dict[str, str] | None = None,
        stop_signal: signal.Signals = signal.SIGTERM,
        stop_timeout: float = 15.0,
        user: int | None = None,
        group: int | None = None,
    ) -> None:
        self.argv, self.log_file, self.env = list(argv), log_file, env
        self.stop_signal, self.stop_timeout = stop_signal, stop_timeout
        self.user, self.group = user, group
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        out: Any = subprocess.DEVNULL
        if self.log_file is not None:
            self.log_file.parent.mkdir(parents=True, exist_ok=True)
            out = self.log_file.open("ab")
        try:
            self._proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=self.env, start_new_session=True, user=self.user, group=self.group,
                extra_groups=[] if self.group is not None else None,
            )  # fmt: skip
        finally:
            if out is not subprocess.DEVNULL:
                out.close()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def poll(self) -> int | None:
        """The exit code once the child has ended, else ``None``."""
        return self._proc.poll() if self._proc else None

    def stop(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.send_signal(self.stop_signal)
        try:
            self._proc.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def log_tail(self, lines: int = 25) -> str:
        if self.log_file is None or not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    def wait_ready(self, what: str, check: Callable[[], bool], timeout: float) -> None:
        """Call ``check`` until it holds; fail early, with the log tail, if the child exits."""
        deadline = time.monotonic() + timeout
        while not check():
            code = self.poll()
            if code is not None or time.monotonic() > deadline:
                state = f"exited with {code}" if code is not None else f"not ready in {timeout:g}s"
                raise RuntimeError(f"{what} {state}; log {self.log_file}:\n{self.log_tail()}")
            time.sleep(0.1)


class Service:
    """A server owning one ``ChildProcess``: pid, liveness, stop, context-manager use."""

    _child: ChildProcess | None = None
    log_file: Path | None = None

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child else None

    def poll(self) -> int | None:
        """The exit code once the server has ended, else ``None`` (also before ``start``)."""
        return self._child.poll() if self._child else None

    def start(self) -> str:
        raise NotImplementedError

    def stop(self) -> None:
        if self._child is not None:
            self._child.stop()
            self._child = None

    @contextlib.contextmanager
    def _stop_on_error(self) -> Iterator[None]:
        """A half-started server (timeout, Ctrl-C) must not outlive the failed start."""
        try:
            yield
        except BaseException:
            self.stop()
            raise

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@asynccontextmanager
async def serve_asgi(app: Any, *, graceful_shutdown: int = 1) -> AsyncIterator[str]:
    """Serve an ASGI app with uvicorn on a free loopback port, in this event loop; yields
    its base URL. It stops as soon as it is left (``_PromptServer``)."""
    port = free_port()
    server = _prompt_server(
        app,
        host="127.0.0.1",
        port=port,
        log_level="error",
        lifespan="on",
        timeout_graceful_shutdown=graceful_shutdown,
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("uvicorn stopped before it started")
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.exit()
        await task


def _prompt_server(app: Any, **config: Any) -> Any:
    """A uvicorn server that stops when told to, not at its next 0.1 s tick, and skips the
    0.1 s it gives open connections to finish when there are none: a test stack starts and
    stops two of them, so the two waits were a quarter of a second per test."""
    import uvicorn  # the server loads with the first app served, not with the stack's helpers

    class _PromptServer(uvicorn.Server):
        def __init__(self, config: uvicorn.Config) -> None:
            super().__init__(config)
            self._told = asyncio.Event()

        def exit(self) -> None:
            self.should_exit = True
            self._told.set()

        async def main_loop(self) -> None:
            # uvicorn's ticks: ten a second, the date header refreshed on every tenth.
            counter = 0
            while not await self.on_tick(counter):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._told.wait(), timeout=1.0)
                counter += 10

        async def shutdown(self, sockets: list[Any] | None = None) -> None:
            if self.server_state.connections:
                await super().shutdown(sockets)
                return
            for server in self.servers:
                server.close()
            for server in self.servers:
                await server.wait_closed()
            if not self.force_exit:
                await self.lifespan.shutdown()

    return _PromptServer(uvicorn.Config(app, **config))
