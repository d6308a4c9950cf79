"""The http.request adapter connects to the address its host guard vetted: a name is
resolved once, so it cannot point elsewhere by the time the connection is made (DNS
rebinding), and the provider still sees its own name (Host header, TLS server name)."""

from __future__ import annotations

import asyncio
import datetime as dt
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError

from activities.adapters import HostGuard, HttpAdapter
from schemas.capabilities import CapabilityCatalog
from schemas.run import AdapterInput
from schemas.settings import MoatSettings
from tests.support.fakes import FakeProvider, Step

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
    # 127.0.0.1:<port> is allow-listed as an address: a name resolving to it may be called
    # on that port.
    resolver = Resolver(["127.0.0.1"], ["169.254.169.254"])
    async with httpx.AsyncClient() as client:
        adapter = HttpAdapter(client, HostGuard([f"127.0.0.1:{port}"], resolver))
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
        adapter = HttpAdapter(client, HostGuard([f"127.0.0.1:{port}"], resolver))
        out = await adapter(_input(f"https://{NAME}:{port}/"))
    assert out.http_status == 200 and out.output["body"] == {"tls": True}
    assert names == [NAME]  # the TLS server name is the provider's, not the address


class Fixed:
    """A resolver that answers every name with the same addresses."""

    def __init__(self, *addresses: str) -> None:
        self.addresses = list(addresses)

    async def __call__(self, host: str, port: int) -> list[str]:
        return self.addresses


# Addresses that lead into private networks; several count as global for `ipaddress` on
# some Python versions (3.11: NAT64, 6to4, IPv4-compatible, site-local, most of 192.0.0/24).
NON_PUBLIC = [
    # NAT64: the embedded IPv4 address is reached, whichever it is.
    "64:ff9b::a00:1",  # 10.0.0.1
    "64:ff9b::7f00:1",  # 127.0.0.1
    "64:ff9b::a9fe:a9fe",  # 169.254.169.254
    "64:ff9b::808:808",  # 8.8.8.8: still through the translator
    "64:ff9b:1::a00:1",  # local-use NAT64
    # 6to4: 2002:AABB:CCDD:: reaches AA.BB.CC.DD.
    "2002:a00:1::1",
    "2002:7f00:1::1",
    "2002:a9fe:a9fe::1",
    # IPv4-compatible ::a.b.c.d
    "::7f00:1",
    "::a00:1",
    "::a9fe:a9fe",
    "::808:808",
    # site-local
    "fec0::1",
    "feff:ffff::1",
    # IPv4-mapped, judged by the IPv4 address
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "::ffff:169.254.169.254",
    "::ffff:100.64.0.1",
    # other IPv6 classics
    "::1",
    "::",
    "fd00::1",
    "fe80::1",
    "ff02::1",
    "2001:db8::1",
    "2001::1",  # Teredo
    # IPv4 where `is_global` alone is weaker or version-dependent
    "0.0.0.0",
    "0.1.2.3",
    "100.64.0.1",
    "100.127.255.254",
    "192.0.0.1",
    "192.0.0.8",
    "192.0.0.9",
    "192.0.0.170",
    "192.0.0.255",
    "198.18.0.1",
    "198.19.255.254",
    "240.0.0.1",
    "255.255.255.254",
    "255.255.255.255",
    # IPv4 classics
    "127.0.0.1",
    "10.1.2.3",
    "172.16.5.4",
    "192.168.1.1",
    "169.254.169.254",
    "224.0.0.1",
]


@pytest.mark.parametrize("address", NON_PUBLIC)
async def test_non_public_ranges_are_refused(address: str) -> None:
    with pytest.raises(ApplicationError) as info:
        await HostGuard([], Fixed(address)).check(NAME, 443)
    assert info.value.type == "host_not_allowed"
    assert info.value.non_retryable
    # An IP literal in the URL is judged the same way.
    with pytest.raises(ApplicationError):
        await HostGuard([], Fixed(address)).check(address, 443)


