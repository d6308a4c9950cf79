"""Which addresses an outbound call may reach without being allow-listed, and which hosts
are address literals. The webhook check at subscription and the worker's host guard at
every call both judge a literal with these functions, so a URL refused at one is refused at
the other.

``ipaddress``'s ``is_global`` changes between Python versions (3.11 calls NAT64, 6to4,
IPv4-compatible and site-local IPv6 addresses global, and most of 192.0.0.0/24), so the
ranges that lead into private networks are denied here explicitly; ``is_global`` only
decides what this list does not name. An IPv4-mapped IPv6 address is judged by its IPv4
address, since that is where a connection to it goes.
"""

from __future__ import annotations

import ipaddress
import re

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# One part of an IPv4 literal as a resolver's inet_aton reads it: hex, octal or decimal.
_IPV4_PART = re.compile(r"0x[0-9a-f]+|0[0-7]*|[1-9][0-9]*", re.IGNORECASE)
_MAX_PART_CHARS = 34  # "0x" and a 32-bit value in octal, with room; longer is no address


def judged_address(address: Address) -> Address:
    """The address a connection really reaches: an IPv4-mapped IPv6 address
    (``::ffff:a.b.c.d``) is its IPv4 address."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _inet_aton(host: str) -> ipaddress.IPv4Address | None:
    """``host`` as the system resolver reads an IPv4 literal: one to four parts, each hex
    (``0x7f``), octal (``0177``) or decimal, the last filling the bytes left, so
    ``2130706433``, ``127.1`` and ``0x7f.1`` are all 127.0.0.1. None when it is not one."""
    parts = host.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values = []
    for part in parts:
        if len(part) > _MAX_PART_CHARS or not _IPV4_PART.fullmatch(part):
            return None
        base = 16 if part[:2].lower() == "0x" else 8 if len(part) > 1 and part[0] == "0" else 10
        values.append(int(part, base))
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (4 - len(head)):
        return None
    number = last
    for i, value in enumerate(head):
        number |= value << (8 * (3 - i))
    return ipaddress.IPv4Address(number)


def literal_address(host: str) -> Address | None:
    """The address ``host`` names when it is an address literal in any form a resolver or
    an HTTP client accepts (IPv6 with or without brackets, a final dot, the IPv4 shorthands
    of ``_inet_aton``), judged (``judged_address``); None for a name."""
    text = host.strip().lower().removesuffix(".")
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return judged_address(ipaddress.ip_address(text.split("%")[0]))
    except ValueError:
        pass
    return _inet_aton(text)


DENIED_IPV4 = tuple(
    ipaddress.IPv4Network(net)
    for net in (
        "0.0.0.0/8",  # "this network"; 0.0.0.0 reaches the local host
        "10.0.0.0/8",  # private
        "100.64.0.0/10",  # carrier-grade NAT, shared address space
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local, cloud metadata services
        "172.16.0.0/12",  # private
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",  # documentation
        "192.88.99.0/24",  # 6to4 relay anycast
        "192.168.0.0/16",  # private
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # documentation
        "203.0.113.0/24",  # documentation
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved
        "255.255.255.255/32",  # limited broadcast
    )
)

DENIED_IPV6 = tuple(
    ipaddress.IPv6Network(net)
    for net in (
        "::/96",  # unspecified, loopback and IPv4-compatible ::a.b.c.d (tunnels to IPv4)
        "64:ff9b::/96",  # NAT64: reaches the embedded IPv4 address
        "64:ff9b:1::/48",  # local-use NAT64
        "100::/64",  # discard-only
        "2001::/23",  # IETF protocol assignments, Teredo tunnels among them
        "2001:db8::/32",  # documentation
        "2002::/16",  # 6to4: reaches the embedded IPv4 address
        "3fff::/20",  # documentation
        "5f00::/16",  # segment routing
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated, still routed on some networks)
        "ff00::/8",  # multicast
    )
)


def is_public(address: Address) -> bool:
    """Whether ``address`` may be called without an allow-list entry."""
    address = judged_address(address)
    if isinstance(address, ipaddress.IPv4Address):
        if any(address in net for net in DENIED_IPV4):
            return False
    elif any(address in net for net in DENIED_IPV6):
        return False
    return address.is_global and not address.is_multicast
