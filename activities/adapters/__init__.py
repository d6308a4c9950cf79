"""Adapters: the only code that talks to third parties, one module per provider.

- ``base``: the ``Adapter`` signature, ``fail`` (how an adapter fails) and ``parse_input``.
- ``sender``: ``send``, the one way a provider is called (host guard, read limits, a
  connection's secret scrubbed from the answer); ``http_client``, the client it shares.
- ``guard``: the host guard, which addresses a call may reach.
- ``responses``: a provider's response read and judged (the output, or the failure and
  whether it is retried).
- ``reconcile``: exactly once for providers without an idempotency key (Slack, GitHub):
  the look-up window and the failures that leave an outcome unknown; the credential a
  provider call needs (``credential_of``, which ``webhook`` uses too).
- ``plugins``: how a worker makes the adapters its catalog declares, and ``drive``, which
  runs an adapter of the ``call``/``find`` shape; ``builtin``: the built-ins' factories.
- ``http``, ``echo``, ``webhook``, ``slack``, ``github``: the providers (Slack's and
  GitHub's modules also hold what undoes their effects, exactly once by ``natural``
  idempotency: ``slack.delete_message``, ``github.close_issue``); ``email`` (with ``smtp``,
  its SMTP and IMAP clients) and ``notion``, declared by ``schemas.email`` and
  ``schemas.notion``.
"""

from activities.adapters.base import Adapter, fail
from activities.adapters.echo import echo_adapter
from activities.adapters.github import (
    GithubAdapter,
    GithubCloseIssueAdapter,
    GithubRateLimitAdapter,
)
from activities.adapters.guard import HostGuard
from activities.adapters.http import HttpAdapter
from activities.adapters.responses import ProviderResponse, parse_retry_after
from activities.adapters.sender import SendRequest, http_client, send
from activities.adapters.slack import (
    SlackAdapter,
    SlackAuthTestAdapter,
    SlackDeleteMessageAdapter,
    SlackUpdateMessageAdapter,
)
from activities.adapters.webhook import WebhookAdapter

__all__ = [
    "Adapter",
    "GithubAdapter",
    "GithubCloseIssueAdapter",
    "GithubRateLimitAdapter",
    "HostGuard",
    "HttpAdapter",
    "ProviderResponse",
    "SendRequest",
    "SlackAdapter",
    "SlackAuthTestAdapter",
    "SlackDeleteMessageAdapter",
    "SlackUpdateMessageAdapter",
    "WebhookAdapter",
    "echo_adapter",
    "fail",
    "http_client",
    "parse_retry_after",
    "send",
]
