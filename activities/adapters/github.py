"""``github.create_issue``: GitHub's ``POST /repos/{owner}/{repo}/issues``, exactly once by
reconcile; ``github.close_issue``, which undoes it, and ``github.rate_limit``, a probe's read.

GitHub has no idempotency key. The issue's body ends with a hidden comment holding the
execution's key (``<!-- moat:<key> -->``); an attempt that may repeat an earlier one first
lists the repository's issues, newest first, created since the execution started
(``state=all&sort=created&direction=desc&since=…``: lists are strongly consistent, the search
API lags) and answers with the issue it finds.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx
from temporalio.exceptions import ApplicationError

from activities.adapters.base import fail, parse_input
from activities.adapters.github_app import AppCredential
from activities.adapters.guard import HostGuard
from activities.adapters.plugins import Driven
from activities.adapters.reconcile import (
    base_url,
    credential_of,
    outcome_unknown,
    window_start,
)
from activities.adapters.responses import ProviderResponse, parse_retry_after, recorded
from activities.adapters.sender import SendRequest, send
from schemas.capabilities import GithubCloseIssueInput, GithubCreateIssueInput, NoInput
from schemas.connections import DEFAULT_BASE_URLS, ConnectionType, Credential
from schemas.provider_evidence import ProviderEvidence, ReconcileProof
from schemas.records import ErrorTaxonomy
from schemas.run import MAX_RETRY_AFTER, AdapterInput, AdapterOutput

DEFAULT_BASE_URL = DEFAULT_BASE_URLS[ConnectionType.GITHUB]
PER_PAGE = 100
# How many pages a look-up reads before it gives up (and the outcome is unknown).
LIST_PAGES = 10
API_VERSION = "2022-11-28"


def mark(key: str) -> str:
    return f"<!-- moat:{key} -->"


class _GithubRestApi:
    """A REST API caller with the worker's HTTP client and host guard."""

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
    ) -> Any:
        bearer, generation = await _bearer(inp, cred, None)
        answer = await send(
            self._client, self._guard, _request(inp, method, url, bearer, json, params)
        )
        if answer.status == 401 and isinstance(cred, AppCredential):
            # An installation token GitHub refused before its expiry (revoked): one new
            # token, one more try.
            bearer, _ = await _bearer(inp, cred, generation)
            request = _request(inp, method, url, bearer, json, params)
            answer = await send(self._client, self._guard, request)
        if answer.status < 300:
            return answer.json()
        refusal = _refusal(answer)
        if reading and refusal.non_retryable:
            raise outcome_unknown(
                f"this connection cannot list the repository's issues ({refusal.message})",
                http_status=answer.status,
                provider_response=answer.said(),
            )
        raise refusal


class GithubAdapter(_GithubRestApi, Driven):
    """``github.create_issue``: ``call`` creates the issue with the key's mark at the end of
    its body; ``find`` lists the repository's newest issues for it."""

    def looks_in(self, inp: AdapterInput) -> str:
        return f"the issues of {inp.input.get('owner')}/{inp.input.get('repo')}"

    async def find(self, inp: AdapterInput, credential: Credential | None) -> AdapterOutput | None:
        issue = parse_input(inp, GithubCreateIssueInput)
        cred = credential_of(inp, credential, ConnectionType.GITHUB)
        repo_url = _issues_url(cred, issue.owner, issue.repo)
        found = await self._find(inp, repo_url, cred)
        if found is None:
            return None
        proof = ReconcileProof(
            looked_in=self.looks_in(inp),
            search={"method": "GET", "url": repo_url, **_list_params(inp)},
            mark=f"the issue body ends with {mark(inp.idempotency_key)}",
            since=window_start(inp),
            attempt=inp.attempt,
        )
        return _output(found, reconciled=True, proof=proof)

    async def call(self, inp: AdapterInput, credential: Credential | None) -> AdapterOutput:
        issue = parse_input(inp, GithubCreateIssueInput)
        cred = credential_of(inp, credential, ConnectionType.GITHUB)
        body: dict[str, Any] = {
            "title": issue.title,
            "body": (issue.body + "\n\n" if issue.body else "") + mark(inp.idempotency_key),
        }
        if issue.labels is not None:
            body["labels"] = issue.labels
        if issue.assignees is not None:
            body["assignees"] = issue.assignees
        repo_url = _issues_url(cred, issue.owner, issue.repo)
        created = await self._call(inp, "POST", repo_url, cred, json=body)
        if not isinstance(created, dict):
            raise fail(ErrorTaxonomy.UNKNOWN, "GitHub answered 201 without an issue")
        return _output(created, reconciled=None)

    async def _find(
        self, inp: AdapterInput, repo_url: str, cred: Credential
    ) -> dict[str, Any] | None:
        start = window_start(inp)
        wanted = mark(inp.idempotency_key)
        params = _list_params(inp)
        for page in range(1, LIST_PAGES + 1):
            items = await self._call(
                inp, "GET", repo_url, cred, params={**params, "page": str(page)}, reading=True
            )
            if not isinstance(items, list):
                raise fail(ErrorTaxonomy.UNKNOWN, "GitHub's issue list was not a list")
            for item in items:
                if not isinstance(item, dict) or "pull_request" in item:
                    continue
                if (item.get("body") or "").rstrip().endswith(wanted):
                    return item
            if len(items) < PER_PAGE or _created_before(items[-1], start):
                return None
        raise outcome_unknown(
            f"more than {LIST_PAGES * PER_PAGE} issues changed since the execution started"
        )


