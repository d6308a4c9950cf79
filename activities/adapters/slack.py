"""``slack.post_message``: Slack's ``chat.postMessage``, exactly once by reconcile;
``slack.delete_message``, which undoes it, ``slack.update_message`` (``chat.update``),
and ``slack.auth_test``, a probe's read.

Slack has no idempotency key. The message carries the execution's key in its metadata
(``event_type: moat_execution``); an attempt that may repeat an earlier one first reads the
channel's history (``conversations.history``, or ``conversations.replies`` for a thread
reply) with ``include_all_metadata`` from the execution's start, and answers with the
message it finds. Slack answers most failures with HTTP 200 and ``{"ok": false, "error"}``.
"""

from __future__ import annotations

from typing import Any

import httpx
from temporalio.exceptions import ApplicationError

from activities.adapters.base import fail, parse_input
from activities.adapters.guard import HostGuard
from activities.adapters.plugins import Driven
from activities.adapters.reconcile import (
    MARK_EVENT_TYPE,
    base_url,
    credential_of,
    outcome_unknown,
    window_start,
)
from activities.adapters.responses import ProviderResponse, parse_retry_after, recorded
from activities.adapters.sender import SendRequest, send
from schemas.capabilities import (
    NoInput,
    SlackDeleteMessageInput,
    SlackPostMessageInput,
    SlackUpdateMessageInput,
)
from schemas.connections import DEFAULT_BASE_URLS, ConnectionType, Credential
from schemas.provider_evidence import ProviderEvidence, ReconcileProof
from schemas.records import ErrorTaxonomy
from schemas.run import AdapterInput, AdapterOutput

DEFAULT_BASE_URL = DEFAULT_BASE_URLS[ConnectionType.SLACK]
HISTORY_PAGE = 200
# How many pages of history a look-up reads before it gives up (and the outcome is unknown).
HISTORY_PAGES = 20

# Slack's ``error`` strings, by what they mean for a retry.
_AUTH = frozenset(
    {
        "not_authed",
        "invalid_auth",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "no_permission",
        "missing_scope",
        "not_allowed_token_type",
        "ekm_access_denied",
        "team_access_not_granted",
    }
)
_NOT_FOUND = frozenset({"channel_not_found", "thread_not_found", "message_not_found"})
# Retried; all but ``ratelimited`` may leave the message posted (Slack: "some aspect of the
# operation may have succeeded"), which the retry's look-up settles.
_SERVER = frozenset(
    {"internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited"}
)
# What ``chat.delete`` answers for a message no longer there.
_GONE = frozenset({"message_not_found"})
# Errors that mean the connection cannot read history at all.
_CANNOT_READ = _AUTH | _NOT_FOUND


class _SlackWebApi:
    """A Web API caller with the worker's HTTP client and host guard."""

    def __init__(self, client: httpx.AsyncClient, guard: HostGuard) -> None:
        self._client = client
        self._guard = guard

    async def _call(
        self,
        inp: AdapterInput,
        method: str,
        url: str,
        cred: Credential,
        *,
        json: Any = None,
        params: dict[str, str] | None = None,
        reading: bool = False,
        done: frozenset[str] = frozenset(),
    ) -> dict[str, Any]:
        """One Web API call's JSON when ``ok``, or when its ``error`` is one of ``done``;
        Slack's other refusals as Moat failures."""
        request = SendRequest(
            method,
            url,
            headers={"Authorization": f"Bearer {cred.secret}"},
            credential=cred,
            timeout=inp.capability.timeout_seconds,
            allow_hosts=inp.http_allow_hosts,
            json_body=json,
            params=params,
        )
        answer = await send(self._client, self._guard, request)
        return _web_api_result(answer, reading=reading, done=done)


