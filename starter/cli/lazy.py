"""A command group that names its commands without importing them: each command's name and
one-line help are written down, and its module is imported only when the command runs (or
its own ``--help`` or completion is asked for). ``moat --help`` and ``moat execute`` then
pay for the modules they use, not for the database, Temporal and the gateway."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup


@dataclass(frozen=True)
class Lazy:
    """A command of the root: ``target`` is ``module:attribute``, a Typer app (a group) or a
    function (a command); ``help`` is the line ``moat --help`` shows for it."""

    name: str
    target: str
    help: str
    hidden: bool = False
    role: str | None = None  # a command's class in ``starter.cli.identity`` (AsTenant…)


class Placeholder(TyperCommand):
    """What ``moat --help`` and completion list: the name and its help line, nothing loaded."""

    def __init__(self, entry: Lazy) -> None:
        super().__init__(entry.name, short_help=entry.help, help=entry.help, hidden=entry.hidden)
        self.entry = entry

    def load(self) -> Any:
        """The real command, its module imported."""
        module, attribute = self.entry.target.split(":")
        found = getattr(importlib.import_module(module), attribute)
        if isinstance(found, typer.Typer):
            return typer.main.get_command(found)
        single = typer.Typer(add_completion=False)  # completion is the root's
        role = self.entry.role
        cls = getattr(importlib.import_module("starter.cli.identity"), role) if role else None
        single.command(self.entry.name, cls=cls)(found)
        return typer.main.get_command(single)


class LazyGroup(TyperGroup):
    """The root group: its commands are ``LAZY`` placeholders until one is resolved."""

    entries: tuple[Lazy, ...] = ()

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for entry in self.entries:
            self.commands[entry.name] = Placeholder(entry)

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if isinstance(command, Placeholder):
            command = command.load()
        return name, command, rest


def lazy_group(*entries: Lazy) -> type[LazyGroup]:
    """A ``LazyGroup`` class holding ``entries``, for ``typer.Typer(cls=...)``."""
    return type("MoatGroup", (LazyGroup,), {"entries": entries})