@pytest.mark.parametrize(
    "address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8"]
)
async def test_public_addresses_pass(address: str) -> None:
    """An IPv4-mapped address of a public IPv4 address is public too."""
    assert await HostGuard([], Fixed(address)).check(NAME, 8443) == address


@pytest.mark.parametrize(
    ("entries", "address", "port", "allowed"),
    [
        (["127.0.0.1"], "127.0.0.1", 80, True),
        (["127.0.0.1"], "127.0.0.1", 443, True),
        (["127.0.0.1"], "127.0.0.1", 8080, False),  # a bare host: 80 and 443 only
        (["127.0.0.1:8080"], "127.0.0.1", 8080, True),
        (["127.0.0.1:8080"], "127.0.0.1", 80, False),
        (["127.0.0.1:8080"], "127.0.0.1", 8081, False),
        (["[::1]:8080"], "::1", 8080, True),
        (["[::1]:8080"], "::1", 443, False),
        (["::1"], "::1", 443, True),
        (["10.0.0.7:8443"], "::ffff:10.0.0.7", 8443, True),  # mapped: its IPv4 address
        (["10.0.0.7:8443"], "::ffff:10.0.0.7", 443, False),
        (["10.0.0.8:8443"], "10.0.0.7", 8443, False),
    ],
)
async def test_allow_list_entries_name_their_ports(
    entries: list[str], address: str, port: int, allowed: bool
) -> None:
    """An address entry admits names resolving to it, on the entry's ports only."""
    guard = HostGuard(entries, Fixed(address))
    if allowed:
        assert await guard.check(NAME, port) == address
    else:
        with pytest.raises(ApplicationError) as info:
            await guard.check(NAME, port)
        assert info.value.type == "host_not_allowed"


async def test_a_name_entry_admits_its_ports_only() -> None:
    private = Fixed("10.0.0.7")
    assert await HostGuard([f"{NAME}:8443"], private).check(NAME, 8443) is None
    assert await HostGuard([NAME], private).check(NAME.upper(), 443) is None
    # Elsewhere the name is resolved and judged; the refusal says which entry would do.
    for entries, port, suggested in (([f"{NAME}:8443"], 443, NAME), ([NAME], 8443, f"{NAME}:8443")):
        with pytest.raises(ApplicationError) as info:
            await HostGuard(entries, private).check(NAME, port)
        assert info.value.type == "host_not_allowed"
        assert f"allow-list {suggested} " in info.value.message


async def test_the_tenant_entries_add_to_the_worker_entries() -> None:
    guard = HostGuard(["10.0.0.9"], Fixed("10.0.0.7"))
    assert await guard.check(NAME, 8443, ["10.0.0.7:8443"]) == "10.0.0.7"
    with pytest.raises(ApplicationError):
        await guard.check(NAME, 8443, ["10.0.0.8:8443"])
    with pytest.raises(ApplicationError):
        await guard.check(NAME, 8443)  # the next tenant's call does not inherit the list
    # An entry that does not parse (never written through the API) admits nothing.
    with pytest.raises(ApplicationError):
        await guard.check(NAME, 8443, ["http://10.0.0.7:8443/"])


@pytest.mark.parametrize(
    ("entry", "stored"),
    [
        ("Example.COM", "example.com"),
        ("api.example.com.:8443", "api.example.com:8443"),
        ("10.0.0.5:8443", "10.0.0.5:8443"),
        ("[::1]:8080", "[::1]:8080"),
        ("::1", "[::1]"),
        ("[FD00::5]", "[fd00::5]"),
        ("[::ffff:10.0.0.5]:99", "10.0.0.5:99"),
        ("svc_a.internal:1", "svc_a.internal:1"),
    ],
)
def test_entries_are_stored_normalized(entry: str, stored: str) -> None:
    settings = MoatSettings(http_allow_hosts=[entry])
    assert settings.http_allow_hosts == [stored]


