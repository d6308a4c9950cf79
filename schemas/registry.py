"""The capabilities installed: every ``Capability`` declared under the entry point group
``moat.capabilities``, the built-ins among them (``docs/adapters.md``), and the connection
types they declare.

A distribution adds capabilities by naming, under that group, a ``Capability`` or a sequence
of them::

    [project.entry-points."moat.capabilities"]
    acme = "moat_acme_crm.capabilities:CAPABILITIES"

Loading a declaration imports its module and nothing else: the adapter it names is made by
a worker alone (``activities.adapters.plugins``). Two declarations of one capability id and
version, or of one adapter name, are refused at start-up with both entry points named.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points

from schemas.capabilities import BUILTINS, Capability
from schemas.connections import BUILTIN_KINDS, ConnectionKind

GROUP = "moat.capabilities"
BUILTIN_ENTRY_POINT = "builtin"

log = logging.getLogger(__name__)


class CapabilityRegistryError(RuntimeError):
    """An installed declaration that cannot be used: the message names its entry point."""


@functools.cache
def installed() -> tuple[Capability, ...]:
    """Every installed capability, the built-ins first; computed once per process."""
    points = sorted(
        entry_points(group=GROUP), key=lambda p: (p.name != BUILTIN_ENTRY_POINT, p.name)
    )
    found: list[tuple[str, Capability]] = []
    if not any(p.name == BUILTIN_ENTRY_POINT for p in points):
        # A source checkout run without installing the distribution: its entry points are
        # not on record, so the built-ins are read where the entry point would name them.
        log.warning("no %s entry point %r: using the built-ins as they are", GROUP, "builtin")
        found.extend((f"{BUILTIN_ENTRY_POINT} (source)", c) for c in BUILTINS)
    for point in points:
        found.extend((_label(point), c) for c in _load(point))
    return checked(found)


def checked(found: Iterable[tuple[str, Capability]]) -> tuple[Capability, ...]:
    """The declarations, refused when two claim one id and version or one adapter name
    (each given with where it comes from)."""
    by_id: dict[tuple[str, str], str] = {}
    by_adapter: dict[str, tuple[str, str]] = {}
    out: list[Capability] = []
    for where, cap in found:
        spec = cap.spec
        first = by_id.setdefault((spec.id, spec.version), where)
        if first != where:
            raise CapabilityRegistryError(
                f"{spec.id} {spec.version} is declared twice: by {first} and by {where}; "
                "uninstall one, or give the new one another version"
            )
        other = by_adapter.setdefault(spec.adapter, (where, cap.adapter))
        if other[1] != cap.adapter:
            raise CapabilityRegistryError(
                f"the adapter name {spec.adapter!r} is taken by {other[0]}; {where} must name "
                "its adapter otherwise (a spec's `adapter`)"
            )
        out.append(cap)
    return tuple(out)


def _label(point: EntryPoint) -> str:
    dist = point.dist.name if point.dist is not None else "?"
    return f"{dist}'s entry point {point.name} ({point.value})"


def _load(point: EntryPoint) -> tuple[Capability, ...]:
    try:
        value = point.load()
    except Exception as err:
        raise CapabilityRegistryError(
            f"{_label(point)} could not be loaded ({type(err).__name__}: {err}); reinstall or "
            "uninstall that package"
        ) from err
    items = (value,) if isinstance(value, Capability) else value
    if not isinstance(items, Iterable) or isinstance(items, str | bytes):
        items = (items,)
    caps = tuple(items)
    wrong = [c for c in caps if not isinstance(c, Capability)]
    if wrong or not caps:
        raise CapabilityRegistryError(
            f"{_label(point)} must name a schemas.capabilities.Capability or a sequence of "
            f"them, not {type(wrong[0] if wrong else value).__name__}"
        )
    return caps


@functools.cache
def connection_kinds() -> dict[str, ConnectionKind]:
    """Every connection type installed by name: Moat's own and those the installed
    capabilities declare (``Capability.connection_kinds``); one name declared two ways is
    refused."""
    from schemas.oauth import OAUTH2_KIND

    kinds: dict[str, ConnectionKind] = {k.name: k for k in (*BUILTIN_KINDS, OAUTH2_KIND)}
    for cap in installed():
        for kind in cap.connection_kinds:
            known = kinds.setdefault(kind.name, kind)
            if known != kind:
                raise CapabilityRegistryError(
                    f"the connection type {kind.name!r} of {cap.spec.id} is declared otherwise "
                    "by another installed package or by Moat; name it otherwise"
                )
    return kinds
