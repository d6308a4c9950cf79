"""The fake Notion answers as Notion's reference says: pages created in a database or its
data source, the query with a rich-text filter and its cursor, page updates and the trash,
the version header and the token required, Notion's error bodies, a rate limit with
``Retry-After``, and the lost answer (the page made, the connection dropped)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from starter.devstack.providers import FakeNotion, Misbehaviour

OLD, NEW = "2022-06-28", "2025-09-03"
TOKEN = "ntn_fake_contract"


@pytest.fixture
def api(notion: FakeNotion) -> Iterator[httpx.Client]:
    notion.reset()
    headers = {"Authorization": f"Bearer {TOKEN}", "Notion-Version": OLD}
    with httpx.Client(base_url=f"{notion.base_url}/v1", headers=headers) as client:
        yield client


def _db(notion: FakeNotion, **kw: Any) -> str:
    return notion.add_database({"Name": "title", "Key": "rich_text", "Done": "checkbox"}, **kw)


def _page(db: str, title: str, key: str, parent: str = "database_id") -> dict[str, Any]:
    return {
        "parent": {parent: db},
        "properties": {
            "title": {"title": [{"text": {"content": title}}]},
            "Key": {"rich_text": [{"type": "text", "text": {"content": key}}]},
        },
    }


def _query(key: str, **more: Any) -> dict[str, Any]:
    return {"filter": {"property": "Key", "rich_text": {"equals": key}}, **more}


def test_a_page_is_created_and_found_by_its_rich_text(
    notion: FakeNotion, api: httpx.Client
) -> None:
    db = _db(notion)
    made = api.post("/pages", json=_page(db.replace("-", ""), "Hello", "k-1"))
    assert made.status_code == 200, made.text
    page = made.json()
    assert page["object"] == "page" and page["parent"] == {"type": "database_id", "database_id": db}
    assert page["properties"]["Name"]["id"] == "title"
    assert page["properties"]["Name"]["title"][0]["plain_text"] == "Hello"
    assert page["properties"]["Key"]["rich_text"][0]["plain_text"] == "k-1"
    assert page["url"].startswith("https://www.notion.so/")
    api.post("/pages", json=_page(db, "Other", "k-2"))
    found = api.post(f"/databases/{db}/query", json=_query("k-1")).json()
    assert found["object"] == "list" and found["type"] == "page_or_database"
    assert [r["id"] for r in found["results"]] == [page["id"]]
    assert found["has_more"] is False and found["next_cursor"] is None
    assert api.post(f"/databases/{db}/query", json=_query("k-3")).json()["results"] == []


def test_the_query_pages_with_a_cursor(notion: FakeNotion, api: httpx.Client) -> None:
    db = _db(notion)
    for n in range(5):
        api.post("/pages", json=_page(db, f"p{n}", "same"))
    seen: list[str] = []
    body = _query("same", page_size=2)
    while True:
        answer = api.post(f"/databases/{db}/query", json=body).json()
        seen += [r["properties"]["Name"]["title"][0]["plain_text"] for r in answer["results"]]
        if not answer["has_more"]:
            break
        body = {**body, "start_cursor": answer["next_cursor"]}
    assert seen == ["p4", "p3", "p2", "p1", "p0"]  # newest first, each once
    too_many = api.post(f"/databases/{db}/query", json=_query("same", page_size=101))
    assert too_many.status_code == 400 and too_many.json()["code"] == "validation_error"
    bad = api.post(f"/databases/{db}/query", json=_query("same", start_cursor="nope"))
    assert bad.status_code == 400


def test_data_sources_from_2025_09_03(notion: FakeNotion, api: httpx.Client) -> None:
    db = _db(notion)
    new = {"Notion-Version": NEW}
    database = api.get(f"/databases/{db}", headers=new).json()
    [source] = database["data_sources"]
    assert source["id"] == notion.data_sources_of(db)[0] and "properties" not in database
    assert "properties" in api.get(f"/databases/{db}").json()  # the older shape
    made = api.post("/pages", json=_page(source["id"], "T", "k", "data_source_id"), headers=new)
    assert made.json()["parent"]["data_source_id"] == source["id"]
    found = api.post(f"/data_sources/{source['id']}/query", json=_query("k"), headers=new).json()
    assert found["type"] == "page_or_data_source" and len(found["results"]) == 1
    # The database's query is the older versions'; the data source's the newer's.
    moved = api.post(f"/databases/{db}/query", json=_query("k"), headers=new)
    assert moved.status_code == 400 and moved.json()["code"] == "invalid_request_url"
    assert api.post(f"/data_sources/{source['id']}/query", json={}).status_code == 400
    # A database of two data sources takes no database parent.
    two = _db(notion, data_sources=2)
    refused = api.post("/pages", json=_page(two, "T", "k"), headers=new)
    assert refused.status_code == 400 and refused.json()["code"] == "validation_error"


def test_update_sets_properties_and_the_trash(notion: FakeNotion, api: httpx.Client) -> None:
    db = _db(notion)
    page_id = api.post("/pages", json=_page(db, "T", "k")).json()["id"]
    done = {"properties": {"Done": {"checkbox": True}}, "archived": True}
    first = api.patch(f"/pages/{page_id}", json=done)
    assert first.status_code == 200, first.text
    assert first.json()["properties"]["Done"]["checkbox"] is True
    assert first.json()["in_trash"] is True and first.json()["archived"] is True
    again = api.patch(f"/pages/{page_id}", json=done)  # a page in the trash is not edited
    assert again.status_code == 400 and "archived" in again.json()["message"]
    assert api.patch(f"/pages/{page_id}", json={"in_trash": True}).status_code == 200
    assert api.post(f"/databases/{db}/query", json=_query("k")).json()["results"] == []
    restored = api.patch(
        f"/pages/{page_id}", json={"in_trash": False, "properties": done["properties"]}
    )
    assert restored.status_code == 200 and restored.json()["in_trash"] is False
    assert api.get(f"/pages/{page_id}").json()["in_trash"] is False


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ({"Notion-Version": ""}, 400, "missing_version"),
        ({"Notion-Version": "2021-05-13"}, 400, "validation_error"),
        ({"Authorization": ""}, 401, "unauthorized"),
        ({"Authorization": "Bearer bad"}, 401, "unauthorized"),
        ({"Authorization": "Bearer read-only"}, 403, "restricted_resource"),
    ],
)
def test_version_and_token_are_required(
    notion: FakeNotion, api: httpx.Client, change: dict[str, str], status: int, code: str
) -> None:
    notion.bad_tokens.add("bad")
    notion.read_only_tokens.add("read-only")
    db = _db(notion)
    headers = {k: v for k, v in {**api.headers, **change}.items() if v}
    if not change.get("Notion-Version", OLD):
        headers.pop("notion-version", None)
    if not change.get("Authorization", "x"):
        headers.pop("authorization", None)
    answer = httpx.post(f"{api.base_url}pages", json=_page(db, "T", "k"), headers=headers)
    assert answer.status_code == status
    body = answer.json()
    assert body["object"] == "error" and body["status"] == status and body["code"] == code
    assert isinstance(body["message"], str) and body["message"]
    assert notion.pages_in(db) == []


def test_not_shared_and_unknown_are_not_found(notion: FakeNotion, api: httpx.Client) -> None:
    db = _db(notion)
    notion.unshared.add(db)
    for answer in (
        api.post("/pages", json=_page(db, "T", "k")),
        api.post(f"/databases/{db}/query", json={}),
        api.patch("/pages/00000000000000000000000000000000", json={"archived": True}),
    ):
        assert answer.status_code == 404 and answer.json()["code"] == "object_not_found"
    wrong = api.post("/pages", json={**_page(_db(notion), "T", "k"), "properties": {"X": {}}})
    assert (
        wrong.status_code == 400 and wrong.json()["message"] == "X is not a property that exists."
    )


def test_rate_limit_and_errors_have_no_effect(notion: FakeNotion, api: httpx.Client) -> None:
    db = _db(notion)
    notion.rate_limit(1, 7)
    limited = api.post("/pages", json=_page(db, "T", "k"))
    assert limited.status_code == 429 and limited.headers["retry-after"] == "7"
    assert limited.json()["code"] == "rate_limited"
    notion.error_next.extend([409, 500, 502, 503, 504])
    codes = [api.post("/pages", json=_page(db, "T", "k")).json()["code"] for _ in range(5)]
    assert codes == [
        "conflict_error",
        "internal_server_error",
        "bad_gateway",
        "service_unavailable",
        "gateway_timeout",
    ]
    assert notion.pages_in(db) == [] and len(notion.create_times) == 6
    assert api.post("/pages", json=_page(db, "T", "k")).status_code == 200


def test_a_lost_answer_still_makes_the_page(notion: FakeNotion, api: httpx.Client) -> None:
    db = _db(notion)
    notion.fail_next(1, Misbehaviour.DROP)
    with pytest.raises(httpx.HTTPError):
        api.post("/pages", json=_page(db, "T", "lost"))
    [page] = notion.pages_in(db)
    found = api.post(f"/databases/{db}/query", json=_query("lost")).json()["results"]
    assert [r["id"] for r in found] == [page["id"]]
    state = httpx.get(f"{notion.base_url}/_fake/state").json()
    assert len(state["databases"][db]["pages"]) == 1
