"""``acme.create_ticket`` passes Moat's conformance kit against the package's fake: the kit
adds its checks to this module because it defines ``moat_conformance``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from moat_acme_crm.fake import AcmeConformanceFake, FakeAcme

from moat.testing import Conformance, ConnectionSpec


@pytest.fixture(scope="module")
def acme() -> Iterator[FakeAcme]:
    with FakeAcme() as fake:
        yield fake


@pytest.fixture
def moat_conformance(acme: FakeAcme) -> Conformance:
    fake = AcmeConformanceFake(acme)
    return Conformance(
        capability="acme.create_ticket",
        input={"subject": "Printer on fire", "customer_id": "c-42"},
        fake=fake,
        # A token no other test uses: the kit searches every store for it.
        connection=ConnectionSpec(
            "acme_crm", f"acme-{uuid.uuid4().hex}", {"base_url": acme.base_url}
        ),
        refuse=fake.refuse,
    )
