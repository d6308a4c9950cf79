"""The ``moat`` command line: one module per command group; it prints, the rules it applies
live in ``starter.service``."""

from starter.cli.root import app, main

__all__ = ["app", "main"]
