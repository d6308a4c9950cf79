"""A proxy in front of the gateway that misbehaves on cue, one request per connection.

Each request takes the next action of ``plan`` (then ``default``): ``pass`` forwards it;
``drop`` closes the connection before forwarding (the request never reached Moat);
``lose_answer`` forwards it and closes without answering (it did reach Moat); ``stall``
holds the connection without answering until the client gives up; ``503`` answers a
busy gateway's ``503`` with ``Retry-After: 0``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 0\r\nContent-Length: 0\r\n"
    b"Connection: close\r\n\r\n"
)


@dataclass
class Seen:
    action: str
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class FlakyProxy:
    upstream: str
    plan: list[str] = field(default_factory=list)
    default: str = "pass"
    seen: list[Seen] = field(default_factory=list)
    url: str = ""

    def posts(self) -> list[Seen]:
        return [s for s in self.seen if s.method == "POST"]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {
                name.strip().lower(): value.strip()
                for name, _, value in (line.partition(":") for line in lines[1:] if line)
            }
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            action = self.plan.pop(0) if self.plan else self.default
            self.seen.append(Seen(action, method, path, headers))
            if action == "drop":
                return
            if action == "503":
                writer.write(BUSY)
                await writer.drain()
                return
            if action == "stall":
                await reader.read()  # until the client hangs up
                return
            answer = await self._forward(lines, body)
            if action == "lose_answer":
                return
            writer.write(answer)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _forward(self, lines: list[str], body: bytes) -> bytes:
        target = urlsplit(self.upstream)
        kept = [
            line
            for line in lines[1:]
            if line and line.split(":", 1)[0].strip().lower() != "connection"
        ]
        request = "\r\n".join([lines[0], *kept, "Connection: close", "", ""]).encode("latin-1")
        reader, writer = await asyncio.open_connection(target.hostname, target.port)
        writer.write(request + body)
        await writer.drain()
        answer = await reader.read()
        writer.close()
        head, _, rest = answer.partition(b"\r\n\r\n")
        kept_head = [
            line for line in head.split(b"\r\n") if not line.lower().startswith(b"connection:")
        ]
        return b"\r\n".join([*kept_head, b"Connection: close"]) + b"\r\n\r\n" + rest


@asynccontextmanager
async def flaky_proxy(upstream: str) -> AsyncIterator[FlakyProxy]:
    proxy = FlakyProxy(upstream)
    server = await asyncio.start_server(proxy._handle, "127.0.0.1", 0)
    proxy.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server:
        yield proxy
        server.close()
