"""Entries of the ``http.request`` allow-list: which non-public hosts may be called.

An entry is ``host`` (ports 80 and 443 only) or ``host:port`` (that port only); an IPv6
address is written in brackets, ``[fd00::5]:8443`` (``[fd00::5]`` or ``fd00::5`` alone for
80 and 443). The process-wide setting, the tenants' lists (admin API, CLI) and the worker's
guard all read entries with these rules, so an entry means the same everywhere.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator, Field

from schemas.addresses import Address, is_public, judged_address, literal_address

__all__ = ["Address", "is_public", "judged_address", "literal_address"]

DEFAULT_PORTS = frozenset({80, 443})
MAX_ENTRIES = 100
MAX_NAME_LENGTH = 253  # the longest DNS name

_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_PORT = re.compile(r"[0-9]{1,5}")
_BRACKETED = re.compile(r"\[([^\]]*)\](?::(.*))?", re.DOTALL)


def canonical_host(host: str) -> str:
    """A URL's host as entries are compared: lowercase, no brackets, no final dot; an
    address literal, in whatever form a resolver reads (``literal_address``), as its
    address's canonical text (an IPv4-mapped one as IPv4)."""
    address = literal_address(host)
    return str(address) if address is not None else _written_host(host)


def _written_host(host: str) -> str:
    """An entry's host as written, normalized: lowercase, no brackets, no final dot; an IP
    address in standard notation as its canonical text (an IPv4-mapped one as IPv4). An
    entry spells an address the standard way; shorthands (``127.1``) are refused."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = host.removesuffix(".")
    try:
        return str(judged_address(ipaddress.ip_address(host)))
    except ValueError:
        return host


@dataclass(frozen=True)
class AllowEntry:
    """One parsed entry; ``port`` None means 80 and 443."""

    host: str
    port: int | None = None

    def admits(self, host: str, port: int) -> bool:
        """Whether a call to ``host`` (canonical, see ``canonical_host``) on ``port`` is
        allowed by this entry."""
        if host != self.host:
            return False
        return port in DEFAULT_PORTS if self.port is None else port == self.port

    def __str__(self) -> str:
        """The stored form: IPv6 in brackets, the port only when one was given."""
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return shown if self.port is None else f"{shown}:{self.port}"


def admits_address(address: Address, port: int, allow: Iterable[AllowEntry]) -> bool:
    """Whether a call may go to ``address`` on ``port``: a public address, or one an entry
    of ``allow`` names. The one rule for a literal in a webhook URL when it is subscribed
    and for every address the worker's host guard lets a call reach."""
    address = judged_address(address)
    return is_public(address) or any(entry.admits(str(address), port) for entry in allow)


def entry_for(host: str, port: int) -> str:
    """The narrowest entry that admits ``host`` (canonical) on ``port``."""
    return str(AllowEntry(host, None if port in DEFAULT_PORTS else port))


def _bad(text: str, why: str) -> ValueError:
    shown = text if len(text) <= 80 else text[:77] + "..."
    return ValueError(
        f"allow-list entry {shown!r}: {why}; write host or host:port (a bare host means "
        "ports 80 and 443), an IPv6 address as [address]:port"
    )


def parse_allow_entry(text: str) -> AllowEntry:
    """Parse one entry; ValueError, naming it, when it is not ``host[:port]``."""
    raw = text.strip()
    if any(c in raw for c in "/@?#"):
        raise _bad(text, "a host, not a URL")
    port_text: str | None = None
    bracketed = _BRACKETED.fullmatch(raw)
    if bracketed:
        host, port_text = bracketed.group(1), bracketed.group(2)
        if not _is_ipv6(host):
            raise _bad(text, "brackets hold an IPv6 address only")
    elif raw.count(":") >= 2:
        host = raw  # an IPv6 address without a port
        if not _is_ipv6(host):
            raise _bad(text, "not an IPv6 address (with a port, put it in brackets)")
    elif ":" in raw:
        host, port_text = raw.split(":", 1)
    else:
        host = raw
    port = _port(text, port_text)
    host = _written_host(host)
    if not _is_ip(host):
        _check_name(text, host)
    return AllowEntry(host, port)


def _port(text: str, port_text: str | None) -> int | None:
    if port_text is None:
        return None
    if not _PORT.fullmatch(port_text) or not 1 <= int(port_text) <= 65535:
        raise _bad(text, "the port must be a number from 1 to 65535")
    return int(port_text)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _is_ipv6(host: str) -> bool:
    try:
        address = ipaddress.IPv6Address(host)
    except ValueError:
        return False
    return address.scope_id is None


def _check_name(text: str, host: str) -> None:
    if not host or len(host) > MAX_NAME_LENGTH:
        raise _bad(text, "no host name")
    labels = host.split(".")
    if not all(_LABEL.fullmatch(label) for label in labels):
        raise _bad(
            text,
            "a host name has letters, digits, '-' and '_' only (no scheme, path, wildcard "
            "or space; an international name in its xn-- form)",
        )
    if labels[-1].isdigit():
        raise _bad(text, "not a valid IPv4 address")


def normalize_allow_entry(text: str) -> str:
    """An entry in its stored form (see ``AllowEntry.__str__``); ValueError when invalid."""
    return str(parse_allow_entry(text))


def normalize_allow_list(entries: Iterable[str]) -> list[str]:
    """Entries in stored form, duplicates dropped, first occurrence kept; ValueError for an
    invalid entry (named) or more than ``MAX_ENTRIES``."""
    unique = list(dict.fromkeys(normalize_allow_entry(e) for e in entries))
    if len(unique) > MAX_ENTRIES:
        raise ValueError(f"{len(unique)} allow-list entries; at most {MAX_ENTRIES}")
    return unique


AllowHostEntry = Annotated[str, AfterValidator(normalize_allow_entry)]
AllowHosts = Annotated[
    list[AllowHostEntry],
    Field(max_length=MAX_ENTRIES),
    AfterValidator(lambda entries: list(dict.fromkeys(entries))),
]
