"""The fake Notion for tests: a module-wide fixture with a demo database, and
``NotionConformanceFake``, the fake as the conformance kit drives a provider
(``moat.testing.ProviderFake``: ``allow_entry``, ``effects``, ``lose_answers``,
``rate_limit``, ``call_times``) for ``notion.create_page``.

The kit's connection for it: ``connection_config(fake, database_id)``, a ``notion``
connection to the fake with a mark property; the kit's input: ``{"database_id": …,
"title": …}``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from starter.devstack.providers import FakeNotion, Misbehaviour

MARK = "Moat key"
PROPERTIES = {"Name": "title", MARK: "rich_text", "Status": "select", "Done": "checkbox"}


def connection_config(
    fake: FakeNotion, *, mark: str | None = MARK, version: str = "2025-09-03"
) -> dict[str, Any]:
    """A ``notion`` connection's config for the fake (its secret: any token)."""
    config: dict[str, Any] = {"base_url": f"{fake.base_url}/v1", "notion_version": version}
    if mark is not None:
        config["mark_property"] = mark
    return config


class NotionConformanceFake:
    """The fake Notion as the kit's ``ProviderFake``, counting the pages of one database."""

    def __init__(self, fake: FakeNotion, database_id: str | None = None) -> None:
        self.fake = fake
        self.database_id = database_id or fake.add_database(PROPERTIES, title="Conformance")

    @property
    def allow_entry(self) -> str:
        return self.fake.allow_entry

    def effects(self) -> int:
        """The pages of the database, those in the trash too."""
        return len(self.fake.pages_in(self.database_id))

    def lose_answers(self, count: int) -> None:
        self.fake.fail_next(count, Misbehaviour.DROP)

    def rate_limit(self, count: int, retry_after_seconds: int) -> bool:
        """The next ``count`` calls to ``POST /v1/pages`` answer 429 ``rate_limited`` with
        ``Retry-After`` (Notion limits every endpoint; the kit times the effect's)."""
        self.fake.rate_limit(count, retry_after_seconds, effects_only=True)
        return True

    def call_times(self) -> list[float]:
        """When each call reached ``POST /v1/pages``, performed or refused."""
        with self.fake.lock:
            return list(self.fake.create_times)

    def connection_config(self) -> dict[str, Any]:
        return connection_config(self.fake)

    def input(self, title: str = "Conformance") -> dict[str, Any]:
        return {"database_id": self.database_id, "title": title}


@pytest.fixture(scope="module")
def notion() -> Iterator[FakeNotion]:
    """The fake Notion, one per test module."""
    with FakeNotion() as fake:
        yield fake


@pytest.fixture
def notion_conformance(notion: FakeNotion) -> NotionConformanceFake:
    """A fresh database on the module's fake Notion, as the kit's ``ProviderFake``."""
    return NotionConformanceFake(notion)
