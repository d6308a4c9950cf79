"""A minimal SMTP submission client on asyncio streams, and the IMAP look-up of a sent
message: what ``email.send`` needs of mail servers, and nothing more.

The client tells two failures apart that a library's exceptions blur: one before the last
byte of the message (the final ``.`` of ``DATA``), after which the server holds nothing, and
one after it and before the server's reply, after which the message may have been accepted.
It connects only to the address the host guard vetted, checks the server's certificate
against the configured name, and never words a failure with the server's or a library's
text (either may repeat the password).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import imaplib
import socket
import ssl
from dataclasses import dataclass
from typing import Literal

# The longest reply line read, and the most lines one reply may have.
MAX_LINE = 4096
MAX_REPLY_LINES = 100

Security = Literal["starttls", "tls", "none"]


class SmtpError(Exception):
    """An SMTP exchange that failed. ``stage`` names the command; ``code`` is the server's
    reply code (None: no reply, the connection failed or timed out); ``after_data``: the
    message's last byte had been sent, so the server may hold it; ``text``: the server's
    reply text (not for messages: it may repeat what it was sent)."""

    def __init__(
        self,
        stage: str,
        code: int | None = None,
        *,
        after_data: bool = False,
        timed_out: bool = False,
        text: str = "",
    ) -> None:
        super().__init__(stage)
        self.stage = stage
        self.code = code
        self.after_data = after_data
        self.timed_out = timed_out
        self.text = text


@dataclass(frozen=True)
class SmtpTarget:
    """Where to submit: ``host`` is the configured name (the certificate must name it),
    ``address`` the vetted address to connect to (None: connect to ``host`` as is)."""

    host: str
    port: int
    security: Security
    address: str | None
    tls: ssl.SSLContext
    helo: str


@dataclass(frozen=True)
class Envelope:
    sender: str
    recipients: list[str]
    message: bytes


class _Session:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.extensions: set[str] = set()
        self.auth: set[str] = set()

    async def reply(self, stage: str, *, after_data: bool = False) -> tuple[int, str]:
        lines: list[str] = []
        for _ in range(MAX_REPLY_LINES):
            try:
                raw = await self.reader.readuntil(b"\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
                raise SmtpError(stage, after_data=after_data) from None
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if len(line) < 3 or not line[:3].isdigit():
                raise SmtpError(stage, after_data=after_data)
            lines.append(line[4:])
            if line[3:4] != "-":
                return int(line[:3]), "\n".join(lines)
        raise SmtpError(stage, after_data=after_data)

    async def command(self, stage: str, line: str, *expected: int) -> tuple[int, str]:
        await self.send(stage, line.encode("ascii") + b"\r\n")
        code, text = await self.reply(stage)
        if code not in expected:
            raise SmtpError(stage, code, text=text)
        return code, text

    async def send(self, stage: str, data: bytes, *, after_data: bool = False) -> None:
        try:
            self.writer.write(data)
            await self.writer.drain()
        except OSError:
            raise SmtpError(stage, after_data=after_data) from None

    async def ehlo(self, helo: str) -> None:
        _, text = await self.command("EHLO", f"EHLO {helo}", 250)
        self.extensions = set()
        for line in text.split("\n")[1:]:
            keyword, _, params = line.strip().partition(" ")
            self.extensions.add(keyword.upper())
            if keyword.upper() == "AUTH":
                self.auth = {p.upper() for p in params.split()}


async def submit(
    target: SmtpTarget,
    username: str | None,
    password: str,
    envelope: Envelope,
    deadline: float,
) -> tuple[int, str]:
    """Submit ``envelope``, logging in as ``username`` unless it is None: the final reply
    (code, text). Raises ``SmtpError``; a timeout
    past ``deadline`` seconds is one, marked ``after_data`` when the message's last byte had
    gone."""
    state = {"after_data": False}
    try:
        async with asyncio.timeout(deadline):
            return await _exchange(target, username, password, envelope, state)
    except TimeoutError:
        raise SmtpError("timeout", after_data=state["after_data"], timed_out=True) from None


async def _exchange(
    target: SmtpTarget,
    username: str | None,
    password: str,
    envelope: Envelope,
    state: dict[str, bool],
) -> tuple[int, str]:
    session = await _open(target)
    try:
        await _hello(session, target)
        if username is not None:
            await _login(session, username, password)
        await session.command("MAIL", f"MAIL FROM:<{envelope.sender}>", 250)
        for rcpt in envelope.recipients:
            await session.command("RCPT", f"RCPT TO:<{rcpt}>", 250, 251)
        await session.command("DATA", "DATA", 354)
        await session.send("DATA", _dot_stuffed(envelope.message))
        # From the final "." on, the server may accept the message whatever happens next.
        state["after_data"] = True
        await session.send("DATA", b".\r\n", after_data=True)
        code, text = await session.reply("DATA", after_data=True)
        if code != 250:
            raise SmtpError("DATA", code, after_data=True, text=text)
        await _quit(session)
        return code, text
    finally:
        session.writer.close()


async def _open(target: SmtpTarget) -> _Session:
    try:
        reader, writer = await asyncio.open_connection(
            target.address or target.host,
            target.port,
            ssl=target.tls if target.security == "tls" else None,
            server_hostname=target.host if target.security == "tls" else None,
            limit=MAX_LINE,
        )
    except (OSError, ssl.SSLError):
        raise SmtpError("connect") from None
    return _Session(reader, writer)


async def _hello(session: _Session, target: SmtpTarget) -> None:
    code, text = await session.reply("greeting")
    if code != 220:
        raise SmtpError("greeting", code, text=text)
    await session.ehlo(target.helo)
    if target.security != "starttls":
        return
    if "STARTTLS" not in session.extensions:
        raise SmtpError("STARTTLS", text="not offered")
    await session.command("STARTTLS", "STARTTLS", 220)
    try:
        await session.writer.start_tls(target.tls, server_hostname=target.host)
    except (OSError, ssl.SSLError):
        raise SmtpError("STARTTLS") from None
    await session.ehlo(target.helo)


async def _login(session: _Session, username: str, password: str) -> None:
    if "PLAIN" in session.auth:
        token = base64.b64encode(f"\0{username}\0{password}".encode()).decode()
        await session.command("AUTH", f"AUTH PLAIN {token}", 235)
    elif "LOGIN" in session.auth:
        await session.command("AUTH", "AUTH LOGIN", 334)
        await session.command("AUTH", base64.b64encode(username.encode()).decode(), 334)
        await session.command("AUTH", base64.b64encode(password.encode()).decode(), 235)
    else:
        raise SmtpError("AUTH", text="no PLAIN or LOGIN mechanism offered")


async def _quit(session: _Session) -> None:
    """QUIT, for a clean end; the message is accepted whatever it answers."""
    try:
        await session.send("QUIT", b"QUIT\r\n")
        await asyncio.wait_for(session.reply("QUIT"), 2.0)
    except (SmtpError, TimeoutError):
        return


def _dot_stuffed(message: bytes) -> bytes:
    """The message as DATA carries it: CRLF line ends, a leading "." doubled, ending CRLF."""
    lines = message.replace(b"\r\n", b"\n").split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return b"".join((b"." + line if line.startswith(b".") else line) + b"\r\n" for line in lines)


class ImapError(Exception):
    """An IMAP look-up that failed: ``stage`` names the step (connect, login, select,
    search); ``refused``: the server answered NO or BAD (a login refused, a mailbox
    missing), not a broken connection."""

    def __init__(self, stage: str, *, refused: bool = False) -> None:
        super().__init__(stage)
        self.stage = stage
        self.refused = refused


class _PinnedImap(imaplib.IMAP4):
    """imaplib's client connecting to the vetted address, the certificate checked against
    the configured name."""

    def __init__(
        self, host: str, port: int, address: str | None, tls: ssl.SSLContext | None, timeout: float
    ) -> None:
        self._address = address
        self._tls = tls
        super().__init__(host, port, timeout)

    def _create_socket(self, timeout: float | None) -> socket.socket:
        sock = socket.create_connection((self._address or self.host, self.port), timeout)
        if self._tls is not None:
            return self._tls.wrap_socket(sock, server_hostname=self.host)
        return sock


@dataclass(frozen=True)
class ImapTarget:
    host: str
    port: int
    security: Security
    address: str | None
    tls: ssl.SSLContext
    mailbox: str


def find_message_id(
    target: ImapTarget, username: str, password: str, message_id: str, timeout: float
) -> bool:
    """Whether ``target.mailbox`` holds a message whose Message-ID is ``message_id``
    (blocking: run it in a thread)."""
    stage = "connect"
    try:
        imap = _PinnedImap(
            target.host,
            target.port,
            target.address,
            target.tls if target.security == "tls" else None,
            timeout,
        )
    except (OSError, ssl.SSLError, imaplib.IMAP4.error):
        raise ImapError(stage) from None
    try:
        if target.security == "starttls":
            stage = "STARTTLS"
            imap.starttls(target.tls)
        stage = "login"
        imap.login(username, password)
        stage = "select"
        status, _ = imap.select(f'"{target.mailbox}"', readonly=True)
        if status != "OK":
            raise ImapError(stage, refused=True)
        stage = "search"
        status, data = imap.search(None, "HEADER", "Message-ID", f'"{message_id}"')
        if status != "OK":
            raise ImapError(stage, refused=True)
        return bool(data and data[0] and data[0].split())
    except imaplib.IMAP4.abort:
        raise ImapError(stage) from None
    except imaplib.IMAP4.error:
        raise ImapError(stage, refused=True) from None
    except (OSError, ssl.SSLError):
        raise ImapError(stage) from None
    finally:
        with contextlib.suppress(OSError, imaplib.IMAP4.error):
            imap.logout()
