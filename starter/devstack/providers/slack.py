"""A fake of Slack's Web API, from its public reference: ``chat.postMessage`` (with message
``metadata``), ``chat.delete`` (a bot deletes its own messages only), ``chat.update`` (a
bot updates its own messages only; ``text`` and ``blocks`` replace the message's),
``conversations.history`` and ``conversations.replies`` (newest first / thread order,
``oldest``/``latest``/``inclusive``, cursor pagination, metadata only with
``include_all_metadata``), ``chat.getPermalink``, ``auth.test``.

Like Slack it answers HTTP 200 with ``{"ok": false, "error"}`` for most failures
(``not_authed``, ``invalid_auth``, ``token_revoked``, ``channel_not_found``,
``not_in_channel``, ``msg_too_long``, ``no_text``, ``message_not_found``,
``cant_delete_message``, ``cant_update_message``, ``missing_scope`` with ``needed`` and
``provided``) and HTTP 429 with ``Retry-After`` when rate limiting. ``deletions`` records
each message deleted, ``updates`` each update made, by channel. An interaction's
``response_url`` is served under ``/actions/``: what an app answers there is kept in
``responses`` (Slack shows an ``ephemeral`` one to the person who pressed only).

Tokens: with ``accept_any_token`` (the default) any ``xox…`` token has every scope; a token
in ``scopes`` has exactly those; one in ``revoked`` is revoked. Channels: any id starting
with C, G or D exists, unless listed in ``missing_channels``; the bot is a member of all but
``not_member``.

OAuth v2 (``oauth``, see ``slack_oauth``): ``/oauth/v2/authorize`` and ``oauth.v2.access``
for the clients in ``oauth.clients``; the access tokens it issues expire (``token_expired``).
"""

from __future__ import annotations

import base64
import time
from typing import Any

from starter.devstack.providers.server import FakeServer, Reply, Request
from starter.devstack.providers.slack_oauth import SlackOAuth

MAX_TEXT = 40000
ALL_SCOPES = frozenset(
    {"chat:write", "channels:history", "groups:history", "im:history", "mpim:history"}
)
_HISTORY_SCOPE = {"C": "channels:history", "G": "groups:history", "D": "im:history"}


