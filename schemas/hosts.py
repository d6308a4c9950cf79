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

from pydantic import AfterValidator, Field, WithJsonSchema

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


# ``parse_allow_entry``'s rules as a pattern, for the API's schema: white space around, a
# DNS name (labels of letters, digits, "_" and inner "-", at most 253 characters, the last
# label not all digits) or an IPv4 address, each with an optional final dot and ":port"
# (1 to 65535, at most 5 digits); or an IPv6 address, bare or in brackets with a port.
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
IPV4_PATTERN = rf"(?:{_OCTET}\.){{3}}{_OCTET}"
_H = r"[0-9A-Fa-f]{1,4}"
_LS32 = rf"(?:{_H}:{_H}|{IPV4_PATTERN})"
IPV6_PATTERN = (  # RFC 3986's IPv6address
    rf"(?:(?:{_H}:){{6}}{_LS32}|::(?:{_H}:){{5}}{_LS32}|(?:{_H})?::(?:{_H}:){{4}}{_LS32}"
    rf"|(?:(?:{_H}:){{0,1}}{_H})?::(?:{_H}:){{3}}{_LS32}"
    rf"|(?:(?:{_H}:){{0,2}}{_H})?::(?:{_H}:){{2}}{_LS32}"
    rf"|(?:(?:{_H}:){{0,3}}{_H})?::{_H}:{_LS32}|(?:(?:{_H}:){{0,4}}{_H})?::{_LS32}"
    rf"|(?:(?:{_H}:){{0,5}}{_H})?::{_H}|(?:(?:{_H}:){{0,6}}{_H})?::)"
)
_NAME_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOST_END = r"\s*(?::|$)"
_NAME = (
    rf"(?=[^:\s]{{1,{MAX_NAME_LENGTH}}}\.?{_HOST_END})"
    rf"(?:{_NAME_LABEL}\.)*(?![0-9]+\.?{_HOST_END}){_NAME_LABEL}"
)
_ENTRY_PORT = (
    r"(?=[0-9]{1,5}(?![0-9]))0*"
    r"(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
)
ALLOW_ENTRY_PATTERN = (
    rf"^\s*(?:(?:{IPV4_PATTERN}|{_NAME})\.?\s*(?::{_ENTRY_PORT})?"
    rf"|\[{IPV6_PATTERN}\](?::{_ENTRY_PORT})?|{IPV6_PATTERN})\s*$"
)

AllowHostEntry = Annotated[
    str,
    AfterValidator(normalize_allow_entry),
    WithJsonSchema({"type": "string", "pattern": ALLOW_ENTRY_PATTERN}),
]
AllowHosts = Annotated[
    list[AllowHostEntry],
    Field(max_length=MAX_ENTRIES),
    AfterValidator(lambda entries: list(dict.fromkeys(entries))),
]
