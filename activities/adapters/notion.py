"""``notion.create_page``, exactly once by reconcile, and ``notion.update_page``, exactly once
by nature: Notion's pages API as ``call``/``find`` adapters (``activities.adapters.plugins``).

Notion has no idempotency key. ``create_page`` writes the execution's downstream key into
the rich-text property the connection names (``config.mark_property``); before any attempt
that may repeat an earlier one, ``find`` queries the database for a page whose mark equals
the key, and that page is the answer.

Both query endpoints are handled, by the connection's ``notion_version``:

- ``2022-06-28``: the page's parent is the database; ``POST /v1/databases/{id}/query``.
- ``2025-09-03`` (the default): a database is a container of data sources, and pages live
  in a data source. The data source is the input's ``data_source_id`` or, unset, the
  database's only one (``GET /v1/databases/{id}``: one more round trip on each call and
  each look-up; a database of several data sources is refused); the page's parent is that
  data source; ``POST /v1/data_sources/{id}/query``.

Without a mark property there is nothing to look for, and a memory-less adapter cannot
tell a retry after a refusal from a retry after an attempt whose end nobody saw (a worker
lost mid-call, an attempt past its deadline, a reset or resumed run). So such a connection
attempts the page once per execution: every failure is final. A failure after which the
page may exist (no answer, a 5xx) ends ``outcome_unknown`` at once; a refusal after which
it cannot (any 4xx, 409 and 429 included) ends with that refusal, saying that nothing was
created and, for 429, when Notion takes calls again. An attempt that repeats an earlier one
ends ``outcome_unknown`` without calling Notion.

``update_page`` sends the same ``PATCH /v1/pages/{id}`` on every attempt: setting the same
values twice leaves the same page. Notion refuses to edit a page in the trash, so a repeat
that moves a page to the trash and is refused finds the page there (``GET``) and answers it.

Notion's refusals (``{"object": "error", "status", "code", "message"}``) map onto the
taxonomy in ``_CODES``; a failure is worded by Moat and keeps Notion's ``status``,
``code``, ``message`` and ``request_id`` in its provider response, with ``Retry-After`` as
``retry_after_seconds`` when Notion sent one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
from temporalio.exceptions import ApplicationError

from activities.adapters.base import fail, parse_input
from activities.adapters.guard import HostGuard
from activities.adapters.plugins import AdapterContext
from activities.adapters.reconcile import AMBIGUOUS, base_url, credential_of, outcome_unknown
from activities.adapters.responses import ProviderResponse, parse_retry_after, recorded
from activities.adapters.sender import SendRequest, send
from schemas.connections import Credential
from schemas.errors import ErrorCode
from schemas.notion import (
    DEFAULT_BASE_URL,
    DEFAULT_NOTION_VERSION,
    DEFAULT_TITLE_PROPERTY,
    NOTION,
    NotionCreatePageInput,
    NotionUpdatePageInput,
    check_config,
)
from schemas.provider_evidence import ProviderEvidence
from schemas.records import ErrorTaxonomy
from schemas.run import MAX_RETRY_AFTER, AdapterInput, AdapterOutput

DATA_SOURCES_VERSION = "2025-09-03"
PAGE_SIZE = 100
# How many pages of query results a look-up reads before it gives up (outcome unknown).
QUERY_PAGES = 10

_INVALID = ErrorTaxonomy.PROVIDER_INVALID_INPUT
_AUTH = ErrorTaxonomy.PROVIDER_AUTH_FAILURE
_SERVER = ErrorTaxonomy.PROVIDER_SERVER_ERROR
# Notion's error codes: the taxonomy, whether another attempt may succeed, what it means.
_CODES: dict[str, tuple[ErrorTaxonomy, bool, str]] = {
    "invalid_json": (_INVALID, False, "the request body was not JSON"),
    "invalid_request_url": (_INVALID, False, "the request URL is not one Notion serves"),
    "invalid_request": (_INVALID, False, "Notion does not support this request"),
    "validation_error": (_INVALID, False, "the request does not match what Notion takes"),
    "missing_version": (_INVALID, False, "the Notion-Version header is missing or unknown"),
    "unauthorized": (_AUTH, False, "the connection's token is not valid"),
    "restricted_resource": (
        _AUTH,
        False,
        "the integration may not do this (its capabilities, or what is shared with it)",
    ),
    "object_not_found": (
        ErrorTaxonomy.PROVIDER_NOT_FOUND,
        False,
        "no such page or database, or it is not shared with the integration",
    ),
    "conflict_error": (_INVALID, True, "a conflicting change was made at the same time"),
    "rate_limited": (ErrorTaxonomy.PROVIDER_RATE_LIMITED, True, "Notion rate-limited the call"),
    "internal_server_error": (_SERVER, True, "Notion failed"),
    "bad_gateway": (_SERVER, True, "Notion's gateway failed"),
    "service_unavailable": (_SERVER, True, "Notion is unavailable"),
    "database_connection_unavailable": (_SERVER, True, "Notion's database is unavailable"),
    "gateway_timeout": (_SERVER, True, "Notion timed out"),
}
# A status whose body names no code Moat knows.
_BY_STATUS: dict[int, str] = {
    400: "validation_error",
    401: "unauthorized",
    403: "restricted_resource",
    404: "object_not_found",
    409: "conflict_error",
    429: "rate_limited",
    500: "internal_server_error",
    502: "bad_gateway",
    503: "service_unavailable",
    504: "gateway_timeout",
}
_RETRY_AFTER_STATUSES = frozenset({429, 503})


@dataclass(frozen=True)
class NotionConnection:
    """What a ``notion`` connection's config says (``schemas.notion``)."""

    api: str
    version: str
    mark: str | None
    title: str

    @property
    def data_sources(self) -> bool:
        return self.version == DATA_SOURCES_VERSION


