"""``email.send`` end to end: gateway, workflow, the real activities and Postgres, an SMTP
server filing into an IMAP mailbox (``tests.support.mail``) and the Resend fake.

One email per execution: when the server drops its answer to the message's end, the retry
finds the message over IMAP (``reconciled``), or, with no mailbox to read, the execution
ends ``outcome_unknown`` with the one message sent; a reset of the finished run sends
nothing; the Message-ID is in the signed manifest."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from activities.adapters.email import message_id_for
from schemas.capabilities import BUILTIN_CAPABILITIES, CapabilityCatalog, RetrySettings
from schemas.email import EMAIL_SEND
from schemas.events import EffectOrigin, EventType, effect_origin
from starter.devstack.providers import FakeResend, Misbehaviour
from starter.devstack.providers.mail import FakeMail
from tests.support.mail import SENDER, smtp_config
from tests.support.stack import Stack, StackFactory
from tests.workflows.test_reconcile import _events
from tests.workflows.test_replay import reset

FAST = EMAIL_SEND.model_copy(
    update={"timeout_seconds": 3.0, "retry": RetrySettings(max_retries=3, base_delay_seconds=0.05)}
)
CATALOG = CapabilityCatalog((*BUILTIN_CAPABILITIES, FAST))


@pytest.fixture(scope="module")
def resend() -> Any:
    with FakeResend() as fake:
        yield fake


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    make_stack: StackFactory, mail: FakeMail, resend: FakeResend
) -> AsyncIterator[Stack]:
    allow = [mail.smtp_allow_entry, mail.imap_allow_entry, resend.allow_entry]
    async with make_stack(catalog=CATALOG, http_allow_hosts=allow) as s:
        yield s


async def _smtp(stack: Stack, mail: FakeMail, *, imap: bool = True) -> str:
    return await stack.add_connection("smtp", mail.password, config=smtp_config(mail, imap=imap))


def _email(subject: str = "Deployed") -> dict[str, Any]:
    return {"to": ["ada@example.test"], "subject": subject, "text": "v2 is live."}


async def test_an_email_is_sent_once_and_its_message_id_is_in_the_manifest(
    stack: Stack, mail: FakeMail
) -> None:
    con = await _smtp(stack, mail)
    r = await stack.execute("email.send", _email(), connection_id=con)
    assert r.status_code == 200, r.text
    envelope = r.json()
    assert envelope["status"] == "executed"
    message_id = envelope["output"]["message_id"]
    assert message_id.endswith("@moat.test>")
    assert envelope["output"]["accepted"] == ["ada@example.test"]
    assert len(mail.sent(message_id)) == 1
    manifest = await stack.http.get(
        f"{stack.url}/v1/executions/{envelope['receipt_id']}/manifest",
        headers={"Authorization": f"Bearer {stack.api_key}"},
    )
    assert manifest.status_code == 200, manifest.text
    [tool] = manifest.json()["tools"]
    assert tool["tool_name"] == "email.send"
    assert tool["result"]["data"]["message_id"] == message_id, tool


async def test_a_dropped_answer_leaves_one_message_found_over_imap(
    stack: Stack, mail: FakeMail
) -> None:
    con = await _smtp(stack, mail)
    mail.fail_next(1, Misbehaviour.DROP)
    r = await stack.execute("email.send", _email("dropped"), connection_id=con)
    envelope = r.json()
    assert envelope["status"] == "executed", r.text
    assert envelope["output"]["reconciled"] is True
    [message] = mail.sent(envelope["output"]["message_id"])
    assert message["subject"] == "dropped"
    events = await _events(stack, envelope["receipt_id"])
    [found] = [e for e in events if e.event_type == EventType.EFFECT_RECONCILED]
    assert found.event_data["found"] is True
    assert effect_origin(events) == EffectOrigin.RECONCILED


async def test_without_imap_a_dropped_answer_ends_outcome_unknown_with_one_message(
    stack: Stack, mail: FakeMail
) -> None:
    con = await _smtp(stack, mail, imap=False)
    key = f"k-{uuid.uuid4().hex}"
    before = len(mail.sent())
    mail.fail_next(1, Misbehaviour.DROP)
    r = await stack.execute("email.send", _email("no imap"), key=key, connection_id=con)
    envelope = r.json()
    assert envelope["status"] == "failed", r.text
    assert envelope["error"]["code"] == "outcome_unknown"
    assert len(mail.sent()) == before + 1
    events = await _events(stack, envelope["receipt_id"])
    assert effect_origin(events) == EffectOrigin.OUTCOME_UNKNOWN
    # Asked again with the key: the recorded answer, never a second message.
    again = await stack.execute("email.send", _email("no imap"), key=key, connection_id=con)
    assert again.json()["receipt_id"] == envelope["receipt_id"]
    assert len(mail.sent()) == before + 1


@pytest.mark.parametrize("imap", [True, False], ids=["imap", "no-imap"])
async def test_a_reset_of_a_finished_run_sends_nothing_more(
    stack: Stack, mail: FakeMail, imap: bool
) -> None:
    con = await _smtp(stack, mail, imap=imap)
    key = f"k-{uuid.uuid4().hex}"
    first = (await stack.execute("email.send", _email("reset"), key=key, connection_id=con)).json()
    assert first["status"] == "executed"
    message_id = first["output"]["message_id"]
    transactions = len(mail.transactions)
    for kind in ("FirstWorkflowTask", "LastWorkflowTask"):
        run = (await stack.client.get_workflow_handle(first["workflow_id"]).describe()).run_id
        await reset(stack, first["workflow_id"], run, kind)
        assert len(mail.sent(message_id)) == 1
    assert len(mail.transactions) == transactions  # the server was not even called
    again = await stack.execute("email.send", _email("reset"), key=key, connection_id=con)
    assert again.json()["output"]["message_id"] == message_id


async def test_the_message_id_is_derived_from_the_downstream_key(
    stack: Stack, mail: FakeMail
) -> None:
    """A first attempt refused before the message (451) and a second that sends: both carry
    the Message-ID the manifest's downstream key gives."""
    con = await _smtp(stack, mail, imap=False)
    mail.refuse_next(1, 451)
    r = await stack.execute("email.send", _email("refused once"), connection_id=con)
    envelope = r.json()
    assert envelope["status"] == "executed", r.text
    manifest = (
        await stack.http.get(
            f"{stack.url}/v1/executions/{envelope['receipt_id']}/manifest",
            headers={"Authorization": f"Bearer {stack.api_key}"},
        )
    ).json()
    [tool] = manifest["tools"]
    expected = message_id_for(tool["idempotency_token"], "moat.test")
    assert envelope["output"]["message_id"] == expected
    assert len(mail.sent(expected)) == 1


