"""The console's page modules, one file each: a module here that defines ``router`` (an
``APIRouter`` of paths under ``/console``) is served, and its ``NAV`` (a ``NavEntry``, or
None for pages outside the navigation) is listed in the navigation. Adding a page is adding
a module; nothing else names it."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from types import ModuleType

from fastapi import APIRouter

from starter.gateway.console.nav import NavEntry


@dataclass(frozen=True)
class Page:
    module: str
    router: APIRouter
    nav: NavEntry | None


def _page_of(module: ModuleType) -> Page | None:
    router = getattr(module, "router", None)
    if not isinstance(router, APIRouter):
        return None
    nav = getattr(module, "NAV", None)
    return Page(module.__name__, router, nav if isinstance(nav, NavEntry) else None)


def discover() -> list[Page]:
    """Every page module of this package, by name."""
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        page = _page_of(importlib.import_module(f"{__name__}.{info.name}"))
        if page is not None:
            found.append(page)
    return found
