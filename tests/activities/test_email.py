"""``email.send`` against real mail servers (aiosmtpd filing into a pymap IMAP mailbox) and
the Resend fake, attempt by attempt as the worker drives the adapter (``driven``).

What must hold: one message per key however the attempts go; a connection lost after the
message's last byte is reconciled over IMAP, or ends ``outcome_unknown`` with no mailbox to
read, never a second message; a refusal before the end is safe to repeat and is repeated;
SMTP's replies map onto the taxonomy; the password never shows in a failure."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError

from activities import HostGuard, http_client
from activities.adapters.base import Adapter
from activities.adapters.email import EmailAdapter, message_id_for
from activities.adapters.plugins import driven
from schemas.capabilities import RetrySettings
from schemas.connections import ConnectionCreate, Credential
from schemas.email import CAPABILITIES, EmailSendInput
from schemas.ids import uuid7
from schemas.records import OUTCOME_UNKNOWN
from schemas.run import AdapterInput
from starter.devstack.providers import FakeResend, Misbehaviour
from starter.devstack.providers.mail import FakeMail
from tests.support.mail import MAIL_HOST, SENDER, TestCertificate, smtp_config

DECLARATION = CAPABILITIES[0]
SPEC = DECLARATION.spec.model_copy(
    update={"timeout_seconds": 2.0, "retry": RetrySettings(max_retries=3, base_delay_seconds=0.01)}
)
LAST = SPEC.retry_settings.max_retries + 1
RESEND_KEY = "re_test_" + uuid.uuid4().hex


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    client = http_client()
    yield client
    await client.aclose()


def _input(allow: list[str], data: dict[str, Any] | None = None, **extra: Any) -> AdapterInput:
    return AdapterInput(
        tenant_id="t1",
        receipt_id=str(uuid7()),
        capability=SPEC,
        input=data or {"to": ["ada@example.test"], "subject": "Hello", "text": "Hi Ada."},
        idempotency_key=f"moat-{uuid.uuid4().hex}",
        trace_id="0" * 32,
        http_allow_hosts=allow,
        **extra,
    )


def _again(inp: AdapterInput, attempt: int, **extra: Any) -> AdapterInput:
    return inp.model_copy(update={"attempt": attempt, **extra})


def _allow(mail: FakeMail) -> list[str]:
    return [mail.smtp_allow_entry, mail.imap_allow_entry]


def _smtp(mail: FakeMail, *, imap: bool = True, password: str | None = None) -> Credential:
    return Credential(
        "con_smtp",
        "smtp",
        password or mail.password,
        smtp_config(mail, imap=imap),
    )


def _adapter(http: httpx.AsyncClient, guard: HostGuard | None = None, **kw: Any) -> Adapter:
    return driven(EmailAdapter(http, guard or HostGuard([]), **kw), DECLARATION)


async def _fails(adapter: Adapter, inp: AdapterInput, cred: Credential) -> ApplicationError:
    with pytest.raises(ApplicationError) as info:
        await adapter(inp, cred)
    return info.value


def _details(err: ApplicationError) -> dict[str, Any]:
    first = err.details[0] if err.details else {}
    assert isinstance(first, dict)
    return first


async def test_one_email_is_sent_once_with_its_key_derived_message_id(
    mail: FakeMail, http: httpx.AsyncClient
) -> None:
    inp = _input(
        _allow(mail),
        {
            "to": ["ada@example.test"],
            "cc": ["bob@example.test"],
            "bcc": ["eve@example.test"],
            "subject": "Déploiement terminé",
            "text": "Done.\n.\nA line with a dot.",
            "html": "<p>Done.</p>",
            "reply_to": "ops@example.test",
        },
    )
    out = await _adapter(http)(inp, _smtp(mail))
    message_id = message_id_for(inp.idempotency_key, "moat.test")
    assert out.output == {
        "message_id": message_id,
        "accepted": ["ada@example.test", "bob@example.test", "eve@example.test"],
        "provider_id": None,
        "reconciled": False,
    }
    assert out.reconciled is None
    [filed] = mail.sent(message_id)
    assert filed["rcpt"] == ["ada@example.test", "bob@example.test", "eve@example.test"]
    assert filed["subject"] == "Déploiement terminé" and filed["bcc_header"] is False
    assert filed["from"] == SENDER


def test_the_message_id_is_the_same_for_a_key_and_hides_it() -> None:
    key = "moat-abc"
    assert message_id_for(key, "moat.test") == message_id_for(key, "moat.test")
    assert message_id_for(key, "moat.test") != message_id_for("moat-abd", "moat.test")
    assert key not in message_id_for(key, "moat.test")


async def test_an_answer_lost_after_data_is_reconciled_over_imap(
    mail: FakeMail, http: httpx.AsyncClient
) -> None:
    adapter, cred = _adapter(http), _smtp(mail)
    inp = _input(_allow(mail))
    message_id = message_id_for(inp.idempotency_key, "moat.test")
    mail.fail_next(1, Misbehaviour.DROP)
    err = await _fails(adapter, inp, cred)
    assert err.type == "network_error" and not err.non_retryable
    assert "not_performed" not in _details(err)
    out = await adapter(_again(inp, 2), cred)
    assert out.reconciled is True and out.output["reconciled"] is True
    assert out.output["message_id"] == message_id
    assert len(mail.sent(message_id)) == 1


async def test_a_late_answer_past_the_deadline_is_reconciled_too(
    mail: FakeMail, http: httpx.AsyncClient
) -> None:
    adapter, cred = _adapter(http), _smtp(mail)
    inp = _input(_allow(mail))
    mail.fail_next(1, Misbehaviour.LATE, late_seconds=5)
    err = await _fails(adapter, inp, cred)
    assert err.type == "timeout"
    out = await adapter(_again(inp, 2), cred)
    assert out.reconciled is True
    assert len(mail.sent(message_id_for(inp.idempotency_key, "moat.test"))) == 1


async def test_without_imap_a_lost_answer_ends_outcome_unknown_at_once(
    mail: FakeMail, http: httpx.AsyncClient
) -> None:
    inp = _input(_allow(mail))
    mail.fail_next(1, Misbehaviour.DROP)
    err = await _fails(_adapter(http), inp, _smtp(mail, imap=False))
    assert err.type == OUTCOME_UNKNOWN and err.non_retryable
    assert "IMAP" in err.message
    assert len(mail.sent(message_id_for(inp.idempotency_key, "moat.test"))) == 1


async def test_the_last_attempt_losing_its_answer_ends_outcome_unknown(
    mail: FakeMail, http: httpx.AsyncClient
) -> None:
    inp = _input(_allow(mail))
    mail.fail_next(1, Misbehaviour.DROP)
    err = await _fails(_adapter(http), _again(inp, LAST), _smtp(mail))
    # The look-up found nothing (nothing was sent before), the send lost its answer.
    assert err.type == OUTCOME_UNKNOWN
    assert len(mail.sent(message_id_for(inp.idempotency_key, "moat.test"))) == 1


@pytest.mark.parametrize("imap", [True, False], ids=["imap", "no-imap"])
async def test_a_4xx_before_data_is_safe_to_repeat_and_repeated(
    mail: FakeMail, http: httpx.AsyncClient, imap: bool
) -> None:
    adapter, cred = _adapter(http), _smtp(mail, imap=imap)
    inp = _input(_allow(mail))
    mail.refuse_next(1, 451)
    err = await _fails(adapter, inp, cred)
    assert err.type == "provider_rate_limited" and not err.non_retryable
    assert _details(err)["not_performed"] is True
    assert _details(err)["provider_response"]["smtp_code"] == 451
    out = await adapter(_again(inp, 2), cred)
    assert out.reconciled is False  # looked (or had nothing to look in), then sent
    assert len(mail.sent(message_id_for(inp.idempotency_key, "moat.test"))) == 1


async def test_a_temporary_refusal_on_the_last_attempt_is_no_outcome_unknown(
    mail: FakeMail, http: httpx.AsyncClient
) -> None:
    """Nothing reached the server: the failure stands as what it is."""
    inp = _input(_allow(mail))
    mail.refuse_next(1, 454)
    err = await _fails(_adapter(http), _again(inp, LAST), _smtp(mail))
    assert err.type == "provider_server_error"
    assert not mail.sent(message_id_for(inp.idempotency_key, "moat.test"))


async def test_a_5xx_refusal_is_invalid_input_and_final(
    mail: FakeMail, http: httpx.AsyncClient
) -> None:
    inp = _input(_allow(mail))
    mail.refuse_next(1, 550)
    err = await _fails(_adapter(http), inp, _smtp(mail))
    assert err.type == "provider_invalid_input" and err.non_retryable
    assert err.message == "the SMTP server refused RCPT with 550"
    assert not mail.sent(message_id_for(inp.idempotency_key, "moat.test"))


async def test_a_wrong_password_is_an_auth_failure_that_never_shows_it(
    mail: FakeMail, http: httpx.AsyncClient
) -> None:
    wrong = "wrong-" + uuid.uuid4().hex
    inp = _input(_allow(mail))
    err = await _fails(_adapter(http), inp, _smtp(mail, password=wrong))
    assert err.type == "provider_auth_failure" and err.non_retryable
    assert wrong not in err.message and wrong not in json.dumps(err.details)
    assert mail.username in mail.logins


async def test_a_resumed_run_without_imap_cannot_tell_and_sends_nothing(
    mail: FakeMail, http: httpx.AsyncClient
) -> None:
    before = len(mail.transactions)
    err = await _fails(_adapter(http), _input(_allow(mail), resumed=True), _smtp(mail, imap=False))
    assert err.type == OUTCOME_UNKNOWN
    assert len(mail.transactions) == before


async def test_a_resumed_run_with_imap_finds_the_earlier_message(
    mail: FakeMail, http: httpx.AsyncClient
) -> None:
    adapter, cred = _adapter(http), _smtp(mail)
    inp = _input(_allow(mail))
    await adapter(inp, cred)
    before = len(mail.transactions)
    out = await adapter(_again(inp, 1, resumed=True), cred)
    assert out.reconciled is True and len(mail.transactions) == before


async def test_an_unencrypted_server_must_be_allow_listed(
    mail: FakeMail, http: httpx.AsyncClient
) -> None:
    """A public address passes the host guard, but not with the password in clear."""

    async def public(host: str, port: int) -> list[str]:
        return ["93.184.216.34"]

    cred = Credential(
        "con_smtp",
        "smtp",
        "pw",
        {"host": "smtp.example.com", "port": 25, "security": "none", "username": "u"}
        | {"from": SENDER},
    )
    err = await _fails(_adapter(http, HostGuard([], public)), _input([]), cred)
    assert err.type == "host_not_allowed" and err.non_retryable


async def test_a_private_server_not_allow_listed_is_refused(
    mail: FakeMail, http: httpx.AsyncClient
) -> None:
    err = await _fails(_adapter(http), _input([]), _smtp(mail))
    assert err.type == "host_not_allowed"


async def test_starttls_checks_the_certificate_for_the_configured_name(
    mail_tls: FakeMail, mail_certificate: TestCertificate, http: httpx.AsyncClient
) -> None:
    async def loopback(host: str, port: int) -> list[str]:
        assert host == MAIL_HOST
        return ["127.0.0.1"]

    guard = HostGuard([], loopback)
    cred = Credential(
        "con_tls",
        "smtp",
        mail_tls.password,
        smtp_config(mail_tls, imap=False, host=MAIL_HOST),
    )
    inp = _input([mail_tls.smtp_allow_entry])
    out = await _adapter(http, guard, tls=mail_certificate.trust())(inp, cred)
    assert len(mail_tls.sent(out.output["message_id"])) == 1
    # A server whose certificate the worker does not trust is never given the password.
    logins = len(mail_tls.logins)
    err = await _fails(_adapter(http, guard), _input([mail_tls.smtp_allow_entry]), cred)
    assert err.type == "network_error" and _details(err)["not_performed"] is True
    assert len(mail_tls.logins) == logins


async def _loopback(host: str, port: int) -> list[str]:
    assert host == MAIL_HOST
    return ["127.0.0.1"]


async def test_imap_over_starttls_reconciles_a_lost_answer(
    mail_tls: FakeMail, mail_certificate: TestCertificate, http: httpx.AsyncClient
) -> None:
    config = smtp_config(mail_tls, host=MAIL_HOST)
    config["imap"] |= {"host": MAIL_HOST, "security": "starttls"}
    cred = Credential("con_tls", "smtp", mail_tls.password, config)
    adapter = _adapter(http, HostGuard([], _loopback), tls=mail_certificate.trust())
    inp = _input(_allow(mail_tls))
    mail_tls.fail_next(1, Misbehaviour.DROP)
    await _fails(adapter, inp, cred)
    out = await adapter(_again(inp, 2), cred)
    assert out.reconciled is True
    assert len(mail_tls.sent(out.output["message_id"])) == 1


async def test_smtp_over_tls_from_the_first_byte(
    mail_certificate: TestCertificate, http: httpx.AsyncClient
) -> None:
    with FakeMail(tls=mail_certificate.server(), implicit_tls=True) as implicit:
        config = smtp_config(implicit, imap=False, host=MAIL_HOST) | {"security": "tls"}
        cred = Credential("con_tls", "smtp", implicit.password, config)
        adapter = _adapter(http, HostGuard([], _loopback), tls=mail_certificate.trust())
        out = await adapter(_input([implicit.smtp_allow_entry]), cred)
        assert len(implicit.sent(out.output["message_id"])) == 1


async def test_a_connection_without_username_logs_in_nowhere(
    mail: FakeMail, http: httpx.AsyncClient
) -> None:
    config = smtp_config(mail, imap=False)
    del config["username"]
    logins = len(mail.logins)
    cred = Credential("con_relay", "smtp", "unused", config)
    err = await _fails(_adapter(http), _input(_allow(mail)), cred)
    # This server takes no mail without a login: MAIL is refused, nothing was sent.
    assert err.type == "provider_auth_failure" and err.message.endswith("MAIL with 530")
    assert len(mail.logins) == logins


async def test_an_unreachable_server_is_a_retryable_failure_before_sending(
    http: httpx.AsyncClient,
) -> None:
    cred = Credential(
        "con_x",
        "smtp",
        "pw",
        {"host": "127.0.0.1", "port": 9, "security": "none", "username": "u", "from": SENDER},
    )
    err = await _fails(_adapter(http), _again(_input(["127.0.0.1:9"]), LAST), cred)
    assert err.type == "network_error" and _details(err)["not_performed"] is True


# --- the input and the connection ---------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"to": [], "subject": "s", "text": "t"},
        {"to": ["a@b.test"], "subject": "s"},
        {"to": ["a@b.test"], "subject": "Hi\r\nBcc: eve@evil.test", "text": "t"},
        {"to": ["a@b.test\r\nRCPT TO:<eve@evil.test>"], "subject": "s", "text": "t"},
        {"to": ["a@b.test>"], "subject": "s", "text": "t"},
        {"to": ["Ada <a@b.test>"], "subject": "s", "text": "t"},
        {"to": ["a@b.test"], "reply_to": "x@y.test\nBcc: e@v.test", "subject": "s", "text": "t"},
        {"to": [f"u{i}@b.test" for i in range(30)], "bcc": [f"v{i}@b.test" for i in range(21)]}
        | {"subject": "s", "text": "t"},
        {"to": ["a@b.test"], "subject": "s", "text": "t", "from": "x@y.test"},
    ],
)
def test_inputs_that_could_inject_or_overflow_are_refused_without_echo(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as info:
        EmailSendInput.model_validate(bad)
    assert "evil" not in str(info.value) and "Bcc:" not in str(info.value)


@pytest.mark.parametrize(
    "config",
    [
        {"host": "mail.test", "username": "u"},
        {"host": "mail.test", "username": "u", "from": "a@b.test", "security": "ssl"},
        {"host": "mail test", "username": "u", "from": "a@b.test"},
        {"host": "mail.test", "username": "u", "from": "a@b.test", "port": 0},
        {"host": "mail.test", "username": "u", "from": "a@b.test", "imap": {"port": 993}},
        {"host": "mail.test", "from": "a@b.test", "imap": {"host": "imap.test"}},
        {
            "host": "mail.test",
            "username": "u",
            "from": "a@b.test",
            "imap": {"host": "imap.test", "mailbox": 'Se"nt'},
        },
    ],
)
def test_an_smtp_connection_config_is_checked_when_created(config: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ConnectionCreate(type="smtp", name="mail", secret="pw", config=config)


def test_an_smtp_connection_needs_no_base_url() -> None:
    made = ConnectionCreate(
        type="smtp",
        name="mail",
        secret="pw",
        config={"host": "mail.test", "username": "u", "from": "a@b.test"},
    )
    assert made.config["host"] == "mail.test"
    resend = ConnectionCreate(type="resend", name="r", secret="re_x", config={"from": "a@b.test"})
    assert resend.config == {"from": "a@b.test"}
    with pytest.raises(ValidationError):
        ConnectionCreate(type="resend", name="r", secret="re_x", config={})


# --- Resend -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def resend() -> Any:
    with FakeResend() as fake:
        yield fake


def _resend(fake: FakeResend, key: str = RESEND_KEY) -> Credential:
    return Credential("con_resend", "resend", key, {"base_url": fake.base_url, "from": SENDER})


async def test_resend_sends_once_with_the_downstream_key(
    resend: FakeResend, http: httpx.AsyncClient
) -> None:
    inp = _input([resend.allow_entry])
    out = await _adapter(http)(inp, _resend(resend))
    [sent] = [e for e in resend.emails if e["id"] == out.output["provider_id"]]
    assert sent["from"] == SENDER and sent["to"] == ["ada@example.test"]
    [call] = [r for r in resend.calls("/emails") if r.headers.get("idempotency-key")][-1:]
    assert call.headers["idempotency-key"] == inp.idempotency_key
    assert call.headers["authorization"] == f"Bearer {RESEND_KEY}"


async def test_resend_lost_answer_is_answered_by_the_key_on_retry(
    resend: FakeResend, http: httpx.AsyncClient
) -> None:
    adapter, cred = _adapter(http), _resend(resend)
    inp = _input([resend.allow_entry])
    before = len(resend.emails)
    resend.fail_next(1, Misbehaviour.DROP)
    err = await _fails(adapter, inp, cred)
    assert err.type == "network_error"
    out = await adapter(_again(inp, 2), cred)
    assert len(resend.emails) == before + 1
    assert out.output["provider_id"] == resend.emails[-1]["id"]


async def test_resend_rate_limit_carries_its_wait(
    resend: FakeResend, http: httpx.AsyncClient
) -> None:
    resend.rate_limit_next, resend.retry_after = 1, 3
    err = await _fails(_adapter(http), _input([resend.allow_entry]), _resend(resend))
    assert err.type == "provider_rate_limited" and not err.non_retryable
    assert err.next_retry_delay is not None and err.next_retry_delay.total_seconds() == 3


async def test_resend_refuses_a_bad_key(resend: FakeResend, http: httpx.AsyncClient) -> None:
    err = await _fails(_adapter(http), _input([resend.allow_entry]), _resend(resend, "sk_wrong"))
    assert err.type == "provider_auth_failure" and err.non_retryable
    assert "invalid_api_key" in err.message


async def test_resend_refuses_a_reused_key_with_another_payload(
    resend: FakeResend, http: httpx.AsyncClient
) -> None:
    adapter, cred = _adapter(http), _resend(resend)
    inp = _input([resend.allow_entry])
    await adapter(inp, cred)
    other = inp.model_copy(
        update={"input": {"to": ["bob@example.test"], "subject": "x", "text": "y"}}
    )
    err = await _fails(adapter, other, cred)
    assert err.type == "provider_invalid_input" and err.non_retryable
    assert "invalid_idempotent_request" in err.message