def connection_of(
    inp: AdapterInput, credential: Credential | None
) -> tuple[Credential, NotionConnection]:
    """The call's ``notion`` credential and its config read, refused when the config holds
    a value Moat cannot use (``schemas.notion.check_config``)."""
    cred = credential_of(inp, credential, NOTION)
    config = dict(cred.config)
    try:
        check_config(config)
    except ValueError as err:
        raise _connection_invalid(f"config.{err}") from None
    return cred, NotionConnection(
        api=base_url(cred, DEFAULT_BASE_URL),
        version=config.get("notion_version") or DEFAULT_NOTION_VERSION,
        mark=config.get("mark_property") or None,
        title=config.get("title_property") or DEFAULT_TITLE_PROPERTY,
    )


def _connection_invalid(message: str) -> ApplicationError:
    return fail(
        ErrorTaxonomy.GATEWAY_ERROR,
        f"the notion connection is not usable: {message}",
        code=ErrorCode.CONNECTION_INVALID,
        retryable=False,
    )


class NotionApi:
    """One Notion API call with the connection's token and version, its refusals as Moat
    failures."""

    def __init__(self, client: httpx.AsyncClient, guard: HostGuard) -> None:
        self._client = client
        self._guard = guard

    async def request(
        self,
        inp: AdapterInput,
        cred: Credential,
        conn: NotionConnection,
        method: str,
        path: str,
        body: Any = None,
    ) -> dict[str, Any]:
        request = SendRequest(
            method,
            f"{conn.api}{path}",
            headers={"Authorization": f"Bearer {cred.secret}", "Notion-Version": conn.version},
            credential=cred,
            timeout=inp.capability.timeout_seconds,
            allow_hosts=inp.http_allow_hosts,
            json_body=body,
        )
        answer = await send(self._client, self._guard, request)
        data = answer.json()
        if answer.status < 300 and isinstance(data, dict):
            return data
        if answer.status < 300:
            raise fail(
                ErrorTaxonomy.UNKNOWN,
                f"Notion answered {method} {path.split('/')[1]} with no JSON object",
                code=ErrorCode.PROVIDER_INVALID_RESPONSE,
                http_status=answer.status,
            )
        raise refusal(answer)

    async def data_source(
        self, inp: AdapterInput, cred: Credential, conn: NotionConnection, database_id: str
    ) -> str:
        """The database's only data source (Notion version 2025-09-03)."""
        database = await self.request(inp, cred, conn, "GET", f"/databases/{database_id}")
        sources = [s for s in database.get("data_sources") or [] if isinstance(s, dict)]
        if len(sources) != 1 or not isinstance(sources[0].get("id"), str):
            raise fail(
                _INVALID,
                f"the database has {len(sources)} data sources: name the one to create the "
                "page in (`data_source_id`)",
                retryable=False,
            )
        source_id: str = sources[0]["id"]
        return source_id


