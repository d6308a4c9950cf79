"""A fake of Notion's API, from its public reference, under ``/v1``.

- ``POST /v1/pages`` creates a page in a database: ``parent`` ``{"database_id"}`` (a
  database of one data source) or, from version 2025-09-03, ``{"data_source_id"}``;
  ``properties`` by property name or id, each value checked against the property's type
  (title, rich_text, number, select, multi_select, status, checkbox, date, url, email,
  phone_number); ``children`` at most 100 blocks. Answers the page object.
- ``GET`` and ``PATCH /v1/pages/{id}``: read a page; set ``properties`` and ``in_trash``
  (or its older alias ``archived``). A page in the trash refuses edits of its properties.
- ``GET /v1/databases/{id}``: the database; from 2025-09-03 the container, listing its
  ``data_sources`` (``id``, ``name``), before it with its ``properties``.
- ``POST /v1/databases/{id}/query`` (before 2025-09-03) and ``POST
  /v1/data_sources/{id}/query`` (from it): ``filter`` on one property (``rich_text`` or
  ``title``: ``equals``, ``does_not_equal``, ``contains``, ``starts_with``, ``is_empty``,
  ``is_not_empty``; ``checkbox``: ``equals``), or ``and``/``or`` of such; pages in the
  trash left out; newest first; ``page_size`` up to 100 (default 100), ``start_cursor``,
  answered with ``has_more`` and ``next_cursor``.

Every call needs ``Notion-Version`` (400 ``missing_version``; a version it does not know is
a ``validation_error``) and a bearer token (401 ``unauthorized`` without one, or with one
of ``bad_tokens``; 403 ``restricted_resource`` for ``read_only_tokens`` writing). A
database or page not shared with the integration (``unshared``) is 404
``object_not_found``, as one it does not know. Errors are Notion's body: ``{"object":
"error", "status", "code", "message", "request_id"}``.

Misbehaviours: ``rate_limit(count, retry_after)``: the next ``count`` API calls (or only
creates and updates) are 429 ``rate_limited`` with ``Retry-After``; ``error_next``: the
next calls answer these statuses (409 ``conflict_error``, 500, 502, 503, 504) with no
effect; ``fail_next``: the next creates or updates are performed and their answer lost.
``create_times``/``update_times`` hold ``time.monotonic()`` of each call that reached
``POST``/``PATCH /v1/pages``, and ``answered`` every API call's time, method, path and
status.
"""

from __future__ import annotations

import re
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from starter.devstack.providers.server import FakeServer, Reply, Request

VERSIONS = ("2022-06-28", "2025-09-03")
DATA_SOURCES_VERSION = "2025-09-03"
MAX_PAGE_SIZE = 100
MAX_BLOCKS = 100
PROPERTY_TYPES = frozenset(
    {
        "title",
        "rich_text",
        "number",
        "select",
        "multi_select",
        "status",
        "checkbox",
        "date",
        "url",
        "email",
        "phone_number",
    }
)
TEXT_CONDITIONS = frozenset(
    {"equals", "does_not_equal", "contains", "starts_with", "is_empty", "is_not_empty"}
)
# A demo database ``moat up --fake-providers`` starts with: a title, the mark, a status.
DEMO_DATABASE = "5c6a28216bb14a7eb6e1c50111515c3a"
DEMO_PROPERTIES = {"Name": "title", "Moat key": "rich_text", "Status": "select"}
_ERRORS = {
    409: ("conflict_error", "Conflict occurred while saving. Please try again."),
    500: ("internal_server_error", "Unexpected error occurred."),
    502: ("bad_gateway", "Bad gateway."),
    503: ("service_unavailable", "Notion is unavailable, please try again later."),
    504: ("gateway_timeout", "Gateway timeout."),
}
_PAGE = re.compile(r"^/v1/pages/([0-9a-fA-F-]{32,36})$")
_DATABASE = re.compile(r"^/v1/databases/([0-9a-fA-F-]{32,36})(/query)?$")
_SOURCE_QUERY = re.compile(r"^/v1/data_sources/([0-9a-fA-F-]{32,36})/query$")


def notion_id(value: str) -> str:
    """A Notion id in its dashed form, whatever form it was given in."""
    return str(uuid.UUID(value))


