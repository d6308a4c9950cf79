"""Which addresses an outbound call may reach without being allow-listed.

``ipaddress``'s ``is_global`` changes between Python versions (3.11 calls NAT64, 6to4,
IPv4-compatible and site-local IPv6 addresses global, and most of 192.0.0.0/24), so the
ranges that lead into private networks are denied here explicitly; ``is_global`` only
decides what this list does not name. An IPv4-mapped IPv6 address is judged by its IPv4
address, since that is where a connection to it goes.
"""

from __future__ import annotations

import ipaddress

from schemas.hosts import Address, judged_address

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
