"""The console's navigation: each page module declares its entry (``NAV = NavEntry(...)``)
beside its router, and the base template lists the entries the signed-in principal's
scopes open, in ``order``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from schemas.scopes import missing_scopes


@dataclass(frozen=True)
class NavEntry:
    """A link of the console's navigation: ``label`` at ``path``, shown to a principal
    holding ``scopes`` (every one), in ascending ``order``."""

    label: str
    path: str
    scopes: tuple[str, ...] = ()
    order: int = 100


def visible(entries: Iterable[NavEntry], held: Sequence[str]) -> list[NavEntry]:
    """The entries a principal with scopes ``held`` may open, in order."""
    return sorted(
        (e for e in entries if not missing_scopes(list(held), e.scopes)),
        key=lambda e: (e.order, e.label),
    )