class GithubCloseIssueAdapter(_GithubRestApi):
    """``github.close_issue``: GitHub's ``PATCH /repos/{owner}/{repo}/issues/{number}`` with
    ``{"state": "closed"}``, exactly once by nature: GitHub answers a closed issue's close
    with the issue, still closed, so every attempt sends the same call and a repeat changes
    nothing. Refusals map as for creating an issue (410: the issue was deleted, or the
    repository's issues are disabled)."""

    async def __call__(
        self, inp: AdapterInput, credential: Credential | None = None
    ) -> AdapterOutput:
        close = parse_input(inp, GithubCloseIssueInput)
        cred = credential_of(inp, credential, ConnectionType.GITHUB)
        url = f"{_issues_url(cred, close.owner, close.repo)}/{close.number}"
        body = {"state": "closed"}
        if close.state_reason is not None:
            body["state_reason"] = close.state_reason
        issue = await self._call(inp, "PATCH", url, cred, json=body)
        if not isinstance(issue, dict):
            raise fail(ErrorTaxonomy.UNKNOWN, "GitHub answered the close without an issue")
        out = recorded(200, {k: issue.get(k) for k in ("number", "html_url", "state")})
        return out.model_copy(update={"evidence": _evidence(issue, None, 200)})


class GithubRateLimitAdapter(_GithubRestApi):
    """``github.rate_limit``: GitHub's ``GET /rate_limit``, which changes nothing and is not
    counted against the limit, so a probe of a GitHub connection can call it on a schedule.
    Refusals map as for creating an issue (401: the connection's token)."""

    async def __call__(
        self, inp: AdapterInput, credential: Credential | None = None
    ) -> AdapterOutput:
        parse_input(inp, NoInput)
        cred = credential_of(inp, credential, ConnectionType.GITHUB)
        url = f"{base_url(cred, DEFAULT_BASE_URL)}/rate_limit"
        answer = await self._call(inp, "GET", url, cred)
        resources = answer.get("resources") if isinstance(answer, dict) else None
        core = resources.get("core") if isinstance(resources, dict) else None
        if not isinstance(core, dict):
            raise fail(ErrorTaxonomy.UNKNOWN, "GitHub answered /rate_limit without `core`")
        # The REST limit only: what the connection's calls spend. A used-up limit is still
        # an answer (the token works); the calls that follow wait for ``reset``.
        return recorded(
            200,
            {"core": {k: core.get(k) for k in ("limit", "remaining", "used", "reset")}},
        )


async def _bearer(
    inp: AdapterInput, cred: Credential, refused_generation: int | None
) -> tuple[Credential, int | None]:
    """What the call is sent with: the connection's token, or a GitHub App's installation
    token (and its generation)."""
    if isinstance(cred, AppCredential) and cred.bearer is not None:
        return await cred.bearer(inp, refused_generation)
    return cred, None


