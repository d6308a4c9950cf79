"""The HTTP server under the provider fakes: plain asyncio streams, so that a fake can do
what a web framework will not, namely perform a call's effect and then fail to answer (drop
the connection, or answer only after the caller has given up).

A fake runs on its own thread and event loop (``start``/``stop``, or ``with``), so tests
and ``moat up --fake-providers`` use it alike. Every fake answers ``/_fake/…`` control
routes: ``POST /_fake/fail-next {"count", "mode": "drop"|"late", "late_seconds"}``,
``GET /_fake/state`` (what it holds), ``POST /_fake/reset``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from enum import StrEnum
from http import HTTPStatus
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qsl, urlsplit

MAX_BODY = 4 * 1024 * 1024


class Misbehaviour(StrEnum):
    DROP = "drop"  # close the connection without a word
    LATE = "late"  # answer after ``late_seconds`` (past the caller's timeout)


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # names lower-cased
    body: bytes
    # ``time.monotonic()`` when the request was read (when a retry came, in tests).
    at: float = field(default_factory=time.monotonic)

    def json(self) -> Any:
        try:
            return json.loads(self.body) if self.body else None
        except ValueError:
            return None

    def params(self) -> dict[str, Any]:
        """Arguments from the query string, a form body or a JSON body, as the provider takes
        them."""
        out: dict[str, Any] = dict(self.query)
        kind = self.headers.get("content-type", "")
        if kind.startswith("application/x-www-form-urlencoded"):
            out.update(parse_qsl(self.body.decode("utf-8", "replace")))
        elif self.body:
            value = self.json()
            if isinstance(value, dict):
                out.update(value)
        return out

    def bearer(self) -> str | None:
        auth = self.headers.get("authorization", "")
        scheme, _, token = auth.partition(" ")
        return token.strip() if scheme.lower() in ("bearer", "token") and token else None


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    # Set by ``FakeServer.acted``: the effect happened; now fail to answer this way.
    misbehave: Misbehaviour | None = None


class FakeServer:
    """A provider fake. Subclasses implement ``handle`` and call ``acted`` on the reply of a
    call that performed an effect, so a scheduled misbehaviour applies to it."""

    name = "fake"

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.base_url = ""
        self.late_seconds = 30.0
        self._fail_next = 0
        self._mode = Misbehaviour.DROP
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self.requests: list[Request] = []

    # --- what tests (and the control routes) set ---------------------------------------

    def fail_next(
        self,
        count: int = 1,
        mode: Misbehaviour = Misbehaviour.DROP,
        late_seconds: float | None = None,
    ) -> None:
        """The next ``count`` calls that perform an effect do it, then fail to answer."""
        with self.lock:
            self._fail_next = count
            self._mode = Misbehaviour(mode)
            if late_seconds is not None:
                self.late_seconds = late_seconds

    def acted(self, reply: Reply) -> Reply:
        with self.lock:
            if self._fail_next > 0:
                self._fail_next -= 1
                reply.misbehave = self._mode
        return reply

    def reset(self) -> None:
        with self.lock:
            self._fail_next = 0
            self.requests.clear()

    def state(self) -> dict[str, Any]:
        return {}

    async def handle(self, request: Request) -> Reply:
        raise NotImplementedError

    def calls(self, path_suffix: str) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.path.endswith(path_suffix)]

    # --- serving ------------------------------------------------------------------------

    @property
    def allow_entry(self) -> str:
        """The host-guard entry that admits this fake (``127.0.0.1:port``)."""
        return urlsplit(self.base_url).netloc

    def start(self, port: int = 0, host: str = "127.0.0.1") -> str:
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._connection, host, port)
                )
                bound = self._server.sockets[0].getsockname()[1]
                self.base_url = f"http://{host}:{bound}"
            except BaseException as err:  # reported to the starting thread
                failure.append(err)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            self._server.close()
            # Connections still open (a late answer's wait) end with the fake.
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

        self._thread = threading.Thread(target=run, name=f"fake-{self.name}", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        return self.base_url

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._loop = self._thread = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                with self.lock:
                    self.requests.append(request)
                reply = await self._route(request)
                if reply.misbehave == Misbehaviour.DROP:
                    return
                if reply.misbehave == Misbehaviour.LATE:
                    await asyncio.sleep(self.late_seconds)
                writer.write(_encode(reply))
                await writer.drain()
                if request.headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        except asyncio.CancelledError:
            # The fake is stopping: end quietly (asyncio reports a cancelled connection task
            # as an error otherwise).
            return
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _route(self, request: Request) -> Reply:
        if request.path == "/_fake/fail-next" and request.method == "POST":
            args = request.json() or {}
            self.fail_next(
                int(args.get("count", 1)),
                Misbehaviour(args.get("mode", "drop")),
                args.get("late_seconds"),
            )
            return Reply(200, {"ok": True})
        if request.path == "/_fake/state":
            with self.lock:
                return Reply(200, self.state())
        if request.path == "/_fake/reset" and request.method == "POST":
            self.reset()
            return Reply(200, {"ok": True})
        try:
            return await self.handle(request)
        except Exception:  # a fake's bug: answered like a provider's
            return Reply(500, {"message": "fake provider failed"})


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    line = await reader.readline()
    if not line:
        return None
    method, target, _ = line.decode("latin-1").split(" ", 2)
    headers: dict[str, str] = {}
    while True:
        raw = await reader.readline()
        if raw in (b"\r\n", b"\n", b""):
            break
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length") or 0)
    if length > MAX_BODY:
        raise ValueError("body too large")
    body = await reader.readexactly(length) if length else b""
    parts = urlsplit(target)
    return Request(method.upper(), parts.path, dict(parse_qsl(parts.query)), headers, body)


def _encode(reply: Reply) -> bytes:
    body = b"" if reply.body is None else json.dumps(reply.body).encode()
    try:
        reason = HTTPStatus(reply.status).phrase
    except ValueError:
        reason = "Unknown"
    head = [f"HTTP/1.1 {reply.status} {reason}"]
    headers = {"Content-Type": "application/json; charset=utf-8", **reply.headers}
    headers["Content-Length"] = str(len(body))
    head += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