def refusal(answer: ProviderResponse) -> ApplicationError:
    """Notion's error answer as a Moat failure: worded by Moat, Notion's ``code`` and
    ``message`` kept in the provider response."""
    status = answer.status
    said = answer.said()
    body = said if isinstance(said, dict) else {}
    code = str(body.get("code") or "")
    known = code if code in _CODES else _BY_STATUS.get(status)
    if known is None and status >= 500:
        known = "internal_server_error"
    taxonomy, retryable, meaning = _CODES.get(known or "", (_INVALID, False, "Notion refused it"))
    retry_after = None
    if status in _RETRY_AFTER_STATUSES:
        retry_after = parse_retry_after(answer.response.headers.get("retry-after"))
    kept: dict[str, Any] = {
        k: body[k] for k in ("status", "code", "message", "request_id") if k in body
    }
    if retry_after is not None:
        # The header, which the caller needs when no retry waits for it (no mark property).
        kept["retry_after_seconds"] = int(retry_after.total_seconds())
    return fail(
        taxonomy,
        f"{meaning} (Notion answered HTTP {status}" + (f", {code})" if code else ")"),
        http_status=status,
        retryable=retryable,
        retry_after=min(retry_after, MAX_RETRY_AFTER) if retry_after is not None else None,
        provider_response=kept or said,
    )