class NotionError(Exception):
    def __init__(self, status: int, code: str, message: str, **headers: str) -> None:
        super().__init__(message)
        self.reply = error(status, code, message)
        self.reply.headers.update(headers)


def error(status: int, code: str, message: str) -> Reply:
    return Reply(
        status,
        {
            "object": "error",
            "status": status,
            "code": code,
            "message": message,
            "request_id": str(uuid.uuid4()),
        },
    )


class FakeNotion(FakeServer):
    name = "notion"

    def __init__(self, *, demo: bool = False) -> None:
        super().__init__()
        self.bad_tokens: set[str] = set()
        self.read_only_tokens: set[str] = set()
        self.unshared: set[str] = set()  # database and page ids (dashed)
        self.databases: dict[str, dict[str, Any]] = {}
        self.sources: dict[str, str] = {}  # data source id -> database id
        self.pages: dict[str, dict[str, Any]] = {}
        self.rate_limited_next = 0
        self.rate_limit_effects_only = False
        self.retry_after = 1
        self.error_next: list[int] = []
        # (time.monotonic(), method, path, status) of every API call answered.
        self.answered: list[tuple[float, str, str, int]] = []
        self.create_times: list[float] = []
        self.update_times: list[float] = []
        self._clock = 0
        if demo:
            self.add_database(DEMO_PROPERTIES, database_id=DEMO_DATABASE, title="Moat demo")

    # --- what tests set and read ---------------------------------------------------------

    def add_database(
        self,
        properties: dict[str, str],
        *,
        database_id: str | None = None,
        title: str = "Tasks",
        data_sources: int = 1,
    ) -> str:
        """A database shared with every token, its properties by name -> type (one title);
        its id, dashed."""
        if sorted(properties.values()).count("title") != 1:
            raise ValueError("a database has exactly one title property")
        db = notion_id(database_id or uuid.uuid4().hex)
        schema = {
            name: {"id": "title" if kind == "title" else _short_id(), "name": name, "type": kind}
            for name, kind in properties.items()
        }
        with self.lock:
            ids = [str(uuid.uuid4()) for _ in range(data_sources)]
            self.databases[db] = {"title": title, "properties": schema, "sources": ids}
            for source in ids:
                self.sources[source] = db
        return db

    def data_sources_of(self, database_id: str) -> list[str]:
        with self.lock:
            return list(self.databases[notion_id(database_id)]["sources"])

    def pages_in(self, database_id: str) -> list[dict[str, Any]]:
        """The pages of a database, the trashed ones too, oldest first."""
        db = notion_id(database_id)
        with self.lock:
            return [p for p in self.pages.values() if p["_database"] == db]

    def rate_limit(self, count: int, retry_after: int, *, effects_only: bool = False) -> None:
        """The next ``count`` API calls (``effects_only``: creates and updates of pages) are
        refused 429 ``rate_limited`` with ``Retry-After: retry_after``."""
        with self.lock:
            self.rate_limited_next = count
            self.rate_limit_effects_only = effects_only
            self.retry_after = retry_after

    def reset(self) -> None:
        with self.lock:
            super().reset()
            self.pages.clear()
            self.rate_limited_next = 0
            self.error_next.clear()
            self.answered.clear()
            self.create_times.clear()
            self.update_times.clear()

    def state(self) -> dict[str, Any]:
        return {
            "databases": {
                db: {
                    "title": d["title"],
                    "data_sources": d["sources"],
                    "properties": {n: p["type"] for n, p in d["properties"].items()},
                    "pages": [_public(p) for p in self.pages.values() if p["_database"] == db],
                }
                for db, d in self.databases.items()
            }
        }

    # --- the API ---------------------------------------------------------------------------

    async def handle(self, request: Request) -> Reply:
        with self.lock:
            effect = True
            if request.method == "POST" and request.path == "/v1/pages":
                self.create_times.append(time.monotonic())
            elif request.method == "PATCH" and _PAGE.match(request.path):
                self.update_times.append(time.monotonic())
            else:
                effect = False
            try:
                reply = self._serve(request, self._admit(request, effect))
            except NotionError as refused:
                reply = refused.reply
            self.answered.append((time.monotonic(), request.method, request.path, reply.status))
            return reply

    def _admit(self, request: Request, effect: bool) -> str:
        """The request's Notion-Version, once the request may be served at all."""
        version = request.headers.get("notion-version")
        if not version:
            raise NotionError(
                400,
                "missing_version",
                "Notion-Version header failed validation: Notion-Version header should be "
                "defined, instead was `undefined`.",
            )
        if version not in VERSIONS:
            raise NotionError(
                400,
                "validation_error",
                f"Notion-Version header failed validation: should be one of {VERSIONS}, "
                f"instead was `{version}`.",
            )
        token = request.bearer()
        if not token or token in self.bad_tokens:
            raise NotionError(401, "unauthorized", "API token is invalid.")
        if self.rate_limited_next > 0 and (effect or not self.rate_limit_effects_only):
            self.rate_limited_next -= 1
            raise NotionError(
                429,
                "rate_limited",
                "You have been rate limited. Please try again in a few minutes.",
                **{"Retry-After": str(self.retry_after)},
            )
        if request.method in ("POST", "PATCH") and token in self.read_only_tokens:
            raise NotionError(
                403,
                "restricted_resource",
                "Insufficient permissions for this endpoint.",
            )
        if self.error_next:
            status = self.error_next.pop(0)
            raise NotionError(status, *_ERRORS[status])
        return version

    def _serve(self, request: Request, version: str) -> Reply:
        path, method = request.path, request.method
        if path == "/v1/pages" and method == "POST":
            return self._create(_body(request), version)
        page = _PAGE.match(path)
        if page and method in ("GET", "PATCH"):
            if method == "PATCH":
                return self._update(self._page(page.group(1)), _body(request))
            return Reply(200, _public(self._page(page.group(1))))
        database = _DATABASE.match(path)
        if database and method == "GET" and not database.group(2):
            return Reply(200, self._database_object(database.group(1), version))
        if database and method == "POST" and database.group(2):
            db = self._database(database.group(1))
            if version == DATA_SOURCES_VERSION or len(db["sources"]) != 1:
                raise _invalid_url(request)
            return self._query(db["sources"][0], _body(request), version)
        source = _SOURCE_QUERY.match(path)
        if source and method == "POST" and version == DATA_SOURCES_VERSION:
            return self._query(self._source(source.group(1)), _body(request), version)
        raise _invalid_url(request)

    # --- lookups ---------------------------------------------------------------------------

    def _database(self, raw: str) -> dict[str, Any]:
        db = _dashed(raw)
        if db not in self.databases or db in self.unshared:
            raise NotionError(
                404,
                "object_not_found",
                f"Could not find database with ID: {db}. Make sure the relevant pages and "
                "databases are shared with your integration.",
            )
        return self.databases[db]

    def _source(self, raw: str) -> str:
        source = _dashed(raw)
        db = self.sources.get(source)
        if db is None or db in self.unshared:
            raise NotionError(
                404,
                "object_not_found",
                f"Could not find data_source with ID: {source}. Make sure the relevant pages "
                "and databases are shared with your integration.",
            )
        return source

    def _page(self, raw: str) -> dict[str, Any]:
        page_id = _dashed(raw)
        page = self.pages.get(page_id)
        if page is None or page_id in self.unshared or page["_database"] in self.unshared:
            raise NotionError(
                404,
                "object_not_found",
                f"Could not find page with ID: {page_id}. Make sure the relevant pages and "
                "databases are shared with your integration.",
            )
        return page

    def _database_object(self, raw: str, version: str) -> dict[str, Any]:
        db = self._database(raw)
        out: dict[str, Any] = {
            "object": "database",
            "id": _dashed(raw),
            "title": [_rich(db["title"])],
            "in_trash": False,
            "archived": False,
            "url": f"https://www.notion.so/{_dashed(raw).replace('-', '')}",
        }
        if version == DATA_SOURCES_VERSION:
            out["data_sources"] = [
                {"id": s, "name": f"{db['title']} {i + 1}" if i else db["title"]}
                for i, s in enumerate(db["sources"])
            ]
        else:
            out["properties"] = db["properties"]
        return out

    # --- pages -----------------------------------------------------------------------------

    def _create(self, body: dict[str, Any], version: str) -> Reply:
        parent = body.get("parent")
        if not isinstance(parent, dict):
            raise _validation("body.parent should be defined, instead was `undefined`.")
        if "data_source_id" in parent and version == DATA_SOURCES_VERSION:
            source = self._source(str(parent["data_source_id"]))
            db_id = self.sources[source]
        elif "database_id" in parent:
            db_id = _dashed(str(parent["database_id"]))
            db = self._database(db_id)
            if len(db["sources"]) != 1:
                raise _validation(
                    "Databases with multiple data sources are not supported in this API "
                    "version: give a data_source_id parent."
                )
            source = db["sources"][0]
        else:
            raise _validation("body.parent.database_id should be defined.")
        schema = self.databases[db_id]["properties"]
        properties = _checked_properties(schema, body.get("properties") or {})
        children = body.get("children") or []
        if not isinstance(children, list) or len(children) > MAX_BLOCKS:
            raise _validation(f"body.children.length should be ≤ `{MAX_BLOCKS}`.")
        self._clock += 1
        now = _now()
        page_id = str(uuid.uuid4())
        page = {
            "object": "page",
            "id": page_id,
            "created_time": now,
            "last_edited_time": now,
            "created_by": {"object": "user", "id": "fake-integration"},
            "cover": None,
            "icon": None,
            "parent": {"type": "data_source_id", "data_source_id": source, "database_id": db_id}
            if version == DATA_SOURCES_VERSION
            else {"type": "database_id", "database_id": db_id},
            "in_trash": False,
            "archived": False,
            "properties": _page_properties(schema, properties),
            "url": f"https://www.notion.so/{page_id.replace('-', '')}",
            "public_url": None,
            "_database": db_id,
            "_order": self._clock,
            "_children": children,
        }
        self.pages[page_id] = page
        return self.acted(Reply(200, _public(page)))

    def _update(self, page: dict[str, Any], body: dict[str, Any]) -> Reply:
        trash = body.get("in_trash", body.get("archived"))
        if trash is not None and not isinstance(trash, bool):
            raise _validation("body.in_trash should be a boolean.")
        properties = body.get("properties")
        if properties is not None:
            if (page["in_trash"] if trash is None else trash) and page["in_trash"]:
                raise _validation(
                    "Can't edit block that is archived. You must unarchive the block before "
                    "editing."
                )
            schema = self.databases[page["_database"]]["properties"]
            checked = _checked_properties(schema, properties)
            page["properties"].update(_page_properties(schema, checked))
        if trash is not None:
            page["in_trash"] = page["archived"] = trash
        page["last_edited_time"] = _now()
        return self.acted(Reply(200, _public(page)))

    # --- queries ---------------------------------------------------------------------------

    def _query(self, source: str, body: dict[str, Any], version: str) -> Reply:
        size = body.get("page_size", MAX_PAGE_SIZE)
        if not isinstance(size, int) or not 1 <= size <= MAX_PAGE_SIZE:
            raise _validation(
                f"body.page_size should be ≤ `{MAX_PAGE_SIZE}`, instead was `{size}`."
            )
        db_id = self.sources[source]
        schema = self.databases[db_id]["properties"]
        match = _matcher(schema, body.get("filter"))
        chosen = sorted(
            (p for p in self.pages.values() if p["_database"] == db_id and not p["in_trash"]),
            key=lambda p: p["_order"],
            reverse=True,
        )
        chosen = [p for p in chosen if match(p)]
        start = 0
        cursor = body.get("start_cursor")
        if cursor is not None:
            ids = [p["id"] for p in chosen]
            if cursor not in ids:
                raise _validation(f"body.start_cursor should be a valid cursor, was `{cursor}`.")
            start = ids.index(cursor)
        window = chosen[start : start + size]
        more = start + size < len(chosen)
        kind = "page_or_data_source" if version == DATA_SOURCES_VERSION else "page_or_database"
        return Reply(
            200,
            {
                "object": "list",
                "results": [_public(p) for p in window],
                "next_cursor": chosen[start + size]["id"] if more else None,
                "has_more": more,
                "type": kind,
                kind: {},
            },
        )


