"""What the chaos campaign calls: the capabilities it mixes, by idempotency strategy, and the
providers behind them, each able to say what it holds per campaign key.

A capability joins the campaign by one ``Tool`` in ``TOOLS``: its id, its strategy, its share
of the keys, the provider it calls, how a key becomes its input and, for a capability whose
effect can be undone, the ``Undo`` (a ``natural`` capability) sent for a share of its
executed keys. A provider joins by one class with the ``Provider`` methods (and the
``FaultyFake`` ones when the campaign injects its faults from outside: lost answers, rate
limits, server errors), named in ``PROVIDERS``. Every effect carries its campaign key where
the provider keeps it (the text of a message, the title of an issue or a page, the subject
of an email, the JSON body of a request), so effects are counted per key from the
provider's own state, read in-process: the fakes run on threads of the campaign's process
and are never killed.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from bench.chaos_provider import ChaosProvider
from starter.devstack.providers import (
    FakeGithub,
    FakeNotion,
    FakeServer,
    FakeSlack,
    Misbehaviour,
    Reply,
)
from starter.devstack.providers.mail import FakeMail
from starter.devstack.providers.notion import notion_id

PROVIDER_KEY, RECONCILE, NATURAL = "provider_key", "reconcile", "natural"
# A late answer comes after the adapter's timeout (10 s for Slack and GitHub) has passed;
# a fake of a capability with a longer timeout sets its own (``answer_late_seconds``).
LATE_SECONDS = 12.0
# Shared by many keys, so a look-up must tell its own effect from the others'.
SLACK_CHANNELS = ("C0CHAOS0A", "C0CHAOS0B", "C0CHAOS0C")
GITHUB_OWNER, GITHUB_REPOS = "chaos", ("alpha", "beta", "gamma")
MAIL_SENDER, MAIL_RECIPIENTS = "agent@chaos.test", ("ops@chaos.test", "oncall@chaos.test")
# SMTP's forms of the faults, refused at RCPT TO with nothing filed: "try later" (Moat's
# rate limit, with no wait named) and a transient failure of the server.
SMTP_LATER, SMTP_TRANSIENT = 451, 455
NOTION_MARK = "Moat key"
NOTION_PROPERTIES = {"Name": "title", NOTION_MARK: "rich_text", "Status": "select"}
NOTION_DATABASES = ("c4a0500011114f0e8a0c0000000000a1", "c4a0500011114f0e8a0c0000000000b2")


class Provider(Protocol):
    """What the checks read from a provider after the drain."""

    name: str

    def created(self) -> Mapping[str, list[str]]:
        """Campaign key → an id of each effect it caused (a message's ts, an issue's
        number...), effects undone since included."""
        ...

    def undone(self, inp: Mapping[str, Any]) -> tuple[bool, int]:
        """For an undo's input: whether the provider is in the state asked (message gone,
        issue closed), and how many times a call changed it to that state."""
        ...


class FaultyFake(Provider, Protocol):
    """A provider fake the campaign starts, connects to and injects faults into. The fault
    methods take effect on the next calls (the conformance kit's ``ProviderFake`` has the
    same ``lose_answers`` and ``rate_limit``)."""

    @property
    def allow_entry(self) -> str:
        """The host guard's entry admitting the fake (``127.0.0.1:port``); a fake serving on
        several ports names each, comma-separated."""
        ...

    def start(self) -> object: ...

    def stop(self) -> None: ...

    def connection(self) -> dict[str, Any]:
        """The admin API's body for a connection to this fake (type, name, secret, config)."""
        ...

    def effects(self) -> int: ...

    def requests_seen(self) -> int:
        """Requests that reached the fake, any endpoint."""
        ...

    def lose_answers(self, count: int) -> bool:
        """The next ``count`` effects are performed and their answer lost; False when one
        armed before was not used yet (nothing armed)."""
        ...

    def rate_limit(self, count: int, retry_after_seconds: int) -> bool: ...

    def server_errors(self, count: int) -> bool: ...

    def lost(self) -> Counter[str]:
        """Answers lost so far, by how (``drop``, ``late``)."""
        ...


