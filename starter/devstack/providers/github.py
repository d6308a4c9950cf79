"""A fake of GitHub's REST issues API, from its public reference: ``POST
/repos/{owner}/{repo}/issues`` (201 with the issue) and ``GET`` of the same path (``state``
open|closed|all, ``sort`` created|updated|comments, ``direction``, ``since`` on
``updated_at``, ``per_page`` up to 100, ``page``, a ``Link`` header), with GitHub's error
bodies (``{"message", "documentation_url"}``; 422 with an ``errors`` list): 401 for a bad
token, 403 for a token without access, 404 for a repository it does not know, 410 when its
issues are disabled, 422 for a missing title or an unknown assignee, and the secondary rate
limit (403 with ``Retry-After``) or the primary one (429, ``x-ratelimit-remaining: 0`` and
``x-ratelimit-reset``).

``GET`` and ``PATCH /repos/{owner}/{repo}/issues/{number}`` read and update one issue
(``title``, ``body``, ``state`` open|closed, ``state_reason``, which GitHub ignores unless
the state changes): 404 for a number it does not know, 410 for an issue deleted
(``delete_issue``), 422 for a state or reason it does not take. Closing a closed issue
answers it as it is; ``closes`` counts the closings each issue went through.

``GET /rate_limit`` answers the token's limits (``resources.core``/``search``/``graphql`` and
the older ``rate``, with the ``x-ratelimit-*`` headers): 60 an hour without a token, 5000
with one, ``used`` counting the token's issue calls; like GitHub, reading it is not counted,
and only a bad token is refused (401).

Any token is good unless listed in ``bad_tokens`` (401), ``forbidden_tokens`` (403 on every
call) or ``write_only_tokens`` (403 on reading issues). Any repository exists unless listed
in ``missing_repos`` or ``issues_disabled`` (``owner/repo``). ``error_next`` makes the next
issue calls answer the HTTP statuses it lists (a 502, a 503).

``apps`` (``github_app.GithubApps``) adds GitHub Apps: installation tokens minted with an
App's JWT, good as bearer tokens until they expire or are revoked (``ghs_`` tokens it did
not issue, or no longer honours, are 401).
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any
from urllib.parse import urlencode

from starter.devstack.providers.github_app import GithubApps
from starter.devstack.providers.server import FakeServer, Reply, Request

DOCS = "https://docs.github.com/rest"
_ISSUES = re.compile(r"^/repos/([^/]+)/([^/]+)/issues(?:/([0-9]+))?$")
STATE_REASONS = frozenset({"completed", "not_planned", "duplicate", "reopened"})
CORE_LIMIT = 5000
ANONYMOUS_LIMIT = 60
HOUR = 3600


class FakeGithub(FakeServer):
    name = "github"

    def __init__(self) -> None:
        super().__init__()
        self.bad_tokens: set[str] = set()
        self.forbidden_tokens: set[str] = set()
        self.write_only_tokens: set[str] = set()
        self.missing_repos: set[str] = set()
        self.issues_disabled: set[str] = set()
        self.users: set[str] | None = None  # None: every assignee exists
        self.secondary_limit_next = 0
        self.primary_limit_next = 0
        self.error_next: list[int] = []  # the next issue calls answer these HTTP statuses
        self.retry_after = 1
        self.issues: dict[str, list[dict[str, Any]]] = {}
        self.deleted: dict[str, set[int]] = {}  # issue numbers deleted, by owner/repo
        self.closes: dict[str, int] = {}  # closings by "owner/repo#number"
        self._next_id = 1000
        self.used: dict[str, int] = {}  # issue calls by token, this hour
        self.apps = GithubApps()
        self._reset_at = int(time.time()) + HOUR

    def reset(self) -> None:
        with self.lock:
            super().reset()
            self.issues.clear()
            self.deleted.clear()
            self.closes.clear()
            self.secondary_limit_next = 0
            self.primary_limit_next = 0
            self.error_next.clear()
            self.used.clear()
            self.apps.reset_tokens()

    def state(self) -> dict[str, Any]:
        return {"issues": self.issues, "closes": self.closes, "app_mints": self.apps.mints}

    def issues_of(self, owner: str, repo: str) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.issues.get(f"{owner}/{repo}", []))

    def closes_of(self, owner: str, repo: str, number: int) -> int:
        """How many times the issue went from open to closed."""
        with self.lock:
            return self.closes.get(f"{owner}/{repo}#{number}", 0)

    def delete_issue(self, owner: str, repo: str, number: int) -> None:
        """Deletes the issue, as a repository's admin can: it answers 410 from then on."""
        full = f"{owner}/{repo}"
        with self.lock:
            self.issues[full] = [i for i in self.issues.get(full, []) if i["number"] != number]
            self.deleted.setdefault(full, set()).add(number)

    async def handle(self, request: Request) -> Reply:
        match = _ISSUES.match(request.path)
        token = request.bearer()
        with self.lock:
            app_reply = self.apps.handle(request)
            if app_reply is not None:
                return app_reply
            if self.apps.is_installation_token(token) and not self.apps.token_good(token or ""):
                return _refusal(401, "Bad credentials")
            if request.path == "/rate_limit" and request.method == "GET":
                if token in self.bad_tokens:
                    return _refusal(401, "Bad credentials")
                return self._rate_limit(token)
            if not token or token in self.bad_tokens:
                return _refusal(401, "Bad credentials")
            self.used[token] = self.used.get(token, 0) + 1
            if token in self.forbidden_tokens:
                return _refusal(403, "Resource not accessible by personal access token")
            if self.primary_limit_next > 0:
                self.primary_limit_next -= 1
                return self._primary_limit()
            if self.secondary_limit_next > 0:
                self.secondary_limit_next -= 1
                return Reply(
                    403,
                    {
                        "message": "You have exceeded a secondary rate limit. Please wait a few "
                        "minutes before you try again.",
                        "documentation_url": DOCS
                        + "/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits",
                    },
                    {"Retry-After": str(self.retry_after)},
                )
            if match is None:
                return _refusal(404, "Not Found")
            if self.error_next:
                status = self.error_next.pop(0)
                return _refusal(status, HTTPStatus(status).phrase)
            full = f"{match.group(1)}/{match.group(2)}"
            if full in self.missing_repos:
                return _refusal(404, "Not Found")
            if full in self.issues_disabled:
                return _refusal(410, "Issues are disabled for this repo")
            if match.group(3) is not None:
                return self._one(request, token, full, int(match.group(3)))
            if request.method == "POST":
                return self._create(request, full)
            if request.method == "GET":
                if token in self.write_only_tokens:
                    return _refusal(403, "Resource not accessible by personal access token")
                return self._list(request, full)
            return _refusal(404, "Not Found")

    def _one(self, request: Request, token: str, full: str, number: int) -> Reply:
        """``GET`` or ``PATCH`` of one issue."""
        if number in self.deleted.get(full, set()):
            return _refusal(410, "This issue was deleted")
        found = [i for i in self.issues.get(full, []) if i["number"] == number]
        if not found or request.method not in ("GET", "PATCH"):
            return _refusal(404, "Not Found")
        if request.method == "GET":
            if token in self.write_only_tokens:
                return _refusal(403, "Resource not accessible by personal access token")
            return Reply(200, dict(found[0]))
        return self._update(request, full, found[0])

    def _update(self, request: Request, full: str, issue: dict[str, Any]) -> Reply:
        args = request.json()
        if not isinstance(args, dict):
            return _refusal(400, "Problems parsing JSON")
        state, reason = args.get("state", issue["state"]), args.get("state_reason")
        checks = {"state": state in ("open", "closed"), "state_reason": _reason(reason)}
        for field, ok in checks.items():
            if not ok:
                invalid = [{"resource": "Issue", "code": "invalid", "field": field}]
                return _invalid(invalid, "update-an-issue")
        for field in ("title", "body"):
            if field in args:
                issue[field] = args[field]
        if state != issue["state"]:
            closing = state == "closed"
            issue["state"] = state
            issue["state_reason"] = reason or ("completed" if closing else "reopened")
            issue["closed_at"] = _now() if closing else None
            issue["closed_by"] = {"login": "moat-bot"} if closing else None
            if closing:
                key = f"{full}#{issue['number']}"
                self.closes[key] = self.closes.get(key, 0) + 1
        issue["updated_at"] = _now()
        return self.acted(Reply(200, dict(issue)))

    def _primary_limit(self) -> Reply:
        """The primary limit used up: 429 with the ``x-ratelimit-*`` headers, no
        ``Retry-After`` (the wait is until ``x-ratelimit-reset``)."""
        reset = int(time.time()) + self.retry_after
        body = {
            "message": "API rate limit exceeded for user.",
            "documentation_url": DOCS
            + "/overview/rate-limits-for-the-rest-api#about-primary-rate-limits",
        }
        headers = {
            "x-ratelimit-limit": str(CORE_LIMIT),
            "x-ratelimit-remaining": "0",
            "x-ratelimit-used": str(CORE_LIMIT),
            "x-ratelimit-reset": str(reset),
            "x-ratelimit-resource": "core",
        }
        return Reply(429, body, headers)

    def _rate_limit(self, token: str | None) -> Reply:
        now = int(time.time())
        if now >= self._reset_at:
            self._reset_at = now + HOUR
            self.used.clear()
        limit = CORE_LIMIT if token else ANONYMOUS_LIMIT
        used = self.used.get(token, 0) if token else 0
        core = {
            "limit": limit,
            "used": used,
            "remaining": max(limit - used, 0),
            "reset": self._reset_at,
        }
        search = {"limit": 30 if token else 10, "used": 0, "remaining": 30 if token else 10}
        body = {
            "resources": {
                "core": core,
                "search": {**search, "reset": now + 60},
                "graphql": {"limit": limit, "used": 0, "remaining": limit, "reset": now + HOUR},
            },
            "rate": core,
        }
        headers = {
            "x-ratelimit-limit": str(limit),
            "x-ratelimit-remaining": str(core["remaining"]),
            "x-ratelimit-used": str(used),
            "x-ratelimit-reset": str(self._reset_at),
            "x-ratelimit-resource": "core",
        }
        return Reply(200, body, headers)

    def _create(self, request: Request, full: str) -> Reply:
        args = request.json()
        if not isinstance(args, dict):
            return _refusal(400, "Problems parsing JSON")
        title = args.get("title")
        if not title:
            return _invalid([{"resource": "Issue", "code": "missing_field", "field": "title"}])
        assignees = args.get("assignees") or []
        if self.users is not None:
            unknown = [a for a in assignees if a not in self.users]
            if unknown:
                return _invalid(
                    [
                        {"resource": "Issue", "code": "invalid", "field": "assignees", "value": a}
                        for a in unknown
                    ]
                )
        issues = self.issues.setdefault(full, [])
        number = len(issues) + len(self.deleted.get(full, ())) + 1
        self._next_id += 1
        now = _now()
        issue = {
            "id": self._next_id,
            "node_id": f"I_fake{self._next_id}",
            "number": number,
            "url": f"{self.base_url}/repos/{full}/issues/{number}",
            "html_url": f"{self.base_url}/{full}/issues/{number}",
            "title": str(title),
            "body": args.get("body"),
            "state": "open",
            "labels": [{"name": str(name)} for name in args.get("labels") or []],
            "assignees": [{"login": str(login)} for login in assignees],
            "user": {"login": "moat-bot"},
            "comments": 0,
            "created_at": now,
            "updated_at": now,
            "closed_at": None,
            "closed_by": None,
            "state_reason": None,
        }
        issues.append(issue)
        return self.acted(Reply(201, issue, {"Location": str(issue["url"])}))

    def _list(self, request: Request, full: str) -> Reply:
        q = request.query
        state = q.get("state", "open")
        sort = q.get("sort", "created")
        direction = q.get("direction", "desc")
        chosen = [i for i in self.issues.get(full, []) if state == "all" or i["state"] == state]
        if "since" in q:
            since = _parse(q["since"])
            if since is None:
                return _invalid([{"resource": "Issue", "code": "invalid", "field": "since"}])
            chosen = [i for i in chosen if _parse(i["updated_at"]) >= since]  # type: ignore[operator]
        key = {"created": "created_at", "updated": "updated_at", "comments": "comments"}.get(
            sort, "created_at"
        )
        chosen.sort(key=lambda i: (i[key], i["number"]), reverse=direction != "asc")
        per_page = max(1, min(int(q.get("per_page", 30)), 100))
        page = max(1, int(q.get("page", 1)))
        items = chosen[(page - 1) * per_page : page * per_page]
        headers: dict[str, str] = {}
        if page * per_page < len(chosen):
            nxt = urlencode({**q, "page": str(page + 1)})
            headers["Link"] = f'<{self.base_url}{request.path}?{nxt}>; rel="next"'
        return Reply(200, items, headers)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(text: str) -> datetime | None:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _refusal(status: int, message: str) -> Reply:
    return Reply(status, {"message": message, "documentation_url": DOCS, "status": str(status)})


def _reason(value: Any) -> bool:
    return value is None or value in STATE_REASONS


def _invalid(errors: list[dict[str, Any]], anchor: str = "create-an-issue") -> Reply:
    return Reply(
        422,
        {
            "message": "Validation Failed",
            "errors": errors,
            "documentation_url": DOCS + "/issues/issues#" + anchor,
            "status": "422",
        },
    )
