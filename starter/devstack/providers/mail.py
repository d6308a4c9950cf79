"""A local mail server pair for ``email.send``: SMTP submission (aiosmtpd) that files every
message it accepts in the user's ``Sent`` mailbox of an IMAP server (pymap, in memory), as
hosted mail services do for authenticated submissions.

Both serve on 127.0.0.1 from the loop of a ``FakeServer``, whose HTTP port takes the usual
control routes: ``POST /_fake/fail-next {"count", "mode": "drop"|"late"}`` (the next
``count`` messages are filed, then the connection is dropped before the reply to the final
``.`` of ``DATA``, or the reply comes after ``late_seconds``), ``POST /_fake/refuse-next
{"count", "code"}`` (the next ``count`` transactions are refused at ``RCPT TO`` with that
reply code, nothing filed), ``GET /_fake/state``, ``POST /_fake/reset``.

One login (``username``/``password``) is accepted by both, only after STARTTLS when a TLS
context is given (or over TLS from the first byte with ``implicit_tls``).
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import logging
import ssl
import time
import warnings
from argparse import Namespace
from datetime import UTC, datetime
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session
from proxyprotocol.reader import ProxyProtocolReader
from pymap.backend.dict import DictBackend
from pymap.imap import IMAPServer
from pymap.parsing.message import AppendMessage
from pysasl.hashing import Cleartext

from starter.devstack.providers.server import FakeServer, Misbehaviour, Reply, Request

SENT = "Sent"
# A plain test server asks for a login over an unencrypted loopback connection on purpose.
warnings.filterwarnings(
    "ignore", message="Requiring AUTH while not requiring TLS", category=UserWarning
)
# aiosmtpd logs the same on every session, and a deprecation of its own on every login.
logging.getLogger("mail.log").setLevel(logging.ERROR)


class FakeMail(FakeServer):
    name = "mail"

    def __init__(
        self,
        username: str = "agent",
        password: str = "mail-test-password",
        *,
        smtp_port: int = 0,
        imap_port: int = 0,
        tls: ssl.SSLContext | None = None,
        implicit_tls: bool = False,
    ) -> None:
        super().__init__()
        self.username = username
        self.password = password
        self.smtp_port = smtp_port
        self.imap_port = imap_port
        self._tls = tls
        self._implicit_tls = implicit_tls
        self.messages: list[dict[str, Any]] = []  # every message filed, in order
        self.transactions: list[float] = []  # time.monotonic() of every MAIL FROM
        self.logins: list[str] = []  # every AUTH's login name, accepted or not
        self.imap_sessions: list[float] = []  # time.monotonic() of every IMAP connection
        self._refuse: list[int] = []
        self._backend: DictBackend | None = None
        self._servers: list[asyncio.Server] = []

    # --- what tests (and the control routes) set ---------------------------------------

    def refuse_next(self, count: int, code: int) -> None:
        """The next ``count`` transactions are refused at RCPT TO with ``code``."""
        with self.lock:
            self._refuse = [code] * count

    def reset(self) -> None:
        with self.lock:
            super().reset()
            self._refuse.clear()

    def state(self) -> dict[str, Any]:
        return {"messages": self.messages, "smtp_port": self.smtp_port, "imap_port": self.imap_port}

    def sent(self, message_id: str | None = None) -> list[dict[str, Any]]:
        """The messages filed, or those with ``message_id``."""
        with self.lock:
            return [m for m in self.messages if message_id in (None, m["message_id"])]

    async def handle(self, request: Request) -> Reply:
        if request.path == "/_fake/refuse-next" and request.method == "POST":
            args = request.json() or {}
            self.refuse_next(int(args.get("count", 1)), int(args.get("code", 451)))
            return Reply(200, {"ok": True})
        return Reply(404, {"message": "the mail fake's HTTP port answers /_fake/ routes only"})

    # --- serving ------------------------------------------------------------------------

    def start(self, port: int = 0, host: str = "127.0.0.1") -> str:
        url = super().start(port, host)
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(self._serve_mail(host), self._loop)
        future.result(timeout=30)
        return url

    def stop(self) -> None:
        if self._loop is not None:
            for server in self._servers:
                self._loop.call_soon_threadsafe(server.close)
        super().stop()

    @property
    def smtp_allow_entry(self) -> str:
        return f"127.0.0.1:{self.smtp_port}"

    @property
    def imap_allow_entry(self) -> str:
        return f"127.0.0.1:{self.imap_port}"

    async def _serve_mail(self, host: str) -> None:
        args = Namespace(
            passlib_cfg=None,
            debug=False,
            inherited_sockets=None,
            tls=self._tls is not None,
            cert=None,
            key=None,
            proxy_protocol=None,
            demo_data=False,
            demo_user=self.username,
            demo_password=self.password,
            host=host,
            port=0,
        )
        # A test login needs no slow password hash (PBKDF2 by default: ~0.2 s a LOGIN).
        backend, config = await DictBackend.init(
            args,
            secure_auth=False,
            reject_dnsbl=False,
            ssl_context=self._tls,
            hash_context=Cleartext(),
        )
        config.apply_context()
        self._backend = backend
        async with backend.login.demo_user_identity.new_session() as session:
            await session.mailbox_set.add_mailbox(SENT)
        imap = ProxyProtocolReader(config.proxy_protocol).get_callback(
            IMAPServer(backend.login, config)
        )

        async def counted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with self.lock:
                self.imap_sessions.append(time.monotonic())
            await imap(reader, writer)

        imap_server = await asyncio.start_server(counted, host, self.imap_port)
        smtp_server = await asyncio.get_running_loop().create_server(
            self._smtp, host, self.smtp_port, ssl=self._tls if self._implicit_tls else None
        )
        self._servers = [imap_server, smtp_server]
        self.imap_port = imap_server.sockets[0].getsockname()[1]
        self.smtp_port = smtp_server.sockets[0].getsockname()[1]

    def _smtp(self) -> SMTP:
        starttls = self._tls is not None and not self._implicit_tls
        return SMTP(
            _Handler(self),
            hostname="mail.fake",
            tls_context=self._tls if starttls else None,
            require_starttls=starttls,
            auth_required=True,
            auth_require_tls=starttls,
            authenticator=self._authenticate,
        )

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        if not isinstance(data, LoginPassword):
            return AuthResult(success=False, handled=False)
        login = data.login.decode("utf-8", "replace")
        with self.lock:
            self.logins.append(login)
        ok = login == self.username and data.password.decode("utf-8", "replace") == self.password
        return AuthResult(success=ok, handled=False)

    async def file(self, content: bytes, envelope: Envelope) -> None:
        """File a message in the Sent mailbox (and in ``messages``)."""
        assert self._backend is not None
        async with self._backend.login.demo_user_identity.new_session() as session:
            mailbox = await session.mailbox_set.get_mailbox(SENT)
            await mailbox.append(AppendMessage(content, datetime.now(UTC), frozenset()))
        parsed = email.message_from_bytes(content, policy=email.policy.default)
        with self.lock:
            self.messages.append(
                {
                    "message_id": str(parsed.get("Message-ID", "")),
                    "from": envelope.mail_from,
                    "rcpt": list(envelope.rcpt_tos),
                    "subject": str(parsed.get("Subject", "")),
                    "bcc_header": "Bcc" in parsed,
                }
            )

    def take_refusal(self) -> int | None:
        with self.lock:
            return self._refuse.pop(0) if self._refuse else None


class _Handler:
    """aiosmtpd's handler: records transactions, refuses or files, misbehaves."""

    def __init__(self, fake: FakeMail) -> None:
        self.fake = fake

    async def handle_MAIL(  # aiosmtpd names its hooks so
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        with self.fake.lock:
            self.fake.transactions.append(time.monotonic())
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return "250 OK"

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        code = self.fake.take_refusal()
        if code is not None:
            return f"{code} {'try again later' if code < 500 else 'mailbox unavailable'}"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or b""
        await self.fake.file(content, envelope)
        reply = self.fake.acted(Reply())
        transport = server.transport
        if reply.misbehave == Misbehaviour.DROP and isinstance(transport, asyncio.Transport):
            transport.abort()
        elif reply.misbehave == Misbehaviour.LATE:
            await asyncio.sleep(self.fake.late_seconds)
        return "250 OK: filed"


def main() -> None:
    """``python -m starter.devstack.providers.mail``: the pair on 127.0.0.1 until SIGTERM
    or Ctrl-C, for trying ``email.send`` against ``moat up`` (``docs/email.md``)."""
    import argparse
    import signal
    import threading

    parser = argparse.ArgumentParser(prog="python -m starter.devstack.providers.mail")
    parser.add_argument("--smtp", type=int, default=2525, help="SMTP port (default 2525)")
    parser.add_argument("--imap", type=int, default=2143, help="IMAP port (default 2143)")
    parser.add_argument("--control", type=int, default=8790, help="/_fake/ routes' port")
    parser.add_argument("--username", default="agent")
    parser.add_argument("--password", default="mail-test-password")
    args = parser.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    fake = FakeMail(args.username, args.password, smtp_port=args.smtp, imap_port=args.imap)
    fake.start(args.control)
    try:
        print(  # noqa: T201 (a command's own output)
            f"SMTP 127.0.0.1:{fake.smtp_port}  IMAP 127.0.0.1:{fake.imap_port}  "
            f"control {fake.base_url}  login {fake.username} / {fake.password}",
            flush=True,
        )
        stop.wait()
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