class SlackAdapter(_SlackWebApi, Driven):
    """``slack.post_message``: ``call`` posts with the key in the message's metadata;
    ``find`` reads the channel's history (or the thread's replies) for it."""

    def looks_in(self, inp: AdapterInput) -> str:
        return f"the history of channel {inp.input.get('channel')}"

    async def find(self, inp: AdapterInput, credential: Credential | None) -> AdapterOutput | None:
        msg = parse_input(inp, SlackPostMessageInput)
        cred = credential_of(inp, credential, ConnectionType.SLACK)
        api = base_url(cred, DEFAULT_BASE_URL)
        method, params = _history_query(inp, msg)
        ts = await self._find(inp, api, cred, msg, method, params)
        if ts is None:
            return None
        proof = ReconcileProof(
            looked_in=self.looks_in(inp),
            search={"method": method, **params},
            mark=f"metadata.event_type={MARK_EVENT_TYPE}, event_payload.key={inp.idempotency_key}",
            since=window_start(inp),
            attempt=inp.attempt,
        )
        out = recorded(200, {"channel": msg.channel, "ts": ts, "reconciled": True})
        evidence = await self._evidence(inp, api, cred, msg.channel, ts, proof)
        return out.model_copy(update={"evidence": evidence})

    async def call(self, inp: AdapterInput, credential: Credential | None) -> AdapterOutput:
        msg = parse_input(inp, SlackPostMessageInput)
        cred = credential_of(inp, credential, ConnectionType.SLACK)
        api = base_url(cred, DEFAULT_BASE_URL)
        body: dict[str, Any] = {
            "channel": msg.channel,
            "text": msg.text,
            "metadata": {
                "event_type": MARK_EVENT_TYPE,
                "event_payload": {"key": inp.idempotency_key},
            },
        }
        if msg.blocks is not None:
            body["blocks"] = msg.blocks
        if msg.thread_ts is not None:
            body["thread_ts"] = msg.thread_ts
        answer = await self._call(inp, "POST", f"{api}/chat.postMessage", cred, json=body)
        channel, ts = str(answer.get("channel") or msg.channel), str(answer.get("ts") or "")
        out = recorded(
            200, {"channel": answer.get("channel"), "ts": answer.get("ts"), "reconciled": False}
        )
        evidence = await self._evidence(inp, api, cred, channel, ts, None) if ts else None
        return out.model_copy(update={"evidence": evidence})

    async def _evidence(
        self,
        inp: AdapterInput,
        api: str,
        cred: Credential,
        channel: str,
        ts: str,
        proof: ReconcileProof | None,
    ) -> ProviderEvidence:
        """The message as Slack names it, and its permalink (``chat.getPermalink``, which
        needs no scope). The message is posted whatever that read answers: a refused or
        failed read leaves the permalink out."""
        permalink: str | None = None
        params = {"channel": channel, "message_ts": ts}
        try:
            answer = await self._call(
                inp, "GET", f"{api}/chat.getPermalink", cred, params=params, reading=True
            )
        except ApplicationError:
            answer = {}
        if isinstance(answer.get("permalink"), str):
            permalink = answer["permalink"]
        return ProviderEvidence(
            provider="slack",
            object_type="message",
            object_id=f"{channel}/{ts}",
            permalink=permalink,
            attributes={"channel": channel, "ts": ts},
            http_status=200,
            reconciled=proof,
        )

    async def _find(
        self,
        inp: AdapterInput,
        api: str,
        cred: Credential,
        msg: SlackPostMessageInput,
        method: str,
        params: dict[str, str],
    ) -> str | None:
        """The ts of the message this execution posted, if there is one."""
        cursor = ""
        for _ in range(HISTORY_PAGES):
            page = await self._call(
                inp,
                "GET",
                f"{api}/{method}",
                cred,
                params={**params, **({"cursor": cursor} if cursor else {})},
                reading=True,
            )
            for message in page.get("messages") or []:
                if _marked(message, inp.idempotency_key):
                    return str(message.get("ts"))
            cursor = str((page.get("response_metadata") or {}).get("next_cursor") or "")
            if not page.get("has_more") or not cursor:
                return None
        raise outcome_unknown(
            f"the history of channel {msg.channel} holds more than "
            f"{HISTORY_PAGES * HISTORY_PAGE} messages since the execution started"
        )


def _history_query(inp: AdapterInput, msg: SlackPostMessageInput) -> tuple[str, dict[str, str]]:
    """The look-up's method and parameters: the channel's history (or the thread's
    replies) with metadata, from the execution's start."""
    method = "conversations.replies" if msg.thread_ts else "conversations.history"
    params = {
        "channel": msg.channel,
        "oldest": f"{window_start(inp).timestamp():.6f}",
        "inclusive": "true",
        "include_all_metadata": "true",
        "limit": str(HISTORY_PAGE),
    }
    if msg.thread_ts:
        params["ts"] = msg.thread_ts
    return method, params


class SlackDeleteMessageAdapter(_SlackWebApi):
    """``slack.delete_message``: Slack's ``chat.delete``, exactly once by nature: a deleted
    message stays deleted. Slack answers a repeat ``message_not_found``, which on an attempt
    that may repeat an earlier one means that one deleted it (``already_deleted``); on a
    first attempt it means there was no such message, a failure."""

    async def __call__(
        self, inp: AdapterInput, credential: Credential | None = None
    ) -> AdapterOutput:
        msg = parse_input(inp, SlackDeleteMessageInput)
        cred = credential_of(inp, credential, ConnectionType.SLACK)
        url = f"{base_url(cred, DEFAULT_BASE_URL)}/chat.delete"
        body = {"channel": msg.channel, "ts": msg.ts}
        answer = await self._call(
            inp, "POST", url, cred, json=body, done=_GONE if inp.repeat else frozenset()
        )
        # Slack's answer names the channel by its id; a repeat's ``message_not_found`` does not.
        channel = str(answer.get("channel") or msg.channel)
        gone = answer.get("ok") is not True
        return recorded(200, {"channel": channel, "ts": msg.ts, "already_deleted": gone})


