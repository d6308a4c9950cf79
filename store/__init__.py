"""Postgres: tables, migrations and the queries the activities and gateway use."""

from store import repository
from store.db import make_engine, make_sessionmaker, upgrade

__all__ = ["make_engine", "make_sessionmaker", "repository", "upgrade"]
