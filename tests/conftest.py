"""The suite's fixtures (``tests.support``) for every test, and the ``integration`` marker,
derived rather than written by hand so it cannot drift: a test is an integration test when
it uses the session's servers (PostgreSQL, Temporal) through its fixtures, or lives in
``tests/devstack`` or ``tests/browser`` (whose tests start servers of their own). ``make
test-unit`` runs the others, and any of those that starts a server anyway fails, naming the
marker. A test that opens pages in Chromium (the ``browser`` fixture) is marked ``browser``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = [
    # The conformance kit (its checks run in tests/conformance), whose servers the suite's
    # fixtures name (tests/support/stack.py).
    "moat.testing",
    "tests.support.stack",
    "tests.support.browser",
    "tests.support.console",
    "tests.support.tls",
    "tests.support.sandbox",
    "tests.support.mail",
    "tests.support.notion",
]

# Fixtures that start (or stand on) the session's real servers.
SERVER_FIXTURES = frozenset(
    {"postgres_server", "temporal", "moat_postgres_server", "moat_temporal"}
)
# Folders whose tests start servers themselves.
SERVER_FOLDERS = (Path(__file__).parent / "devstack", Path(__file__).parent / "browser")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        path = Path(str(item.path))
        if fixtures & SERVER_FIXTURES or any(path.is_relative_to(f) for f in SERVER_FOLDERS):
            item.add_marker(pytest.mark.integration)
        if "browser" in fixtures:
            item.add_marker(pytest.mark.browser)


@pytest.fixture(autouse=True)
def _unit_tests_start_no_server(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """A test left unmarked that starts a server fails, instead of slowing the unit run."""
    if request.node.get_closest_marker("integration") is not None:
        yield
        return
    from starter.devstack.postgres import EmbeddedPostgres
    from starter.devstack.temporal import TemporalDevServer

    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError(
            "this test starts a server: use the session's fixtures (or move it to "
            "tests/devstack) so that it is marked integration"
        )

    monkeypatch.setattr(EmbeddedPostgres, "start", refuse)
    monkeypatch.setattr(TemporalDevServer, "start", refuse)
    yield