class SlackUpdateMessageAdapter(_SlackWebApi):
    """``slack.update_message``: Slack's ``chat.update``, exactly once by nature: a repeat
    sets the same text and blocks again, leaving the same message."""

    async def __call__(
        self, inp: AdapterInput, credential: Credential | None = None
    ) -> AdapterOutput:
        msg = parse_input(inp, SlackUpdateMessageInput)
        cred = credential_of(inp, credential, ConnectionType.SLACK)
        url = f"{base_url(cred, DEFAULT_BASE_URL)}/chat.update"
        body: dict[str, Any] = {"channel": msg.channel, "ts": msg.ts, "text": msg.text}
        if msg.blocks is not None:
            body["blocks"] = msg.blocks
        answer = await self._call(inp, "POST", url, cred, json=body)
        return recorded(200, {"channel": str(answer.get("channel") or msg.channel), "ts": msg.ts})


class SlackAuthTestAdapter(_SlackWebApi):
    """``slack.auth_test``: Slack's ``auth.test``, which needs no scope and changes nothing,
    so a probe of a Slack connection can call it on a schedule. Refusals map as for
    ``chat.postMessage`` (``invalid_auth``, ``token_revoked``: the connection's credential)."""

    async def __call__(
        self, inp: AdapterInput, credential: Credential | None = None
    ) -> AdapterOutput:
        parse_input(inp, NoInput)
        cred = credential_of(inp, credential, ConnectionType.SLACK)
        api = base_url(cred, DEFAULT_BASE_URL)
        answer = await self._call(inp, "POST", f"{api}/auth.test", cred)
        return recorded(
            200,
            {
                k: answer.get(k)
                for k in ("team", "team_id", "user", "user_id", "bot_id", "enterprise_id")
                if answer.get(k) is not None
            },
        )


def _marked(message: Any, key: str) -> bool:
    if not isinstance(message, dict):
        return False
    metadata = message.get("metadata")
    if not isinstance(metadata, dict) or metadata.get("event_type") != MARK_EVENT_TYPE:
        return False
    payload = metadata.get("event_payload")
    return isinstance(payload, dict) and payload.get("key") == key


def _web_api_result(
    answer: ProviderResponse, *, reading: bool, done: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """A Web API answer's JSON when ``ok`` or its error is one of ``done``; Slack's refusals
    as Moat failures (a refused history read, ``reading``, as an unknown outcome)."""
    data = answer.json()
    if answer.status == 429:
        raise fail(
            ErrorTaxonomy.PROVIDER_RATE_LIMITED,
            "Slack rate-limited the call (HTTP 429)",
            http_status=429,
            retry_after=parse_retry_after(answer.response.headers.get("retry-after")),
            provider_response=answer.said(),
        )
    if answer.status >= 500:
        raise fail(
            ErrorTaxonomy.PROVIDER_SERVER_ERROR,
            f"Slack answered HTTP {answer.status}",
            http_status=answer.status,
            provider_response=answer.said(),
        )
    if not isinstance(data, dict):
        raise fail(
            ErrorTaxonomy.UNKNOWN,
            f"Slack answered HTTP {answer.status} without a Web API body",
            http_status=answer.status,
            provider_response=answer.said(),
        )
    error = str(data.get("error") or "unknown_error")
    if data.get("ok") is True or error in done:
        return data
    said = {k: data[k] for k in ("ok", "error", "needed", "provided", "errors") if k in data}
    if reading and error in _CANNOT_READ:
        raise outcome_unknown(
            f"this connection cannot read the channel's history ({error}"
            + (f", needs {data['needed']}" if "needed" in data else "")
            + ")",
            http_status=answer.status,
            provider_response=said,
        )
    raise _refusal(error, answer.status, said)


def _refusal(error: str, status: int, said: dict[str, Any]) -> ApplicationError:
    """Slack's ``ok: false`` as a failure: auth and input errors are final; server errors
    are retried (and a retry looks for the message first)."""
    message = f"Slack refused the call: {error}"
    if error in _AUTH:
        return fail(
            ErrorTaxonomy.PROVIDER_AUTH_FAILURE,
            message,
            http_status=status,
            retryable=False,
            provider_response=said,
        )
    if error in _NOT_FOUND:
        return fail(
            ErrorTaxonomy.PROVIDER_NOT_FOUND,
            message,
            http_status=status,
            retryable=False,
            provider_response=said,
        )
    if error in _SERVER:
        taxonomy = (
            ErrorTaxonomy.PROVIDER_RATE_LIMITED
            if error == "ratelimited"
            else ErrorTaxonomy.PROVIDER_SERVER_ERROR
        )
        return fail(taxonomy, message, http_status=status, provider_response=said)
    # not_in_channel, is_archived, msg_too_long, no_text, invalid_blocks, …: the input or
    # the channel's state; a repeat would be refused the same.
    return fail(
        ErrorTaxonomy.PROVIDER_INVALID_INPUT,
        message,
        http_status=status,
        retryable=False,
        provider_response=said,
    )
