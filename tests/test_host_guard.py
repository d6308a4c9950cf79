"""The http.request adapter connects to the address its host guard vetted: a name is
resolved once, so it cannot point elsewhere by the time the connection is made (DNS
rebinding), and the provider still sees its own name (Host header, TLS server name)."""

from __future__ import annotations

import asyncio
import datetime as dt
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from temporalio.exceptions import ApplicationError

from activities.adapters import HostGuard, HttpAdapter
from schemas.capabilities import CapabilityCatalog
from schemas.run import AdapterInput
from tests.fakes import FakeProvider, Step

NAME = "provider.test"  # known to no DNS server: only the test's resolver knows it


class Resolver:
    """Answers ``NAME`` with ``first``, then (a rebinding DNS server) with ``later``."""

    def __init__(self, first: list[str], later: list[str]) -> None:
        self.answers = [first, later]
        self.calls = 0

    async def __call__(self, host: str, port: int) -> list[str]:
        assert host == NAME, host
        self.calls += 1
        return self.answers[min(self.calls, 2) - 1]


def _input(url: str) -> AdapterInput:
    capability = CapabilityCatalog().get("http.request")
    assert capability is not None
    return AdapterInput(
        tenant_id="ten_test",
        capability=capability,
        input={"method": "POST", "url": url, "json": {"n": 1}},
        idempotency_key="moat-test-key",
        trace_id="0" * 32,
    )


async def test_the_request_goes_to_the_vetted_address(provider: FakeProvider) -> None:
    url = provider.script("/pinned", Step(200, {"ok": True}))
    port = httpx.URL(url).port
    # 127.0.0.1 is allow-listed as an address: a name resolving to it may be called.
    resolver = Resolver(["127.0.0.1"], ["169.254.169.254"])
    async with httpx.AsyncClient() as client:
        adapter = HttpAdapter(client, HostGuard(["127.0.0.1"], resolver))
        out = await adapter(_input(f"http://{NAME}:{port}/pinned"))
    assert out.http_status == 200
    assert resolver.calls == 1  # resolved once, by the guard; the connection used its answer
    (call,) = provider.calls_to("/pinned")
    assert call.headers["host"] == f"{NAME}:{port}"


async def test_a_name_with_any_private_address_is_refused() -> None:
    resolver = Resolver(["93.184.216.34", "10.0.0.7"], [])
    guard = HostGuard([], resolver)
    with pytest.raises(ApplicationError) as info:
        await guard.check(NAME, 443)
    assert info.value.type == "host_not_allowed"
    assert await HostGuard([], Resolver(["93.184.216.34"], [])).check(NAME, 443) == (
        "93.184.216.34"
    )
    assert await HostGuard([NAME], resolver).check(NAME, 443) is None  # allow-listed name


@pytest_asyncio.fixture
async def tls_server(tmp_path: Path) -> AsyncIterator[tuple[int, Path, list[str]]]:
    """A TLS server on 127.0.0.1 whose certificate names only ``NAME``; records the server
    name each client asked for."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, NAME)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(NAME)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    names: list[str] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    context.sni_callback = lambda sock, name, ctx: names.append(name or "")  # type: ignore[assignment,misc,func-returns-value]

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = b'{"tls": true}'
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    try:
        yield port, cert_file, names
    finally:
        server.close()
        await server.wait_closed()


async def test_https_to_a_vetted_address_checks_the_certificate_for_the_name(
    tls_server: tuple[int, Path, list[str]],
) -> None:
    port, cert_file, names = tls_server
    trust = ssl.create_default_context(cafile=str(cert_file))
    resolver = Resolver(["127.0.0.1"], ["127.0.0.1"])
    async with httpx.AsyncClient(verify=trust) as client:
        adapter = HttpAdapter(client, HostGuard(["127.0.0.1"], resolver))
        out = await adapter(_input(f"https://{NAME}:{port}/"))
    assert out.http_status == 200 and out.output == {"tls": True}
    assert names == [NAME]  # the TLS server name is the provider's, not the address
