"""An SMTP connection's password reaches no store: sent to the SMTP server (AUTH) and the
IMAP server (LOGIN, by the look-up after a dropped answer), and found in none of the HTTP
answers, Postgres (rows and files), Temporal's history and database file, the manifests,
Moat's logs or spans (``tests.system.test_secrets``)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.testing import WorkflowEnvironment

from starter.devstack import EmbeddedPostgres
from starter.devstack.providers import Misbehaviour
from starter.devstack.providers.mail import FakeMail
from tests.support.mail import smtp_config
from tests.support.stack import Stack, StackFactory
from tests.system import test_secrets as secrets

PASSWORD = "smtp-pw-" + uuid.uuid4().hex
# The fake servers' own loggers (their debug lines repeat what they were sent): not Moat's.
FAKE_LOGGERS = ("mail.log", "pymap")

temporal_on_disk = secrets.temporal_on_disk


@pytest.fixture(scope="module")
def secret_mail() -> Iterator[FakeMail]:
    with FakeMail(password=PASSWORD) as fake:
        yield fake


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    make_stack: StackFactory,
    secret_mail: FakeMail,
    temporal_on_disk: tuple[WorkflowEnvironment, Path],
) -> AsyncIterator[Stack]:
    allow = [secret_mail.smtp_allow_entry, secret_mail.imap_allow_entry]
    async with make_stack(http_allow_hosts=allow, temporal_env=temporal_on_disk[0]) as s:
        yield s


async def test_an_smtp_password_reaches_no_store(
    stack: Stack,
    secret_mail: FakeMail,
    postgres_server: EmbeddedPostgres,
    temporal_on_disk: tuple[WorkflowEnvironment, Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    email = {"to": ["ada@example.test"], "subject": "secret-free", "text": "hello"}
    with secrets.captured_logs(caplog) as json_lines, secrets.captured_spans() as spans:
        for name in FAKE_LOGGERS:
            caplog.set_level(logging.WARNING, logger=name)
        con = await stack.add_connection(
            "smtp", PASSWORD, config=smtp_config(secret_mail, imap=True)
        )
        runs = [await stack.execute("email.send", email, connection_id=con)]
        secret_mail.fail_next(1, Misbehaviour.DROP)
        runs.append(await stack.execute("email.send", email | {"subject": "x"}, connection_id=con))
    assert [r.json()["status"] for r in runs] == ["executed", "executed"], [r.text for r in runs]
    assert runs[1].json()["output"]["reconciled"] is True  # the IMAP login happened
    assert secret_mail.logins.count(secret_mail.username) >= 2
    for run in runs:
        assert PASSWORD not in run.text
    await secrets.assert_nowhere_at_rest(
        (PASSWORD,),
        answer=runs[1],
        stack=stack,
        workflows=[(r.json()["workflow_id"], r.json()["run_id"]) for r in runs],
        data_dir=postgres_server.data_dir,
        temporal_dir=temporal_on_disk[1],
        logs=caplog.text + json_lines.getvalue(),
        spans=spans.get_finished_spans(),
    )