@pytest.mark.parametrize(
    "entry",
    [
        "http://api.example.com",
        "api.example.com/path",
        "user@api.example.com",
        "*.example.com",
        "api example.com",
        "api.example.com:0",
        "api.example.com:65536",
        "api.example.com:http",
        "api.example.com:",
        "[::1]8080",
        "[api.example.com]:443",
        "fe80::1%eth0",
        "127.1",
        "bad\nname.example.com",
    ],
)
def test_a_bad_entry_is_refused_at_settings_load(
    entry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOAT_HTTP_ALLOW_HOSTS", f"ok.example.com,{entry}")
    with pytest.raises(ValidationError) as info:
        MoatSettings()
    assert repr(entry) in str(info.value)  # the message names the bad entry
    assert "host:port" in str(info.value)  # and says what to write


def test_the_setting_reads_host_port_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOAT_HTTP_ALLOW_HOSTS", " a.example , 10.0.0.5:8443,[::1]:8080 ,")
    assert MoatSettings().http_allow_hosts == ["a.example", "10.0.0.5:8443", "[::1]:8080"]


class Unguarded(HostGuard):
    """Admits every host: the headers, not the guard, are under test."""

    async def check(self, host: str, port: int, *tenant_allow: Any) -> str | None:
        return None


async def test_hop_by_hop_and_framing_headers_from_the_agent_are_dropped(
    provider: FakeProvider,
) -> None:
    url = provider.script("/framing", Step(200, {"ok": True}))
    port = httpx.URL(url).port
    agent = {
        "Host": "internal.example",
        "Transfer-Encoding": "chunked",
        "content-length": "9999",
        "Connection": "close, X-Kept",
        "Keep-Alive": "timeout=99",
        "Upgrade": "websocket",
        "tE": "trailers",
        "Trailer": "X-Checksum",
        "Proxy-Authorization": "Basic YWdlbnQ6c2VjcmV0",
        "PROXY-Connection": "agent-proxy-connection",
        "Idempotency-Key": "agent-chosen",
        "X-Kept": "yes",
    }
    inp = _input(url)
    inp = inp.model_copy(update={"input": {**inp.input, "headers": agent}})
    async with httpx.AsyncClient() as client:
        adapter = HttpAdapter(client, Unguarded([]))
        out = await adapter(inp)
    assert out.http_status == 200
    (call,) = provider.calls_to("/framing")
    received = [(name.lower(), value) for name, value in call.raw_headers]
    sent_values = {value for name, value in agent.items() if name != "X-Kept"}
    assert not [(n, v) for n, v in received if v in sent_values], received
    assert not [n for n, _ in received if n.startswith("proxy-") or n in {"upgrade", "te"}]
    framing = [n for n, _ in received if n in {"content-length", "transfer-encoding"}]
    assert framing == ["content-length"], received
    assert [v for n, v in received if n == "host"] == [f"127.0.0.1:{port}"]
    assert ("x-kept", "yes") in received
    assert call.body == {"n": 1}  # the body arrived whole, framed once


async def test_a_refusal_names_the_host_and_port_and_how_to_allow_them() -> None:
    async with httpx.AsyncClient() as client:
        adapter = HttpAdapter(client, HostGuard([], Fixed("10.0.0.7")))
        with pytest.raises(ApplicationError) as info:
            await adapter(_input(f"http://user:pw-s3cr3t@{NAME}:8443/in?token=s3cr3t"))
    refused = info.value
    assert refused.type == "host_not_allowed"
    assert f"{NAME} (port 8443) resolves to non-public address 10.0.0.7" in refused.message
    assert "moat tenant allow-hosts" in refused.message
    assert "PATCH /v1/admin/tenants/" in refused.message
    assert refused.details[0]["refused_target"] == {
        "host": NAME,
        "port": 8443,
        "allow_entry": f"{NAME}:8443",
    }
    # The URL's userinfo, path and query stay out of it.
    assert "s3cr3t" not in refused.message + repr(refused.details)