def _body(request: Request) -> dict[str, Any]:
    if not request.body:
        return {}
    value = request.json()
    if not isinstance(value, dict):
        raise NotionError(400, "invalid_json", "Error parsing JSON body.")
    return value


def _dashed(raw: str) -> str:
    try:
        return notion_id(raw)
    except ValueError:
        raise _validation(f"path failed validation: {raw} should be a valid uuid.") from None


def _validation(message: str) -> NotionError:
    return NotionError(400, "validation_error", message)


def _invalid_url(request: Request) -> NotionError:
    return NotionError(400, "invalid_request_url", "Invalid request URL.")


def _short_id() -> str:
    return uuid.uuid4().hex[:4]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _rich(text: str) -> dict[str, Any]:
    return {
        "type": "text",
        "text": {"content": text, "link": None},
        "annotations": {
            "bold": False,
            "italic": False,
            "strikethrough": False,
            "underline": False,
            "code": False,
            "color": "default",
        },
        "plain_text": text,
        "href": None,
    }


def _public(page: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in page.items() if not k.startswith("_")}


def _named(schema: dict[str, dict[str, Any]], key: str) -> str | None:
    """The name of the property ``key`` names by name or by id."""
    if key in schema:
        return key
    return next((name for name, p in schema.items() if p["id"] == key), None)