async def test_a_duplicate_storm_with_a_dropped_answer_sends_one_message(
    stack: Stack, mail: FakeMail
) -> None:
    con = await _smtp(stack, mail)
    key = f"storm-{uuid.uuid4().hex}"
    mail.fail_next(1, Misbehaviour.DROP)
    responses = await asyncio.gather(
        *(
            stack.execute("email.send", _email("storm"), key=key, connection_id=con)
            for _ in range(50)
        )
    )
    assert {r.status_code for r in responses} == {200}
    assert len({r.json()["receipt_id"] for r in responses}) == 1
    [message_id] = {r.json()["output"]["message_id"] for r in responses}
    assert len(mail.sent(message_id)) == 1


async def test_resend_lost_answer_leaves_one_email(stack: Stack, resend: FakeResend) -> None:
    con = await stack.add_connection(
        "resend", "re_stack_key", config={"base_url": resend.base_url, "from": SENDER}
    )
    before = len(resend.emails)
    resend.fail_next(1, Misbehaviour.DROP)
    r = await stack.execute("email.send", _email("via resend"), connection_id=con)
    envelope = r.json()
    assert envelope["status"] == "executed", r.text
    assert len(resend.emails) == before + 1
    assert envelope["output"]["provider_id"] == resend.emails[-1]["id"]
