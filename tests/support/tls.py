"""One default TLS context for every HTTP client the test process makes.

httpx builds a fresh ``ssl.SSLContext`` for each client, loading a CA bundle (certifi's, or
``SSL_CERT_FILE``'s): about 20 ms of CPU, and each test stack makes three clients (the
worker's two pools and the test's own). The suite's clients talk plain HTTP on loopback, so
they share one context per set of inputs httpx builds its default from; any other
``verify`` or ``cert`` (a test of TLS itself) is built as httpx builds it, unshared. The
root ``conftest.py`` registers this plugin.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterator
from typing import Any

import pytest
from httpx._transports import default as transports


@pytest.fixture(scope="session", autouse=True)
def _one_default_tls_context() -> Iterator[None]:
    build = transports.create_ssl_context
    shared: dict[tuple[str | None, ...], ssl.SSLContext] = {}

    def create(verify: Any = True, cert: Any = None, trust_env: bool = True) -> ssl.SSLContext:
        if verify is not True or cert is not None:
            return build(verify=verify, cert=cert, trust_env=trust_env)
        # The inputs httpx builds its default from: the same inputs, the same context.
        env = ("SSL_CERT_FILE", "SSL_CERT_DIR")
        key = tuple(os.environ.get(name) for name in env) if trust_env else (None, None)
        if key not in shared:
            shared[key] = build(verify=True, cert=None, trust_env=trust_env)
        return shared[key]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transports, "create_ssl_context", create)
        yield