def _checked_properties(
    schema: dict[str, dict[str, Any]], given: Any
) -> dict[str, tuple[str, Any]]:
    """The values given, by property name: (type, value); refused as Notion refuses them."""
    if not isinstance(given, dict):
        raise _validation("body.properties should be an object.")
    out: dict[str, tuple[str, Any]] = {}
    for key, value in given.items():
        name = _named(schema, key)
        if name is None:
            raise _validation(f"{key} is not a property that exists.")
        kind = schema[name]["type"]
        if not isinstance(value, dict) or kind not in value:
            raise _validation(f"{name} is expected to be {kind}.")
        inner = value[kind]
        if kind in ("title", "rich_text"):
            inner = _texts(name, inner)
        out[name] = (kind, inner)
    return out


def _texts(name: str, value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise _validation(f"body.properties.{name} should be an array.")
    out = []
    for part in value:
        content = (part.get("text") or {}).get("content") if isinstance(part, dict) else None
        if not isinstance(content, str):
            raise _validation(f"body.properties.{name}.text.content should be defined.")
        if len(content) > 2000:
            raise _validation(f"body.properties.{name}.text.content.length should be ≤ `2000`.")
        out.append(_rich(content))
    return out


def _page_properties(
    schema: dict[str, dict[str, Any]], values: dict[str, tuple[str, Any]]
) -> dict[str, Any]:
    """A page's properties as Notion answers them: every property of the database."""
    empty: dict[str, Any] = {"title": [], "rich_text": [], "multi_select": [], "checkbox": False}
    out = {}
    for name, prop in schema.items():
        kind = prop["type"]
        value = values[name][1] if name in values else empty.get(kind)
        out[name] = {"id": prop["id"], "type": kind, kind: value}
    return out


def _plain(prop: dict[str, Any]) -> str:
    return "".join(t.get("plain_text", "") for t in prop.get(prop["type"]) or [])


def _matcher(schema: dict[str, dict[str, Any]], spec: Any) -> Any:
    """A predicate over pages for a filter object."""
    if spec is None:
        return lambda page: True
    if not isinstance(spec, dict):
        raise _validation("body.filter should be an object.")
    for compound, combine in (("and", all), ("or", any)):
        if compound in spec:
            parts = [_matcher(schema, s) for s in spec[compound] or []]
            return lambda page, parts=parts, combine=combine: combine(p(page) for p in parts)
    name = _named(schema, str(spec.get("property")))
    if name is None:
        raise _validation(f"Could not find property with name or id: {spec.get('property')}")
    kind = schema[name]["type"]
    condition = spec.get(kind)
    if kind in ("rich_text", "title") and isinstance(condition, dict) and condition:
        [(op, value)] = list(condition.items())[:1]
        if op not in TEXT_CONDITIONS:
            raise _validation(f"body.filter.{kind}.{op} is not a supported condition.")
        return lambda page: _text_matches(_plain(page["properties"][name]), op, value)
    if kind == "checkbox" and isinstance(condition, dict) and "equals" in condition:
        return lambda page: page["properties"][name]["checkbox"] == condition["equals"]
    raise _validation(f"body.filter.{kind} should be defined for a {kind} property.")


def _text_matches(text: str, op: str, value: Any) -> bool:
    if op == "is_empty":
        return text == ""
    if op == "is_not_empty":
        return text != ""
    value = str(value)
    matches: dict[str, bool] = {
        "equals": text == value,
        "does_not_equal": text != value,
        "contains": value in text,
        "starts_with": text.startswith(value),
    }
    return matches[op]
