"""The mail servers ``email.send`` is tested against, and their conformance fakes.

``mail`` (fixture, per module): the SMTP + IMAP pair of ``starter.devstack.providers.mail``
on loopback, plain (``security: none``, so its port must be allow-listed). ``mail_tls``: the
same over STARTTLS with a certificate for ``MAIL_HOST``, which ``trust`` verifies.

``SmtpConformanceFake`` and ``ResendConformanceFake`` (fixtures ``smtp_conformance``,
``resend_conformance``) implement the conformance kit's
provider-fake protocol (``allow_entry``, ``effects``, ``lose_answers``, ``rate_limit``,
``call_times``); ``connection`` gives the connection (type, secret, config) the kit's runs
create to reach them.
"""

from __future__ import annotations

import datetime as dt
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from starter.devstack.providers import FakeResend, Misbehaviour
from starter.devstack.providers.mail import FakeMail

# The name the TLS test server's certificate holds (resolved to 127.0.0.1 by the tests).
MAIL_HOST = "mail.moat.test"
SENDER = "agent@moat.test"


@dataclass(frozen=True)
class TestCertificate:
    __test__ = False  # not a test class
    cert_file: Path
    key_file: Path

    def server(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def trust(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cert_file))


def make_certificate(directory: Path, name: str = MAIL_HOST) -> TestCertificate:
    """A self-signed certificate for ``name``, valid for an hour."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    made = TestCertificate(directory / "mail-cert.pem", directory / "mail-key.pem")
    made.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    made.key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return made


def smtp_config(mail: FakeMail, *, imap: bool = True, host: str = "127.0.0.1") -> dict[str, Any]:
    """An ``smtp`` connection's config reaching ``mail`` (its IMAP Sent mailbox too unless
    ``imap`` is False)."""
    security = "starttls" if host != "127.0.0.1" else "none"
    config: dict[str, Any] = {
        "host": host,
        "port": mail.smtp_port,
        "security": security,
        "username": mail.username,
        "from": SENDER,
    }
    if imap:
        config["imap"] = {
            "host": "127.0.0.1",
            "port": mail.imap_port,
            "security": "none",
            "mailbox": "Sent",
        }
    return config


@pytest.fixture(scope="module")
def mail() -> Iterator[FakeMail]:
    with FakeMail() as fake:
        yield fake


@pytest.fixture(scope="module")
def mail_certificate(tmp_path_factory: pytest.TempPathFactory) -> TestCertificate:
    return make_certificate(tmp_path_factory.mktemp("mail-tls"))


@pytest.fixture(scope="module")
def mail_tls(mail_certificate: TestCertificate) -> Iterator[FakeMail]:
    with FakeMail(tls=mail_certificate.server()) as fake:
        yield fake


class SmtpConformanceFake:
    """The SMTP + IMAP pair as the conformance kit drives it. SMTP has no rate limit with a
    wait to honour (a 4xx reply names none): ``rate_limit`` answers False."""

    def __init__(self, mail: FakeMail, *, imap: bool = True) -> None:
        self.mail = mail
        self.imap = imap

    @property
    def allow_entry(self) -> str:
        return self.mail.smtp_allow_entry

    @property
    def allow_entries(self) -> tuple[str, ...]:
        """Every entry the adapter needs: SMTP's and IMAP's ports."""
        return (self.mail.smtp_allow_entry, self.mail.imap_allow_entry)

    def connection(self) -> tuple[str, str, dict[str, Any]]:
        return "smtp", self.mail.password, smtp_config(self.mail, imap=self.imap)

    def effects(self) -> int:
        return len(self.mail.sent())

    def lose_answers(self, count: int) -> None:
        self.mail.fail_next(count, Misbehaviour.DROP)

    def rate_limit(self, count: int, retry_after_seconds: int) -> bool:
        return False

    def call_times(self) -> list[float]:
        with self.mail.lock:
            return list(self.mail.transactions)


class ResendConformanceFake:
    """The Resend fake as the conformance kit drives it."""

    def __init__(self, resend: FakeResend, api_key: str = "re_conformance_key") -> None:
        self.resend = resend
        self.api_key = api_key

    @property
    def allow_entry(self) -> str:
        return self.resend.allow_entry

    @property
    def allow_entries(self) -> tuple[str, ...]:
        return (self.resend.allow_entry,)

    def connection(self) -> tuple[str, str, dict[str, Any]]:
        return "resend", self.api_key, {"base_url": self.resend.base_url, "from": SENDER}

    def effects(self) -> int:
        return len(self.resend.emails)

    def lose_answers(self, count: int) -> None:
        self.resend.fail_next(count, Misbehaviour.DROP)

    def rate_limit(self, count: int, retry_after_seconds: int) -> bool:
        with self.resend.lock:
            self.resend.rate_limit_next = count
            self.resend.retry_after = retry_after_seconds
        return True

    def call_times(self) -> list[float]:
        with self.resend.lock:
            return list(self.resend.call_times)


# Both classes are the conformance kit's ``EmailConformanceFake``s.
EmailConformanceFake = SmtpConformanceFake | ResendConformanceFake


@pytest.fixture(scope="module")
def smtp_conformance(mail: FakeMail) -> SmtpConformanceFake:
    """The module's mail pair as the conformance kit drives it (IMAP look-ups on)."""
    return SmtpConformanceFake(mail)


@pytest.fixture(scope="module")
def resend_conformance() -> Iterator[ResendConformanceFake]:
    with FakeResend() as fake:
        yield ResendConformanceFake(fake)
