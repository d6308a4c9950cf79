"""Floor 1, durable state: Postgres (tables, migrations, one query module per aggregate)
and the files Moat keeps (run manifests; keyrings under ``store.keyrings``).

Query functions take the session first and only flush: the caller (a request, an activity
attempt) owns the transaction. Every transaction of the application role names its tenant
first (``store.tenancy.set_tenant``); row-level security shows it nothing else.
"""

from store.db import make_engine, make_sessionmaker, upgrade

__all__ = ["make_engine", "make_sessionmaker", "upgrade"]
