"""Where the client finds its gateway and key, and how patiently it retries.

Arguments win over the environment (``MOAT_URL``, ``MOAT_API_KEY``), like other service
SDKs; ``MOAT_STATE_DIR`` is where the send log lives by default.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from moat_client.codes import ClientErrorCode
from moat_client.errors import MoatError
from moat_client.models import ErrorBody

URL_ENV = "MOAT_URL"
API_KEY_ENV = "MOAT_API_KEY"
STATE_DIR_ENV = "MOAT_STATE_DIR"
SENDLOG_FILE = "sendlog.sqlite3"


class ConfigurationError(MoatError):
    """The client lacks its gateway URL or API key."""

    def __init__(self, message: str) -> None:
        super().__init__(
            0, ErrorBody(code=ClientErrorCode.CLIENT_NOT_CONFIGURED, message=message), ""
        )


def configured(url: str | None = None, api_key: str | None = None) -> tuple[str | None, str | None]:
    """The gateway URL and API key from the arguments, else the environment.

    Args:
        url: The gateway's URL; None reads ``MOAT_URL``.
        api_key: The API key; None reads ``MOAT_API_KEY``.

    Returns:
        ``(url, api_key)``, each None when neither the argument nor the environment gives it.
    """
    return url or os.environ.get(URL_ENV) or None, api_key or os.environ.get(API_KEY_ENV) or None


def resolve(url: str | None, api_key: str | None) -> tuple[str, str]:
    url, api_key = configured(url, api_key)
    if not url:
        raise ConfigurationError(f"no gateway URL: pass url= or set {URL_ENV}")
    if not api_key:
        raise ConfigurationError(f"no API key: pass api_key= or set {API_KEY_ENV}")
    return url.rstrip("/"), api_key


def state_dir() -> Path:
    """``MOAT_STATE_DIR``, else the user's state directory (XDG), ``moat`` in it."""
    configured = os.environ.get(STATE_DIR_ENV)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "moat"


def default_sendlog_path() -> Path:
    return state_dir() / SENDLOG_FILE


def state_dir_is_moats() -> bool:
    """True when ``state_dir`` is Moat's own folder (``moat`` in the XDG state directory),
    not one the user named with ``MOAT_STATE_DIR``."""
    return not os.environ.get(STATE_DIR_ENV)


@dataclass(frozen=True)
class RetryPolicy:
    """Network errors, timeouts and 5xx without a recorded outcome are retried with the same
    idempotency key: capped exponential backoff with full jitter, until ``deadline`` seconds
    after the call began (polling an accepted run counts against the same deadline).
    ``max_attempts`` (None: only the deadline) bounds the tries of one request."""

    base_delay: float = 0.5
    max_delay: float = 10.0
    deadline: float = 120.0
    max_attempts: int | None = None
    # Seconds between polls of an accepted run; None: the gateway's Retry-After (else 1 s).
    poll_interval: float | None = None
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def backoff(self, retry: int, retry_after: float | None = None) -> float:
        """The wait before retry number ``retry``, with full jitter.

        Args:
            retry: The retry's number: 1, 2, …
            retry_after: The server's ``Retry-After`` in seconds, when it sent one.

        Returns:
            Seconds to wait: ``retry_after`` (at most ``max_delay``) when given, else a random
            share (half to all) of the capped exponential step.
        """
        if retry_after is not None:
            return min(retry_after, self.max_delay)
        step = min(self.max_delay, self.base_delay * 2 ** (retry - 1))
        return self.rng.uniform(step / 2, step)


NO_RETRIES = RetryPolicy(deadline=0.0, max_attempts=1)