class _Ledger(FakeServer):
    """Keeps every effect's answer (``acted``) and counts the answers lost."""

    # A late answer comes this long after the call: past the capabilities' timeout.
    answer_late_seconds = LATE_SECONDS

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.acts: list[tuple[str, dict[str, Any]]] = []
        self._lost: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self.late_seconds = self.answer_late_seconds

    def acted(self, reply: Reply) -> Reply:
        reply = super().acted(reply)
        body = reply.body if isinstance(reply.body, dict) else {}
        self.acts.append((self._kind(body), body))
        if reply.misbehave is not None:
            self._lost[reply.misbehave.value] += 1
        return reply

    def _kind(self, body: dict[str, Any]) -> str:
        raise NotImplementedError

    def effects(self) -> int:
        with self.lock:
            return len(self.acts)

    def requests_seen(self) -> int:
        with self.lock:
            return len(self.requests)

    def lose_answers(self, count: int) -> bool:
        """Three in four dropped, one answered after the adapter's timeout."""
        with self.lock:
            if self._fail_next > 0:
                return False
            mode = Misbehaviour.LATE if self._rng.random() < 0.25 else Misbehaviour.DROP
            self.fail_next(count, mode, self.answer_late_seconds)
            return True

    def lost(self) -> Counter[str]:
        with self.lock:
            return Counter(self._lost)


class ChaosSlack(_Ledger, FakeSlack):
    """``slack.post_message`` (text: the campaign key) and ``slack.delete_message``."""

    def _kind(self, body: dict[str, Any]) -> str:
        return "post" if "message" in body else "delete"

    def connection(self) -> dict[str, Any]:
        return {"type": "slack", "name": "chaos-slack", "secret": "xoxb-chaos",
                "config": {"base_url": f"{self.base_url}/api"}}  # fmt: skip

    def rate_limit(self, count: int, retry_after_seconds: int) -> bool:
        with self.lock:
            if self.rate_limit_next > 0:
                return False
            self.rate_limit_next, self.retry_after = count, retry_after_seconds
            return True

    def server_errors(self, count: int) -> bool:
        with self.lock:
            if self.error_next:
                return False
            self.error_next.extend(["internal_error"] * count)
            return True

    def created(self) -> Mapping[str, list[str]]:
        found: dict[str, list[str]] = {}
        with self.lock:
            for kind, body in self.acts:
                if kind == "post":
                    found.setdefault(str(body["message"]["text"]), []).append(str(body["ts"]))
        return found

    def undone(self, inp: Mapping[str, Any]) -> tuple[bool, int]:
        channel, ts = str(inp["channel"]), str(inp["ts"])
        with self.lock:
            there = any(m["ts"] == ts for m in self.messages.get(channel, []))
            times = sum(1 for kind, b in self.acts if kind == "delete" and b.get("ts") == ts)
        return not there, times


class ChaosGithub(_Ledger, FakeGithub):
    """``github.create_issue`` (title: the campaign key) and ``github.close_issue``."""

    def _kind(self, body: dict[str, Any]) -> str:
        return "create" if body.get("state") == "open" else "update"

    def connection(self) -> dict[str, Any]:
        return {"type": "github", "name": "chaos-github", "secret": "ghp_chaos",
                "config": {"base_url": self.base_url}}  # fmt: skip

    def rate_limit(self, count: int, retry_after_seconds: int) -> bool:
        """GitHub's secondary limit: 403 with ``Retry-After``."""
        with self.lock:
            if self.secondary_limit_next > 0:
                return False
            self.secondary_limit_next, self.retry_after = count, retry_after_seconds
            return True

    def server_errors(self, count: int) -> bool:
        with self.lock:
            if self.error_next:
                return False
            self.error_next.extend([502] * count)
            return True

    def created(self) -> Mapping[str, list[str]]:
        found: dict[str, list[str]] = {}
        with self.lock:
            for full, issues in self.issues.items():
                for issue in issues:
                    found.setdefault(str(issue["title"]), []).append(f"{full}#{issue['number']}")
        return found

    def undone(self, inp: Mapping[str, Any]) -> tuple[bool, int]:
        owner, repo, number = str(inp["owner"]), str(inp["repo"]), int(inp["number"])
        issues = [i for i in self.issues_of(owner, repo) if i["number"] == number]
        closed = bool(issues) and issues[0]["state"] == "closed"
        return closed, self.closes_of(owner, repo, number)


