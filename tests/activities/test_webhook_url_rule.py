"""One rule for an address literal: a webhook URL is refused when it is subscribed exactly
when the worker's host guard would refuse to deliver to it. Resolvers read IPv4 literals in
forms an IP parser does not (``2130706433``, ``127.1``, ``0x7f.1``), and IPv6 has ranges that
lead into IPv4 (NAT64, 6to4, IPv4-compatible); each is judged as the address it reaches."""

from __future__ import annotations

import re

import pytest
from temporalio.exceptions import ApplicationError

from activities.adapters import HostGuard
from schemas.hosts import canonical_host, literal_address
from schemas.webhooks import WEBHOOK_URL_PATTERN
from starter.service.errors import MoatError
from starter.service.webhooks import check_url

# host as written in a URL, and the address a connection to it reaches
TRICKY = [
    ("2130706433", "127.0.0.1"),
    ("127.1", "127.0.0.1"),
    ("0x7f.1", "127.0.0.1"),
    ("0x7f000001", "127.0.0.1"),
    ("017700000001", "127.0.0.1"),
    ("127.0.0.1.", "127.0.0.1"),
    ("0", "0.0.0.0"),
    ("10.1", "10.0.0.1"),
    ("3232235777", "192.168.1.1"),
    ("169.254.43518", "169.254.169.254"),
    ("[::ffff:7f00:1]", "127.0.0.1"),
    ("[64:ff9b::7f00:1]", "64:ff9b::7f00:1"),  # NAT64 of 127.0.0.1
    ("[64:ff9b::a9fe:a9fe]", "64:ff9b::a9fe:a9fe"),  # NAT64 of the metadata service
    ("[64:ff9b:1::a00:1]", "64:ff9b:1::a00:1"),  # local-use NAT64 of 10.0.0.1
    ("[2002:7f00:1::]", "2002:7f00:1::"),  # 6to4 of 127.0.0.1
    ("[::127.0.0.1]", "::7f00:1"),  # IPv4-compatible
    ("[::1]", "::1"),
    ("[fd00::1]", "fd00::1"),
]


class NoDns:
    """A resolver that is never to be asked: a literal is judged as the address it is."""

    async def __call__(self, host: str, port: int) -> list[str]:
        raise AssertionError(f"{host} was resolved")


@pytest.mark.parametrize(("host", "address"), TRICKY, ids=[h for h, _ in TRICKY])
async def test_a_tricky_literal_is_refused_at_subscription_and_at_delivery(
    host: str, address: str
) -> None:
    assert str(literal_address(host)) == address == canonical_host(host)
    url = f"http://{host}:8080/hook"
    with pytest.raises(MoatError) as subscribed:
        check_url(url, [])
    assert subscribed.value.code == "webhook_url_not_allowed"
    with pytest.raises(ApplicationError) as delivered:
        await HostGuard([], NoDns()).check(host.strip("[]"), 8080)
    assert delivered.value.type == "host_not_allowed"

    # An allow-list entry for the address admits every spelling of it, at both.
    entry = f"[{address}]:8080" if ":" in address else f"{address}:8080"
    check_url(url, [entry])
    assert await HostGuard([entry], NoDns()).check(host.strip("[]"), 8080) in (None, address)


@pytest.mark.parametrize("host", ["93.184.216.34", "1558767650", "[2606:4700::1111]"])
async def test_a_public_literal_passes_both(host: str) -> None:
    check_url(f"https://{host}/hook", [])
    assert await HostGuard([], NoDns()).check(host.strip("[]"), 443) is not None


@pytest.mark.parametrize("host", ["hooks.example.com", "09.example", "256.1.1.1", "1.2.3.4.5"])
def test_a_name_is_no_literal(host: str) -> None:
    assert literal_address(host) is None


@pytest.mark.parametrize("url", ["HTTP://0*", "https://exa mple.com/", "https://a:65536/"])
def test_a_url_the_schema_refuses_is_refused(url: str) -> None:
    """The API's schema states the rule (``WEBHOOK_URL_PATTERN``), and subscription keeps
    it: a host no DNS name or address is written as never gets a delivery."""
    assert re.fullmatch(WEBHOOK_URL_PATTERN, url) is None
    with pytest.raises(MoatError) as refused:
        check_url(url, [])
    assert refused.value.code == "webhook_url_invalid"
