"""The built-in adapters' factories, which the built-in declarations name
(``schemas.capabilities.BUILTINS``): each takes the worker's ``AdapterContext``."""

from __future__ import annotations

from activities.adapters.base import Adapter
from activities.adapters.echo import echo_adapter
from activities.adapters.github import (
    GithubAdapter,
    GithubCloseIssueAdapter,
    GithubRateLimitAdapter,
)
from activities.adapters.http import HttpAdapter
from activities.adapters.plugins import AdapterContext
from activities.adapters.slack import (
    SlackAdapter,
    SlackAuthTestAdapter,
    SlackDeleteMessageAdapter,
    SlackUpdateMessageAdapter,
)
from activities.adapters.webhook import WebhookAdapter


def http(ctx: AdapterContext) -> Adapter:
    return HttpAdapter(ctx.http, ctx.guard, max_response_bytes=ctx.settings.http_max_response_bytes)


def echo(ctx: AdapterContext) -> Adapter:
    return echo_adapter


def webhook(ctx: AdapterContext) -> Adapter:
    return WebhookAdapter(ctx.http, ctx.guard)


def slack(ctx: AdapterContext) -> Adapter:
    return SlackAdapter(ctx.http, ctx.guard)


def github(ctx: AdapterContext) -> Adapter:
    return GithubAdapter(ctx.http, ctx.guard)


def slack_auth_test(ctx: AdapterContext) -> Adapter:
    return SlackAuthTestAdapter(ctx.http, ctx.guard)


def github_rate_limit(ctx: AdapterContext) -> Adapter:
    return GithubRateLimitAdapter(ctx.http, ctx.guard)


def github_close_issue(ctx: AdapterContext) -> Adapter:
    return GithubCloseIssueAdapter(ctx.http, ctx.guard)


def slack_delete_message(ctx: AdapterContext) -> Adapter:
    return SlackDeleteMessageAdapter(ctx.http, ctx.guard)


def slack_update_message(ctx: AdapterContext) -> Adapter:
    return SlackUpdateMessageAdapter(ctx.http, ctx.guard)