class ChaosMail(_Ledger, FakeMail):
    """``email.send`` over SMTP (subject: the campaign key), its look-up in the IMAP ``Sent``
    mailbox the fake files every accepted message in. A lost answer: the message is filed,
    then the connection dropped before the reply to the end of ``DATA`` (or the reply comes
    after the capability's 30 s timeout)."""

    answer_late_seconds = 32.0

    def _kind(self, body: dict[str, Any]) -> str:
        return "send"

    @property
    def allow_entry(self) -> str:
        """SMTP's and IMAP's ports (the connection says ``security: none``: allow-listed)."""
        return f"{self.smtp_allow_entry},{self.imap_allow_entry}"

    def connection(self) -> dict[str, Any]:
        config = {
            "host": "127.0.0.1", "port": self.smtp_port, "security": "none",
            "username": self.username, "from": MAIL_SENDER,
            "imap": {"host": "127.0.0.1", "port": self.imap_port, "security": "none",
                     "mailbox": "Sent"},
        }  # fmt: skip
        return {"type": "smtp", "name": "chaos-smtp", "secret": self.password, "config": config}

    def requests_seen(self) -> int:
        """SMTP transactions (``MAIL FROM``): where the refusals are served."""
        with self.lock:
            return len(self.transactions)

    def _refuse_once(self, count: int, code: int) -> bool:
        with self.lock:
            if self._refuse:
                return False
            self.refuse_next(count, code)
            return True

    def rate_limit(self, count: int, retry_after_seconds: int) -> bool:
        """``451`` at RCPT TO: SMTP's "try later" names no wait."""
        return self._refuse_once(count, SMTP_LATER)

    def server_errors(self, count: int) -> bool:
        return self._refuse_once(count, SMTP_TRANSIENT)

    def created(self) -> Mapping[str, list[str]]:
        found: dict[str, list[str]] = {}
        for message in self.sent():
            found.setdefault(message["subject"], []).append(message["message_id"])
        return found

    def undone(self, inp: Mapping[str, Any]) -> tuple[bool, int]:
        raise NotImplementedError("email.send has no undo")


class ChaosNotion(_Ledger, FakeNotion):
    """``notion.create_page`` (title: the campaign key; the mark property holds Moat's key,
    which the look-up queries) in one of 2 databases, and ``notion.update_page`` moving the
    page to the trash (``archived: true``)."""

    answer_late_seconds = 22.0  # the capabilities' timeout is 20 s

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        for n, database_id in enumerate(NOTION_DATABASES):
            self.add_database(NOTION_PROPERTIES, database_id=database_id, title=f"Chaos {n + 1}")
        self.trashings: Counter[str] = Counter()  # page id -> calls that moved it to the trash

    def _kind(self, body: dict[str, Any]) -> str:
        return "page"

    def connection(self) -> dict[str, Any]:
        config = {"base_url": f"{self.base_url}/v1", "mark_property": NOTION_MARK}
        return {
            "type": "notion",
            "name": "chaos-notion",
            "secret": "secret_chaos",
            "config": config,
        }

    def rate_limit(self, count: int, retry_after_seconds: int) -> bool:
        """``429 rate_limited`` with ``Retry-After``, on any call (look-ups too)."""
        with self.lock:
            if self.rate_limited_next > 0:
                return False
            FakeNotion.rate_limit(self, count, retry_after_seconds)
            return True

    def server_errors(self, count: int) -> bool:
        with self.lock:
            if self.error_next:
                return False
            self.error_next.extend([502] * count)
            return True

    def _update(self, page: dict[str, Any], body: dict[str, Any]) -> Reply:
        before = page["in_trash"]
        reply = super()._update(page, body)
        if page["in_trash"] and not before:
            self.trashings[page["id"]] += 1
        return reply

    def created(self) -> Mapping[str, list[str]]:
        found: dict[str, list[str]] = {}
        with self.lock:
            for page in self.pages.values():
                title = "".join(t["plain_text"] for t in page["properties"]["Name"]["title"])
                found.setdefault(title, []).append(page["id"])
        return found

    def undone(self, inp: Mapping[str, Any]) -> tuple[bool, int]:
        page_id = notion_id(str(inp["page_id"]))
        with self.lock:
            page = self.pages.get(page_id)
            return page is not None and bool(page["in_trash"]), self.trashings[page_id]


class HttpProvider:
    """``http.request``'s provider (``bench.chaos_provider``), which draws its own faults."""

    name = "http"

    def __init__(self, provider: ChaosProvider) -> None:
        self.provider = provider

    def created(self) -> Mapping[str, list[str]]:
        return self.provider.effects_by_key()

    def undone(self, inp: Mapping[str, Any]) -> tuple[bool, int]:
        raise NotImplementedError("http.request has no undo")