def _request(
    inp: AdapterInput,
    method: str,
    url: str,
    cred: Credential,
    json: Any,
    params: dict[str, str] | None,
) -> SendRequest:
    return SendRequest(
        method,
        url,
        headers={
            "Authorization": f"Bearer {cred.secret}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION,
        },
        credential=cred,
        timeout=inp.capability.timeout_seconds,
        allow_hosts=inp.http_allow_hosts,
        json_body=json,
        params=params,
    )


def _issues_url(cred: Credential, owner: str, repo: str) -> str:
    """The repository's issues: each name one path segment, whatever it holds (the input
    schema already keeps them to GitHub's characters, "." and ".." aside)."""
    names = "/".join(quote(name, safe="") for name in (owner, repo))
    return f"{base_url(cred, DEFAULT_BASE_URL)}/repos/{names}/issues"


def _list_params(inp: AdapterInput) -> dict[str, str]:
    """The look-up's list: every issue, newest first, changed since the execution started."""
    return {
        "state": "all",
        "sort": "created",
        "direction": "desc",
        "since": window_start(inp).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "per_page": str(PER_PAGE),
    }


def _evidence(
    issue: dict[str, Any], proof: ReconcileProof | None, status: int = 201
) -> ProviderEvidence:
    """The issue as GitHub names it: its node id, number, database id and page."""
    attributes = {k: v for k in ("number", "id") if isinstance(v := issue.get(k), int)}
    return ProviderEvidence(
        provider="github",
        object_type="issue",
        object_id=str(issue["node_id"]) if issue.get("node_id") else None,
        permalink=str(issue["html_url"]) if issue.get("html_url") else None,
        attributes=attributes,
        http_status=status,
        reconciled=proof,
    )


def _output(
    issue: dict[str, Any], *, reconciled: bool | None, proof: ReconcileProof | None = None
) -> AdapterOutput:
    out = recorded(
        201,
        {
            "number": issue.get("number"),
            "html_url": issue.get("html_url"),
            "id": issue.get("id"),
            "reconciled": bool(reconciled),
        },
    )
    return out.model_copy(update={"reconciled": reconciled, "evidence": _evidence(issue, proof)})


def _created_before(item: Any, start: datetime) -> bool:
    try:
        created = datetime.fromisoformat(str(item.get("created_at")).replace("Z", "+00:00"))
    except (AttributeError, ValueError):
        return False
    return created < start


def _rate_limit_delay(answer: ProviderResponse) -> timedelta | None:
    """GitHub's wait: ``Retry-After`` (secondary limits), else ``x-ratelimit-reset`` (epoch
    seconds) when the primary limit is used up; None when the answer is no rate limit."""
    headers = answer.response.headers
    retry_after = parse_retry_after(headers.get("retry-after"))
    if retry_after is not None:
        return retry_after
    reset_at = headers.get("x-ratelimit-reset") or ""
    if headers.get("x-ratelimit-remaining") == "0" and reset_at.isdigit():
        reset = datetime.fromtimestamp(int(reset_at), UTC)
        return max(reset - datetime.now(UTC), timedelta(0))
    return None


def _refusal(answer: ProviderResponse) -> ApplicationError:
    status = answer.status
    said = answer.said()
    detail = said.get("message") if isinstance(said, dict) else None
    message = f"GitHub answered HTTP {status}" + (f": {detail}" if detail else "")
    if status in (403, 429):
        delay = _rate_limit_delay(answer)
        if delay is not None or status == 429:
            return fail(
                ErrorTaxonomy.PROVIDER_RATE_LIMITED,
                message,
                http_status=status,
                retry_after=min(delay, MAX_RETRY_AFTER) if delay is not None else None,
                provider_response=said,
            )
    if status in (401, 403):
        taxonomy = ErrorTaxonomy.PROVIDER_AUTH_FAILURE
    elif status == 404:
        taxonomy = ErrorTaxonomy.PROVIDER_NOT_FOUND
    elif status >= 500:
        return fail(
            ErrorTaxonomy.PROVIDER_SERVER_ERROR, message, http_status=status, provider_response=said
        )
    else:
        # 410 (the issue deleted, or the repository's issues disabled), 422 (with GitHub's
        # ``errors`` list in the details), …
        taxonomy = ErrorTaxonomy.PROVIDER_INVALID_INPUT
    return fail(taxonomy, message, http_status=status, retryable=False, provider_response=said)