def _text(content: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": {"content": content}}]


def _plain(value: Any) -> str:
    """A rich-text or title property value's text."""
    parts = value if isinstance(value, list) else []
    out = []
    for part in parts:
        if isinstance(part, dict):
            text = part.get("plain_text")
            if not isinstance(text, str):
                text = (part.get("text") or {}).get("content") or ""
            out.append(text)
    return "".join(out)


def marked(page: Any, mark: str, key: str) -> bool:
    """Whether ``page`` holds ``key`` in its property ``mark`` (named by name or id)."""
    if not isinstance(page, dict) or page.get("object") != "page":
        return False
    for name, prop in (page.get("properties") or {}).items():
        if isinstance(prop, dict) and mark in (name, prop.get("id")):
            return _plain(prop.get("rich_text")) == key
    return False


def _status(err: ApplicationError) -> int | None:
    details = err.details[0] if err.details and isinstance(err.details[0], dict) else {}
    status = details.get("http_status")
    return status if isinstance(status, int) else None


def _page_output(page: dict[str, Any], **more: Any) -> AdapterOutput:
    out = recorded(200, {"page_id": page.get("id"), "url": page.get("url"), **more})
    evidence = ProviderEvidence(
        provider="notion",
        object_type="page",
        object_id=str(page["id"]) if page.get("id") else None,
        permalink=str(page["url"]) if page.get("url") else None,
        http_status=200,
    )
    return out.model_copy(update={"evidence": evidence})


def _trashed(page: dict[str, Any]) -> bool:
    return bool(page.get("in_trash") or page.get("archived"))


def _refused_for_input(inp: AdapterInput, message: str) -> ApplicationError:
    return fail(
        ErrorTaxonomy.GATEWAY_ERROR,
        f"{inp.capability.id}: {message}",
        code=ErrorCode.SCHEMA_VALIDATION_FAILED,
        retryable=False,
    )


class NotionCreatePage(NotionApi):
    """``notion.create_page``: ``call`` creates the page with its mark, ``find`` queries the
    database for the mark (see the module's docstring)."""

    async def call(self, inp: AdapterInput, credential: Credential | None) -> AdapterOutput:
        page = parse_input(inp, NotionCreatePageInput)
        cred, conn = connection_of(inp, credential)
        if conn.mark is None and inp.repeat:
            raise outcome_unknown(
                f"{inp.capability.id} may have created the page on an earlier attempt, and "
                "its connection names no mark property (config.mark_property) to look for it"
            )
        try:
            parent = await self._parent(inp, cred, conn, page)
        except ApplicationError as err:
            # Nothing was sent that creates a page.
            raise (_final(err) if conn.mark is None else err) from None
        body = self._body(inp, conn, page, parent)
        try:
            created = await self.request(inp, cred, conn, "POST", "/pages", body)
        except ApplicationError as err:
            raise (_once(err) if conn.mark is None else err) from None
        return _page_output(created, reconciled=False)

    def looks_in(self, inp: AdapterInput) -> str:
        """What ``find`` reads, for a failed look-up's message."""
        return f"the pages of Notion database {inp.input.get('database_id')}"

    async def find(self, inp: AdapterInput, credential: Credential | None) -> AdapterOutput | None:
        page = parse_input(inp, NotionCreatePageInput)
        cred, conn = connection_of(inp, credential)
        if conn.mark is None:
            return None  # nothing to look for: ``call`` refuses the repeat
        if conn.data_sources:
            source = page.data_source_id or await self.data_source(
                inp, cred, conn, page.database_id
            )
            path = f"/data_sources/{source}/query"
        else:
            path = f"/databases/{page.database_id}/query"
        query: dict[str, Any] = {
            "filter": {"property": conn.mark, "rich_text": {"equals": inp.idempotency_key}},
            "page_size": PAGE_SIZE,
        }
        for _ in range(QUERY_PAGES):
            found = await self.request(inp, cred, conn, "POST", path, query)
            for result in found.get("results") or []:
                if marked(result, conn.mark, inp.idempotency_key):
                    return _page_output(result, reconciled=True)
            cursor = found.get("next_cursor")
            if not found.get("has_more") or not isinstance(cursor, str) or not cursor:
                return None
            query = {**query, "start_cursor": cursor}
        raise outcome_unknown(
            f"the query for the page's mark went on past {QUERY_PAGES * PAGE_SIZE} results"
        )

    async def _parent(
        self,
        inp: AdapterInput,
        cred: Credential,
        conn: NotionConnection,
        page: NotionCreatePageInput,
    ) -> dict[str, str]:
        if not conn.data_sources:
            return {"type": "database_id", "database_id": page.database_id}
        source = page.data_source_id or await self.data_source(inp, cred, conn, page.database_id)
        return {"type": "data_source_id", "data_source_id": source}

    def _body(
        self,
        inp: AdapterInput,
        conn: NotionConnection,
        page: NotionCreatePageInput,
        parent: dict[str, str],
    ) -> dict[str, Any]:
        properties = dict(page.properties or {})
        for name, what in ((conn.title, "the title"), (conn.mark, "the mark")):
            if name is not None and name in properties:
                raise _refused_for_input(
                    inp,
                    f"`properties` may not set {name!r}, {what} property of the connection"
                    + (": give the title in `title`" if name == conn.title else ""),
                )
        properties[conn.title] = {"title": _text(page.title)}
        if conn.mark is not None:
            properties[conn.mark] = {"rich_text": _text(inp.idempotency_key)}
        body: dict[str, Any] = {"parent": parent, "properties": properties}
        if page.content:
            body["children"] = [_block(item) for item in page.content]
        return body


def _block(item: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(item, str):
        return {"object": "block", "type": "paragraph", "paragraph": {"rich_text": _text(item)}}
    return item


def _once(err: ApplicationError) -> ApplicationError:
    """A failure of a create that is attempted once (no mark): the page may exist (outcome
    unknown), or Notion refused it and nothing was created (final, worded so)."""
    if err.type in AMBIGUOUS:
        return outcome_unknown(
            f"creating the page ended without an answer ({err.type}), and the connection "
            "names no mark property (config.mark_property) to look for it"
        )
    return _final(err)


def _final(err: ApplicationError) -> ApplicationError:
    """A failure after which no page was created, made final: a connection without a mark
    property repeats nothing (a retry could not tell itself from a blind repeat)."""
    if err.non_retryable:
        return err
    details = err.details[0] if err.details and isinstance(err.details[0], dict) else {}
    wait = err.next_retry_delay
    return fail(
        ErrorTaxonomy(details.get("taxonomy", _INVALID.value)),
        f"{err.message}; nothing was created: execute again with a new idempotency key"
        + (f" after {int(wait.total_seconds())} s" if wait is not None else "")
        + " (a connection without config.mark_property is not retried)",
        http_status=details.get("http_status"),
        retryable=False,
        provider_response=details.get("provider_response"),
    )


class NotionUpdatePage(NotionApi):
    """``notion.update_page``: the same ``PATCH`` on every attempt (see the module's
    docstring)."""

    async def call(self, inp: AdapterInput, credential: Credential | None) -> AdapterOutput:
        update = parse_input(inp, NotionUpdatePageInput)
        cred, conn = connection_of(inp, credential)
        if conn.mark is not None and conn.mark in (update.properties or {}):
            raise _refused_for_input(
                inp, f"`properties` may not set {conn.mark!r}, the connection's mark property"
            )
        body: dict[str, Any] = {}
        if update.properties is not None:
            body["properties"] = update.properties
        if update.archived is not None:
            body["in_trash" if conn.data_sources else "archived"] = update.archived
        path = f"/pages/{update.page_id}"
        try:
            page = await self.request(inp, cred, conn, "PATCH", path, body)
        except ApplicationError as err:
            if not (inp.repeat and update.archived and _status(err) == 400):
                raise
            # Refused, as an edit of a page in the trash is: an earlier attempt put it there.
            page = await self.request(inp, cred, conn, "GET", path)
            if not _trashed(page):
                raise err from None
        return _page_output(page, archived=_trashed(page))


def create_page(ctx: AdapterContext) -> NotionCreatePage:
    return NotionCreatePage(ctx.http, ctx.guard)


def update_page(ctx: AdapterContext) -> NotionUpdatePage:
    return NotionUpdatePage(ctx.http, ctx.guard)
