"""The host guard: which addresses a provider call may reach."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Iterable

from temporalio.exceptions import ApplicationError

from activities.adapters.base import fail
from schemas.errors import ErrorCode
from schemas.hosts import (
    AllowEntry,
    admits_address,
    canonical_host,
    entry_for,
    literal_address,
    parse_allow_entry,
)
from schemas.names import REFUSED_TARGET
from schemas.records import ErrorTaxonomy

Resolver = Callable[[str, int], Awaitable[list[str]]]


async def resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to, as the system resolver gives them."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class HostGuard:
    """Refuses targets that are not public (see ``schemas.addresses``) unless an
    allow-list entry admits the host and port: by name, or by address for a name that
    resolves to it.

    ``check`` resolves a name once and returns the vetted address the request must then be
    sent to, so the name cannot resolve elsewhere between the check and the connection
    (DNS rebinding). An address literal, in any form a resolver reads (``2130706433``,
    ``127.1``, NAT64 ``64:ff9b::a.b.c.d``), is judged as the address it is, by the rule a
    webhook URL is checked with when it is subscribed (``schemas.hosts.admits_address``)."""

    def __init__(self, allow_hosts: Iterable[str], resolver: Resolver = resolve) -> None:
        self._allow = tuple(parse_allow_entry(h) for h in allow_hosts)
        self._resolve = resolver

    async def check(self, host: str, port: int, tenant_allow: Iterable[str] = ()) -> str | None:
        """The address to connect to; None for a host allow-listed by name (sent as is).
        ``tenant_allow`` adds the calling tenant's own entries to the worker's."""
        allow = self._allow + _entries(tenant_allow)
        host = canonical_host(host)
        if any(entry.admits(host, port) for entry in allow):
            return None
        literal = literal_address(host)
        if literal is not None:
            addresses = [str(literal)]
        else:
            try:
                addresses = await self._resolve(host, port)
            except OSError as err:
                # The resolver's own wording stays out of the failure, like every library's.
                raise fail(
                    ErrorTaxonomy.NETWORK_ERROR, f"cannot resolve {host} ({type(err).__name__})"
                ) from None
        if not addresses:
            raise fail(ErrorTaxonomy.NETWORK_ERROR, f"cannot resolve {host}: no address")
        for text in addresses:
            # Drop an IPv6 zone id; an IPv4-mapped address is judged as the IPv4 it reaches.
            address = literal_address(text)
            if address is None or not admits_address(address, port, allow):
                raise _refused(host, port, str(address or text))
        return addresses[0]

    def allow_listed(
        self, host: str, port: int, tenant_allow: Iterable[str] = (), address: str | None = None
    ) -> bool:
        """Whether an allow-list entry names ``host`` on ``port``, or ``address`` (the one
        ``check`` vetted for it): more than a public address, an operator's choice."""
        allow = self._allow + _entries(tenant_allow)
        names = [canonical_host(host)] + ([canonical_host(address)] if address else [])
        return any(entry.admits(name, port) for entry in allow for name in names)


def _refused(host: str, port: int, address: str) -> ApplicationError:
    """The refusal of ``host`` on ``port``: it names both, and the entry an operator adds
    to allow them (the URL's path and query, which may hold secrets, stay out of it)."""
    entry = entry_for(host, port)
    return fail(
        ErrorTaxonomy.GATEWAY_ERROR,
        f"{host} (port {port}) resolves to non-public address {address}; an operator can "
        f"allow-list {entry} (MOAT_HTTP_ALLOW_HOSTS, or the tenant's list: `moat tenant "
        "allow-hosts`, PATCH /v1/admin/tenants/{id}) to allow it",
        code=ErrorCode.HOST_NOT_ALLOWED,
        retryable=False,
        more={REFUSED_TARGET: {"host": host, "port": port, "allow_entry": entry}},
    )


def _entries(texts: Iterable[str]) -> tuple[AllowEntry, ...]:
    """Parsed entries; one that does not parse (validated when written, so never expected)
    admits nothing."""
    entries = []
    for text in texts:
        try:
            entries.append(parse_allow_entry(text))
        except ValueError:
            continue
    return tuple(entries)
