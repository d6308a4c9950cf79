"""The email fakes themselves, spoken to with independent clients (the standard library's
smtplib and imaplib, httpx): they must behave as the providers' documentation says, or the
adapter's tests against them prove nothing. And their conformance-kit faces
(``tests.support.mail``) count, lose and refuse as the kit's protocol says."""

from __future__ import annotations

import imaplib
import smtplib
import time
from collections.abc import Iterator
from email.message import EmailMessage

import httpx
import pytest

from starter.devstack.providers import FakeResend
from starter.devstack.providers.mail import FakeMail
from tests.support.mail import ResendConformanceFake, SmtpConformanceFake


@pytest.fixture
def resend() -> Iterator[FakeResend]:
    with FakeResend() as fake:
        yield fake


def _message(message_id: str) -> EmailMessage:
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "a@moat.test", "b@example.test", "hi"
    msg["Message-ID"] = message_id
    msg.set_content("hello")
    return msg


def _search(mail: FakeMail, message_id: str) -> list[bytes]:
    imap = imaplib.IMAP4("127.0.0.1", mail.imap_port)
    try:
        imap.login(mail.username, mail.password)
        assert imap.select('"Sent"', readonly=True)[0] == "OK"
        status, data = imap.search(None, "HEADER", "Message-ID", f'"{message_id}"')
        assert status == "OK"
        return data[0].split()
    finally:
        imap.logout()


def test_smtp_files_what_it_accepts_in_the_imap_sent_mailbox(mail: FakeMail) -> None:
    with smtplib.SMTP("127.0.0.1", mail.smtp_port, timeout=10) as smtp:
        with pytest.raises(smtplib.SMTPSenderRefused):
            smtp.send_message(_message("<nologin@moat.test>"))  # a login is required
        smtp.login(mail.username, mail.password)
        smtp.send_message(_message("<one@moat.test>"))
    assert len(_search(mail, "<one@moat.test>")) == 1
    assert _search(mail, "<other@moat.test>") == []
    with smtplib.SMTP("127.0.0.1", mail.smtp_port, timeout=10) as smtp:
        with pytest.raises(smtplib.SMTPAuthenticationError) as info:
            smtp.login(mail.username, "wrong")
        assert info.value.smtp_code == 535


def test_a_dropped_reply_still_files_the_message(mail: FakeMail) -> None:
    conformance = SmtpConformanceFake(mail)
    before, calls = conformance.effects(), len(conformance.call_times())
    conformance.lose_answers(1)
    smtp = smtplib.SMTP("127.0.0.1", mail.smtp_port, timeout=10)
    smtp.login(mail.username, mail.password)
    with pytest.raises(smtplib.SMTPServerDisconnected):
        smtp.send_message(_message("<dropped@moat.test>"))
    assert len(_search(mail, "<dropped@moat.test>")) == 1
    assert conformance.effects() == before + 1
    assert len(conformance.call_times()) == calls + 1
    assert conformance.rate_limit(1, 2) is False  # SMTP names no wait to honour


def test_refusals_file_nothing(mail: FakeMail) -> None:
    before = len(mail.sent())
    mail.refuse_next(1, 451)
    with smtplib.SMTP("127.0.0.1", mail.smtp_port, timeout=10) as smtp:
        smtp.login(mail.username, mail.password)
        with pytest.raises(smtplib.SMTPRecipientsRefused) as info:
            smtp.send_message(_message("<refused@moat.test>"))
    assert info.value.recipients["b@example.test"][0] == 451
    assert len(mail.sent()) == before


def _post(
    fake: FakeResend, key: str | None, body: dict[str, object], token: str = "re_k"
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if key is not None:
        headers["Idempotency-Key"] = key
    return httpx.post(f"{fake.base_url}/emails", json=body, headers=headers, timeout=10)


EMAIL = {"from": "a@moat.test", "to": ["b@example.test"], "subject": "hi", "text": "x"}


def test_resend_dedupes_by_idempotency_key(resend: FakeResend) -> None:
    first = _post(resend, "k1", EMAIL)
    assert first.status_code == 200 and "id" in first.json()
    again = _post(resend, "k1", EMAIL)
    assert again.json() == first.json() and len(resend.emails) == 1
    other = _post(resend, "k1", EMAIL | {"subject": "changed"})
    assert other.status_code == 409 and other.json()["name"] == "invalid_idempotent_request"
    assert _post(resend, "k2", EMAIL).json() != first.json() and len(resend.emails) == 2


@pytest.mark.parametrize(
    ("key", "body", "token", "status", "name"),
    [
        ("x" * 257, EMAIL, "re_k", 400, "invalid_idempotency_key"),
        ("k", EMAIL, "", 401, "missing_api_key"),
        ("k", EMAIL, "sk_k", 403, "invalid_api_key"),
        ("k", {"from": "a@moat.test", "to": ["b@example.test"]}, "re_k", 422, None),
    ],
)
def test_resend_errors_have_its_shape(
    resend: FakeResend, key: str, body: dict[str, object], token: str, status: int, name: str | None
) -> None:
    answer = _post(resend, key, body, token)
    assert answer.status_code == status
    said = answer.json()
    assert said["statusCode"] == status and said["message"]
    assert said["name"] == (name or "missing_required_field")
    assert resend.emails == []


def test_resend_conformance_face(resend: FakeResend) -> None:
    face = ResendConformanceFake(resend)
    assert face.rate_limit(1, 2) is True
    limited = _post(resend, "k", EMAIL)
    assert limited.status_code == 429 and limited.headers["retry-after"] == "2"
    assert face.effects() == 0
    face.lose_answers(1)
    with pytest.raises(httpx.RemoteProtocolError):
        _post(resend, "k", EMAIL)
    assert face.effects() == 1
    assert _post(resend, "k", EMAIL).json()["id"] == resend.emails[0]["id"]
    times = face.call_times()
    assert len(times) == 3 and times == sorted(times) and times[-1] <= time.monotonic()
