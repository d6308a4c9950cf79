"""``moat webhook listen``: the tenant's signed deliveries on a developer's machine, as the
Stripe CLI's ``listen`` does. A temporary webhook points at a listener this command opens on
loopback; each delivery's signature is verified (Standard Webhooks: HMAC-SHA256 of
``id.timestamp.body`` with the secret the gateway gave this webhook), a line says what came,
and the body and its ``webhook-*`` headers are forwarded to the developer's URL, whose
status is printed and given back to Moat (so a failing endpoint is retried as it would be
in production). The webhook is removed on Ctrl-C, SIGTERM or any other exit."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
from rich.markup import escape

from schemas.settings import MoatSettings
from starter.cli.output import out
from starter.cli.tenant_api import call
from starter.devstack.ports import LISTEN_PORT
from starter.runtime import links

# Standard Webhooks: a receiver refuses a timestamp further than this from its clock.
TOLERANCE_SECONDS = 300
SIGNED_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")
EVENTS = (
    "execution.completed",
    "execution.failed",
    "execution.dead_lettered",
    "approval.requested",
    "approval.decided",
)


def signature_valid(secret: str, headers: dict[str, str], body: bytes, now: float) -> str | None:
    """Why a delivery is not Moat's, or None when one of its signatures verifies."""
    webhook_id = headers.get("webhook-id", "")
    stamp = headers.get("webhook-timestamp", "")
    if not webhook_id or not stamp.isdigit():
        return "webhook-id or webhook-timestamp missing"
    if abs(now - int(stamp)) > TOLERANCE_SECONDS:
        return f"timestamp {stamp} is more than {TOLERANCE_SECONDS} s from this clock"
    try:
        key = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except binascii.Error:
        return "the webhook's secret is not base64"
    signed = f"{webhook_id}.{stamp}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    for given in headers.get("webhook-signature", "").split():
        version, _, value = given.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            return None
    return "no signature verifies with this webhook's secret"


@dataclass
class Relay:
    """What each delivery is checked with and sent on to."""

    secret: str
    forward_to: str | None
    client: httpx.Client
    lock: threading.Lock

    def handle(self, headers: dict[str, str], body: bytes) -> int:
        """Verify, print and forward one delivery; the status to answer Moat with."""
        problem = signature_valid(self.secret, headers, body, time.time())
        try:
            event = json.loads(body).get("type", "?")
        except (ValueError, AttributeError):
            event = "?"
        said = (
            f"{time.strftime('%H:%M:%S')}  {escape(str(event))}  {headers.get('webhook-id', '-')}"
        )
        if problem is not None:
            self._say(f"{said}  [red]signature invalid[/]: {escape(problem)} (not forwarded)")
            return 400
        if self.forward_to is None:
            self._say(f"{said}  [green]signature ok[/]")
            return 200
        status = self._forward(headers, body)
        shown = f"[green]{status}[/]" if 200 <= status < 300 else f"[red]{status or 'no answer'}[/]"
        self._say(f"{said}  [green]signature ok[/]  → {escape(self.forward_to)} {shown}")
        return status or 502

    def _forward(self, headers: dict[str, str], body: bytes) -> int:
        sent = {name: headers[name] for name in SIGNED_HEADERS if name in headers}
        sent["content-type"] = headers.get("content-type", "application/json")
        try:
            assert self.forward_to is not None
            return self.client.post(self.forward_to, content=body, headers=sent).status_code
        except httpx.HTTPError:
            return 0

    def _say(self, line: str) -> None:
        with self.lock:
            out.print(line, soft_wrap=True, highlight=False)


def _handler(relay: Relay) -> type[BaseHTTPRequestHandler]:
    class Delivery(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length)
            headers = {name.lower(): value for name, value in self.headers.items()}
            status = relay.handle(headers, body)
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            """Each delivery is its own line already."""

    return Delivery


@contextmanager
def _listening(host: str, port: int, relay: Relay) -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer((host, port), _handler(relay))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _stop_on_sigterm() -> None:
    """SIGTERM ends the wait as Ctrl-C does, so the webhook is removed either way."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)


def refused_hint(host: str, port: int) -> str:
    """What lets the gateway (and the worker) send webhooks to this listener."""
    return (
        f"webhooks go to a loopback address only where it is allowed: moat up allows "
        f"127.0.0.1:{LISTEN_PORT} (this command's default --port); elsewhere run the gateway "
        f"and worker with MOAT_HTTP_ALLOW_HOSTS={host}:{port}, or have an operator add "
        f"{host}:{port} to the tenant's list (moat tenant allow-hosts)"
    )


def listen(
    settings: MoatSettings,
    *,
    forward_to: str | None,
    events: list[str],
    host: str,
    port: int,
) -> None:
    """Register, receive until interrupted, then remove the webhook."""
    relay = Relay("", forward_to, httpx.Client(timeout=30), threading.Lock())
    _stop_on_sigterm()
    with relay.client, _listening(host, port, relay) as server:
        url = f"http://{host}:{server.server_address[1]}/"
        hook = _register(settings, url, events, host, server.server_address[1])
        relay.secret = hook["secret"]
        try:
            out.print(
                f"listening on {url} for {', '.join(events)} (webhook {hook['id']})"
                + (f", forwarding to {escape(forward_to)}" if forward_to else ""),
                soft_wrap=True,
                highlight=False,
            )
            out.print("[dim]Ctrl-C to stop and remove the webhook[/]")
            while True:
                time.sleep(0.2)
        except KeyboardInterrupt:
            pass
        finally:
            call(settings, "DELETE", links.path("v1", "webhooks", hook["id"]))
            out.print(f"removed webhook {hook['id']}", highlight=False)


def _register(
    settings: MoatSettings, url: str, events: list[str], host: str, port: int
) -> dict[str, Any]:
    """The temporary webhook (its id and secret); a refused loopback URL says what allows it."""
    body = {"url": url, "events": events, "max_retries": 3, "retry_base_seconds": 1.0}
    hints = {"webhook_url_not_allowed": refused_hint(host, port)}
    created: dict[str, Any] = call(settings, "POST", "/v1/webhooks", body, hints=hints)
    return created