@dataclass(frozen=True)
class Undo:
    """The ``natural`` capability that undoes a tool's effect, sent for ``share`` of its
    executed keys with the input ``input(tool input, tool output)``."""

    capability: str
    share: float
    input: Callable[[Mapping[str, Any], Mapping[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Tool:
    """A capability of the campaign: ``share`` of the keys call it on ``provider`` with
    ``input(key)``; ``answer_id(output)`` is the effect id its answer names (checked against
    the provider's, None: not checked)."""

    capability: str
    strategy: str
    provider: str
    share: float
    input: Callable[[str, str], dict[str, Any]]  # (campaign key, provider's base URL)
    answer_id: Callable[[Mapping[str, Any]], str] | None = None
    undo: Undo | None = None


def _pick(key: str, choices: tuple[str, ...]) -> str:
    return choices[int(hashlib.sha256(key.encode()).hexdigest(), 16) % len(choices)]


def _issue_id(out: Mapping[str, Any]) -> str:
    """``owner/repo#number`` from the issue's ``html_url`` (``…/owner/repo/issues/n``)."""
    parts = str(out.get("html_url") or "").rstrip("/").split("/")
    return f"{parts[-4]}/{parts[-3]}#{parts[-1]}" if len(parts) >= 4 else ""


TOOLS: tuple[Tool, ...] = (
    Tool(
        "http.request", PROVIDER_KEY, "http", 0.5,
        lambda key, url: {"method": "POST", "url": f"{url}/effects", "json": {"key": key}},
    ),
    Tool(
        "slack.post_message", RECONCILE, "slack", 0.25,
        lambda key, _: {"channel": _pick(key, SLACK_CHANNELS), "text": key},
        answer_id=lambda out: str(out.get("ts")),
        undo=Undo("slack.delete_message", 0.5,
                  lambda inp, out: {"channel": inp["channel"], "ts": out["ts"]}),
    ),
    Tool(
        "github.create_issue", RECONCILE, "github", 0.25,
        lambda key, _: {"owner": GITHUB_OWNER, "repo": _pick(key, GITHUB_REPOS), "title": key},
        answer_id=_issue_id,
        undo=Undo("github.close_issue", 0.5,
                  lambda inp, out: {"owner": inp["owner"], "repo": inp["repo"],
                                    "number": out["number"]}),
    ),
    Tool(
        "email.send", RECONCILE, "mail", 0.25,
        lambda key, _: {"to": [_pick(key, MAIL_RECIPIENTS)], "subject": key,
                        "text": f"chaos campaign key {key}"},
        answer_id=lambda out: str(out.get("message_id")),
    ),
    Tool(
        "notion.create_page", RECONCILE, "notion", 0.25,
        lambda key, _: {"database_id": _pick(key, NOTION_DATABASES), "title": key},
        answer_id=lambda out: str(out.get("page_id")),
        undo=Undo("notion.update_page", 0.5,
                  lambda inp, out: {"page_id": out["page_id"], "archived": True}),
    ),
)  # fmt: skip


# The fakes the campaign starts, by name: a new provider is one line here.
PROVIDERS: dict[str, Callable[[int], FaultyFake]] = {
    "slack": ChaosSlack,
    "github": ChaosGithub,
    "mail": ChaosMail,
    "notion": ChaosNotion,
}


@dataclass(frozen=True)
class FakeFaults:
    """The share of a fake's effects whose answer is lost, and of its calls refused as its
    rate limit (with ``Retry-After``) or failed as a server error with no effect."""

    lost_answer: float = 0.04
    rate_limited: float = 0.03
    server_error: float = 0.02
    retry_after_seconds: int = 1

    def scaled(self, factor: float) -> FakeFaults:
        return FakeFaults(
            min(self.lost_answer * factor, 1.0),
            min(self.rate_limited * factor, 1.0),
            min(self.server_error * factor, 1.0),
            self.retry_after_seconds,
        )


def _gap(rng: random.Random, share: float) -> float:
    """Events until the next fault: geometric with mean ``1 / share`` (never when 0)."""
    if share <= 0:
        return math.inf
    if share >= 1:
        return 1
    return 1 + math.floor(math.log(1 - rng.random()) / math.log(1 - share))


async def inject(
    fake: FaultyFake, faults: FakeFaults, rng: random.Random, injected: Counter[str]
) -> None:
    """Arms ``fake``'s faults at the shares of ``faults``, counted on its effects and calls,
    until cancelled."""
    next_loss = _gap(rng, faults.lost_answer)
    next_limit = _gap(rng, faults.rate_limited)
    next_error = _gap(rng, faults.server_error)
    while True:
        await asyncio.sleep(0.05)
        effects, calls = fake.effects(), fake.requests_seen()
        if effects >= next_loss and fake.lose_answers(1):
            next_loss = effects + _gap(rng, faults.lost_answer)
        if calls >= next_limit and fake.rate_limit(1, faults.retry_after_seconds):
            injected[f"{fake.name} rate limited"] += 1
            next_limit = calls + _gap(rng, faults.rate_limited)
        if calls >= next_error and fake.server_errors(1):
            injected[f"{fake.name} server error"] += 1
            next_error = calls + _gap(rng, faults.server_error)


def provider_of(capability: str) -> str:
    """The provider a tool's capability (not its undo) calls."""
    return next(t.provider for t in TOOLS if t.capability == capability)