class FakeSlack(FakeServer):
    name = "slack"

    def __init__(self) -> None:
        super().__init__()
        self.accept_any_token = True
        self.scopes: dict[str, set[str]] = {}
        self.revoked: set[str] = set()
        self.missing_channels: set[str] = set()
        self.not_member: set[str] = set()
        self.messages: dict[str, list[dict[str, Any]]] = {}
        self.rate_limit_next = 0
        self.retry_after = 1
        self.deletions: dict[str, list[str]] = {}  # the ts of each message deleted
        self.updates: dict[str, list[str]] = {}  # the ts of each message updated, per update
        self.responses: list[dict[str, Any]] = []  # what apps posted to a response_url
        self.error_next: list[str] = []  # the next write calls answer these errors
        self._last_ts = 0.0
        self.oauth = SlackOAuth()

    def reset(self) -> None:
        with self.lock:
            super().reset()
            self.messages.clear()
            self.deletions.clear()
            self.updates.clear()
            self.responses.clear()
            self.rate_limit_next = 0
            self.error_next.clear()

    def state(self) -> dict[str, Any]:
        return {"messages": self.messages, "deletions": self.deletions}

    def posted(self, channel: str) -> list[dict[str, Any]]:
        """Every message in ``channel``, thread replies included, oldest first."""
        with self.lock:
            return list(self.messages.get(channel, []))

    def deleted(self, channel: str) -> list[str]:
        """The ``ts`` of each message deleted from ``channel``, in the order deleted."""
        with self.lock:
            return list(self.deletions.get(channel, []))

    def updated(self, channel: str) -> list[str]:
        """The ``ts`` of the message each ``chat.update`` of ``channel`` changed, in order."""
        with self.lock:
            return list(self.updates.get(channel, []))

    def seed(self, channel: str, text: str, user: str = "U0SOMEONE") -> str:
        """A message a person posted (not the bot, which cannot delete it); its ``ts``."""
        with self.lock:
            ts = self._next_ts()
            message = {"type": "message", "text": text, "user": user, "ts": ts}
            self.messages.setdefault(channel, []).append(message)
            return ts

    def response_url(self, team: str = "T0FAKETEAM") -> str:
        """A ``response_url`` as an interaction payload carries one."""
        return f"{self.base_url}/actions/{team}/{int(time.time() * 1e6)}/fake"

    async def handle(self, request: Request) -> Reply:
        if request.path.startswith("/actions/"):
            answer = request.json()
            with self.lock:
                self.responses.append(answer if isinstance(answer, dict) else {})
            return Reply(200, {"ok": True})
        method = request.path.removeprefix("/api").strip("/")
        with self.lock:
            if request.path == "/oauth/v2/authorize":
                return self.oauth.authorize(request)
            if method == "oauth.v2.access":
                return self.oauth.access(request)
        args = request.params()
        token = request.bearer() or args.get("token")
        with self.lock:
            if not token:
                return _error("not_authed")
            if self.oauth.expired(str(token)):
                return _error("token_expired")
            if token in self.revoked:
                return _error("token_revoked")
            scopes = self._scopes_of(str(token))
            if scopes is None:
                return _error("invalid_auth")
            if self.rate_limit_next > 0:
                self.rate_limit_next -= 1
                return Reply(
                    429,
                    {"ok": False, "error": "ratelimited"},
                    {"Retry-After": str(self.retry_after)},
                )
            match method:
                case "auth.test":
                    return Reply(200, _identity(str(token)))
                case "chat.postMessage":
                    return self._post(args, scopes)
                case "chat.delete":
                    return self._delete(args, scopes)
                case "chat.update":
                    return self._update(args, scopes)
                case "conversations.history" | "conversations.replies":
                    return self._read(method, args, scopes)
                case "chat.getPermalink":
                    return self._permalink(args)
            return _error("unknown_method")

    def _scopes_of(self, token: str) -> set[str] | None:
        if token in self.scopes:
            return self.scopes[token]
        if self.accept_any_token and token.startswith("xox"):
            return set(ALL_SCOPES)
        return None

    def _channel_error(self, channel: str) -> str | None:
        if not channel or channel[0] not in "CGD" or channel in self.missing_channels:
            return "channel_not_found"
        if channel in self.not_member:
            return "not_in_channel"
        return None

    def _post(self, args: dict[str, Any], scopes: set[str]) -> Reply:
        if "chat:write" not in scopes:
            return _missing_scope("chat:write", scopes)
        channel = str(args.get("channel") or "")
        problem = self._channel_error(channel)
        if problem:
            return _error(problem)
        text, blocks = args.get("text"), args.get("blocks")
        if not text and not blocks:
            return _error("no_text")
        if text and len(str(text)) > MAX_TEXT:
            return _error("msg_too_long")
        if self.error_next:
            return _error(self.error_next.pop(0))
        ts = self._next_ts()
        message: dict[str, Any] = {
            "type": "message",
            "text": text or "",
            "user": "U0FAKEBOT",
            "bot_id": "B0FAKEBOT",
            "ts": ts,
        }
        if blocks:
            message["blocks"] = blocks
        if args.get("thread_ts"):
            message["thread_ts"] = str(args["thread_ts"])
        metadata = args.get("metadata")
        if isinstance(metadata, dict) and metadata.get("event_type"):
            message["metadata"] = {
                "event_type": metadata["event_type"],
                "event_payload": metadata.get("event_payload") or {},
            }
        self.messages.setdefault(channel, []).append(message)
        shown = _without_metadata(message)
        return self.acted(Reply(200, {"ok": True, "channel": channel, "ts": ts, "message": shown}))

    def _permalink(self, args: dict[str, Any]) -> Reply:
        """``chat.getPermalink`` (no scope needed): the message's URL, under this server."""
        channel, ts = str(args.get("channel") or ""), str(args.get("message_ts") or "")
        if self._channel_error(channel) == "channel_not_found":
            return _error("channel_not_found")
        if not any(m.get("ts") == ts for m in self.messages.get(channel, [])):
            return _error("message_not_found")
        link = f"{self.base_url}/archives/{channel}/p{ts.replace('.', '')}"
        return Reply(200, {"ok": True, "channel": channel, "permalink": link})

    def _delete(self, args: dict[str, Any], scopes: set[str]) -> Reply:
        if "chat:write" not in scopes:
            return _missing_scope("chat:write", scopes)
        channel, ts = str(args.get("channel") or ""), str(args.get("ts") or "")
        if self._channel_error(channel) == "channel_not_found":
            return _error("channel_not_found")
        messages = self.messages.get(channel, [])
        found = [m for m in messages if m["ts"] == ts]
        if not found:
            return _error("message_not_found")
        if "bot_id" not in found[0]:
            return _error("cant_delete_message")
        if self.error_next:
            return _error(self.error_next.pop(0))
        messages.remove(found[0])
        self.deletions.setdefault(channel, []).append(ts)
        return self.acted(Reply(200, {"ok": True, "channel": channel, "ts": ts}))

    def _update(self, args: dict[str, Any], scopes: set[str]) -> Reply:
        if "chat:write" not in scopes:
            return _missing_scope("chat:write", scopes)
        channel, ts = str(args.get("channel") or ""), str(args.get("ts") or "")
        if self._channel_error(channel) == "channel_not_found":
            return _error("channel_not_found")
        text, blocks = args.get("text"), args.get("blocks")
        if not text and not blocks:
            return _error("no_text")
        if text and len(str(text)) > MAX_TEXT:
            return _error("msg_too_long")
        found = [m for m in self.messages.get(channel, []) if m["ts"] == ts]
        if not found:
            return _error("message_not_found")
        if "bot_id" not in found[0]:
            return _error("cant_update_message")
        if self.error_next:
            return _error(self.error_next.pop(0))
        message = found[0]
        message["text"] = text or ""
        if blocks is not None:
            message["blocks"] = blocks
        message["edited"] = {"user": "U0FAKEBOT", "ts": self._next_ts()}
        self.updates.setdefault(channel, []).append(ts)
        shown = _without_metadata(message)
        return self.acted(
            Reply(
                200,
                {"ok": True, "channel": channel, "ts": ts, "text": text or "", "message": shown},
            )
        )

    def _read(self, method: str, args: dict[str, Any], scopes: set[str]) -> Reply:
        channel = str(args.get("channel") or "")
        needed = _HISTORY_SCOPE.get(channel[:1], "channels:history")
        if needed not in scopes:
            return _missing_scope(needed, scopes)
        problem = self._channel_error(channel)
        if problem:
            return _error(problem)
        oldest = float(args.get("oldest") or 0)
        latest = float(args.get("latest") or time.time() + 1)
        inclusive = str(args.get("inclusive", "")).lower() in ("1", "true")
        everything = self.messages.get(channel, [])
        if method == "conversations.replies":
            parent = str(args.get("ts") or "")
            thread = [m for m in everything if m["ts"] == parent or m.get("thread_ts") == parent]
            if not thread:
                return _error("thread_not_found")
            chosen = sorted(thread, key=lambda m: float(m["ts"]))
        else:
            top = [m for m in everything if m.get("thread_ts") in (None, m["ts"])]
            chosen = sorted(top, key=lambda m: float(m["ts"]), reverse=True)

        def within(m: dict[str, Any]) -> bool:
            ts = float(m["ts"])
            if inclusive:
                return oldest <= ts <= latest
            return oldest < ts < latest

        chosen = [m for m in chosen if within(m)]
        limit = max(1, min(int(args.get("limit") or 100), 999))
        start = _cursor_offset(str(args.get("cursor") or ""))
        page = chosen[start : start + limit]
        with_metadata = str(args.get("include_all_metadata", "")).lower() in ("1", "true")
        shown = [
            m if with_metadata else {k: v for k, v in m.items() if k != "metadata"} for m in page
        ]
        more = start + limit < len(chosen)
        return Reply(
            200,
            {
                "ok": True,
                "messages": shown,
                "has_more": more,
                "response_metadata": {"next_cursor": _cursor(start + limit) if more else ""},
            },
        )

    def _next_ts(self) -> str:
        now = max(time.time(), self._last_ts + 0.000001)
        self._last_ts = now
        return f"{now:.6f}"


def _identity(token: str) -> dict[str, Any]:
    """``auth.test``'s answer: who the token is (a bot token also names its ``bot_id``)."""
    out: dict[str, Any] = {
        "ok": True,
        "url": "https://fake-workspace.slack.com/",
        "team": "Fake Workspace",
        "user": "moat-bot",
        "team_id": "T0FAKETEAM",
        "user_id": "U0FAKEBOT",
        "is_enterprise_install": False,
    }
    if token.startswith("xoxb-"):
        out["bot_id"] = "B0FAKEBOT"
    return out


def _without_metadata(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k != "metadata"}


def _error(error: str) -> Reply:
    return Reply(200, {"ok": False, "error": error})


def _missing_scope(needed: str, scopes: set[str]) -> Reply:
    return Reply(
        200,
        {
            "ok": False,
            "error": "missing_scope",
            "needed": needed,
            "provided": ",".join(sorted(scopes)),
        },
    )


def _cursor(offset: int) -> str:
    return base64.b64encode(f"offset:{offset}".encode()).decode()


def _cursor_offset(cursor: str) -> int:
    if not cursor:
        return 0
    try:
        return int(base64.b64decode(cursor).decode().removeprefix("offset:"))
    except ValueError:
        return 0
