"""The Notion adapters against the fake Notion, driven as a worker drives them
(``plugins.driven``) and called attempt by attempt as Temporal would retry.

What must hold: one page per key however the attempts go (an answer lost after the page
was made, under either Notion version), no repeat at all without a mark property, the same
page after an update repeated, and Notion's refusals mapped onto the taxonomy, worded by
Moat with Notion's ``code`` and ``message`` kept."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest
from temporalio.exceptions import ApplicationError

from activities import HostGuard, http_client
from activities.adapters.base import Adapter
from activities.adapters.notion import NotionCreatePage, NotionUpdatePage, refusal
from activities.adapters.plugins import driven
from activities.adapters.responses import Body, ProviderResponse
from schemas.capabilities import CapabilityCatalog, RetrySettings
from schemas.connections import Credential
from schemas.ids import uuid7
from schemas.notion import check_config
from schemas.records import OUTCOME_UNKNOWN
from schemas.run import AdapterInput
from starter.devstack.providers import FakeNotion, Misbehaviour
from tests.support.notion import NotionConformanceFake

TOKEN = "ntn_adapter_test_token"
OLD, NEW = "2022-06-28", "2025-09-03"
MARK = "Moat key"


@pytest.fixture(autouse=True)
def _fresh(notion: FakeNotion) -> None:
    notion.reset()


@pytest.fixture
async def http() -> Any:
    client = http_client()
    yield client
    await client.aclose()


def _db(notion: FakeNotion, **kw: Any) -> str:
    return notion.add_database({"Name": "title", MARK: "rich_text", "Done": "checkbox"}, **kw)


def _input(capability_id: str, data: dict[str, Any], allow: str, **extra: Any) -> AdapterInput:
    spec = CapabilityCatalog().get(capability_id)
    assert spec is not None
    retry = RetrySettings(max_retries=1, base_delay_seconds=0.01)
    return AdapterInput(
        tenant_id="t1",
        receipt_id=str(uuid7()),
        capability=spec.model_copy(update={"timeout_seconds": 1.0, "retry": retry}),
        input=data,
        idempotency_key=f"moat-{uuid.uuid4().hex}",
        trace_id="0" * 32,
        http_allow_hosts=[allow],
        **extra,
    )


def _again(inp: AdapterInput, attempt: int = 2) -> AdapterInput:
    return inp.model_copy(update={"attempt": attempt})


def _cred(notion: FakeNotion, version: str = NEW, mark: str | None = MARK) -> Credential:
    config: dict[str, Any] = {"base_url": f"{notion.base_url}/v1", "notion_version": version}
    if mark is not None:
        config["mark_property"] = mark
    return Credential("con_test", "notion", TOKEN, config)


def _create(http: httpx.AsyncClient) -> Adapter:
    catalog = CapabilityCatalog()
    return driven(NotionCreatePage(http, HostGuard([])), catalog.declaration("notion_create_page"))


def _update(http: httpx.AsyncClient) -> Adapter:
    catalog = CapabilityCatalog()
    return driven(NotionUpdatePage(http, HostGuard([])), catalog.declaration("notion_update_page"))


def _details(err: ApplicationError) -> dict[str, Any]:
    assert err.details and isinstance(err.details[0], dict)
    return err.details[0]


def _posts(notion: FakeNotion, suffix: str) -> int:
    return len([r for r in notion.calls(suffix) if r.method == "POST"])


@pytest.mark.parametrize("version", [OLD, NEW])
async def test_a_page_is_created_once_with_its_mark(
    notion: FakeNotion, http: httpx.AsyncClient, version: str
) -> None:
    db = _db(notion)
    data = {"database_id": db.replace("-", ""), "title": "Ship it", "content": ["First line"]}
    inp = _input("notion.create_page", data, notion.allow_entry)
    out = await _create(http)(inp, _cred(notion, version))
    [page] = notion.pages_in(db)
    assert out.output == {"page_id": page["id"], "url": page["url"], "reconciled": False}
    assert out.reconciled is None  # a first attempt looks for nothing
    assert page["properties"][MARK]["rich_text"][0]["plain_text"] == inp.idempotency_key
    assert page["properties"]["Name"]["title"][0]["plain_text"] == "Ship it"
    assert page["_children"][0]["paragraph"]["rich_text"][0]["text"]["content"] == "First line"
    parent = page["parent"]["type"]
    assert parent == ("data_source_id" if version == NEW else "database_id")
    assert notion.calls("/query") == []
    [sent] = [r for r in notion.requests if r.path == "/v1/pages"]
    assert sent.headers["notion-version"] == version
    assert sent.headers["authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize("version", [OLD, NEW])
@pytest.mark.parametrize("mode", [Misbehaviour.DROP, Misbehaviour.LATE])
async def test_a_lost_answer_is_found_on_the_retry(
    notion: FakeNotion, http: httpx.AsyncClient, version: str, mode: Misbehaviour
) -> None:
    db = _db(notion)
    adapter, cred = _create(http), _cred(notion, version)
    inp = _input("notion.create_page", {"database_id": db, "title": "once"}, notion.allow_entry)
    notion.fail_next(1, mode, late_seconds=3)
    with pytest.raises(ApplicationError) as lost:
        await adapter(inp, cred)
    assert lost.value.type in ("network_error", "timeout") and not lost.value.non_retryable
    notion.fail_next(0)
    out = await adapter(_again(inp), cred)
    [page] = notion.pages_in(db)
    assert out.output == {"page_id": page["id"], "url": page["url"], "reconciled": True}
    assert out.reconciled is True
    query = "/data_sources/" if version == NEW else f"/databases/{db}/"
    assert len([r for r in notion.calls("/query") if query in r.path]) == 1


async def test_not_found_on_the_retry_creates_it(
    notion: FakeNotion, http: httpx.AsyncClient
) -> None:
    db = _db(notion)
    adapter, cred = _create(http), _cred(notion)
    inp = _input("notion.create_page", {"database_id": db, "title": "t"}, notion.allow_entry)
    notion.error_next.append(503)
    with pytest.raises(ApplicationError) as failed:
        await adapter(inp, cred)
    assert failed.value.type == "provider_server_error" and not failed.value.non_retryable
    out = await adapter(_again(inp), cred)
    assert out.reconciled is False and out.output["reconciled"] is False
    assert len(notion.pages_in(db)) == 1


async def test_the_last_attempt_without_an_answer_is_outcome_unknown(
    notion: FakeNotion, http: httpx.AsyncClient
) -> None:
    db = _db(notion)
    adapter, cred = _create(http), _cred(notion)
    inp = _input("notion.create_page", {"database_id": db, "title": "t"}, notion.allow_entry)
    notion.fail_next(2)
    with pytest.raises(ApplicationError):
        await adapter(inp, cred)
    # The look-up finds nothing (the first page is there, but a trashed one is not seen).
    notion.pages_in(db)[0]["in_trash"] = True
    with pytest.raises(ApplicationError) as unknown:
        await adapter(_again(inp), cred)
    assert unknown.value.type == OUTCOME_UNKNOWN and unknown.value.non_retryable


async def test_without_a_mark_a_lost_answer_is_outcome_unknown_at_once(
    notion: FakeNotion, http: httpx.AsyncClient
) -> None:
    db = _db(notion)
    adapter, cred = _create(http), _cred(notion, mark=None)
    inp = _input("notion.create_page", {"database_id": db, "title": "t"}, notion.allow_entry)
    notion.fail_next(1)
    with pytest.raises(ApplicationError) as unknown:
        await adapter(inp, cred)
    assert unknown.value.type == OUTCOME_UNKNOWN and unknown.value.non_retryable
    assert "mark_property" in unknown.value.message
    # A repeat (a lost worker's attempt, a reset run) calls Notion not at all.
    before = len(notion.requests)
    with pytest.raises(ApplicationError) as repeat:
        await adapter(_again(inp), cred)
    assert repeat.value.type == OUTCOME_UNKNOWN and repeat.value.non_retryable
    assert len(notion.requests) == before
    assert len(notion.pages_in(db)) == 1
    page = notion.pages_in(db)[0]
    assert page["properties"][MARK]["rich_text"] == []  # no mark written


async def test_without_a_mark_a_refusal_is_final_and_says_nothing_was_made(
    notion: FakeNotion, http: httpx.AsyncClient
) -> None:
    db = _db(notion)
    adapter, cred = _create(http), _cred(notion, mark=None)
    inp = _input("notion.create_page", {"database_id": db, "title": "t"}, notion.allow_entry)
    notion.rate_limit(1, 9)
    with pytest.raises(ApplicationError) as limited:
        await adapter(inp, cred)
    err = limited.value
    assert err.type == "provider_rate_limited" and err.non_retryable
    assert "nothing was created" in err.message and "after 9 s" in err.message
    said = _details(err)["provider_response"]
    assert said["code"] == "rate_limited" and said["retry_after_seconds"] == 9
    assert notion.pages_in(db) == []


async def test_a_rate_limit_is_retried_after_retry_after(
    notion: FakeNotion, http: httpx.AsyncClient
) -> None:
    db = _db(notion)
    adapter, cred = _create(http), _cred(notion)
    inp = _input("notion.create_page", {"database_id": db, "title": "t"}, notion.allow_entry)
    notion.rate_limit(1, 4)
    with pytest.raises(ApplicationError) as limited:
        await adapter(inp, cred)
    assert limited.value.type == "provider_rate_limited" and not limited.value.non_retryable
    assert limited.value.next_retry_delay == timedelta(seconds=4)
    assert (await adapter(_again(inp), cred)).reconciled is False
    assert len(notion.pages_in(db)) == 1


# Notion's refusals: what the fake is made to answer, and what Moat makes of it.
ERRORS = [
    ("validation_error", 400, "provider_invalid_input", False),
    ("unauthorized", 401, "provider_auth_failure", False),
    ("restricted_resource", 403, "provider_auth_failure", False),
    ("object_not_found", 404, "provider_not_found", False),
    ("conflict_error", 409, "provider_invalid_input", True),
    ("rate_limited", 429, "provider_rate_limited", True),
    ("internal_server_error", 500, "provider_server_error", True),
    ("bad_gateway", 502, "provider_server_error", True),
    ("service_unavailable", 503, "provider_server_error", True),
    ("gateway_timeout", 504, "provider_server_error", True),
]


def _provoke(notion: FakeNotion, code: str, status: int, db: str) -> dict[str, Any]:
    """Make the fake answer ``code``; the input that meets it."""
    data: dict[str, Any] = {"database_id": db, "title": "t"}
    if code == "validation_error":
        data["properties"] = {"Nope": {"rich_text": []}}
    elif code == "unauthorized":
        notion.bad_tokens.add(TOKEN)
    elif code == "restricted_resource":
        notion.read_only_tokens.add(TOKEN)
    elif code == "object_not_found":
        notion.unshared.add(db)
    elif code == "rate_limited":
        notion.rate_limit(1, 3)
    else:
        notion.error_next.append(status)
    return data


@pytest.mark.parametrize(("code", "status", "taxonomy", "retryable"), ERRORS)
async def test_notion_errors_map_onto_the_taxonomy(
    notion: FakeNotion,
    http: httpx.AsyncClient,
    code: str,
    status: int,
    taxonomy: str,
    retryable: bool,
) -> None:
    db = _db(notion)
    data = _provoke(notion, code, status, db)
    try:
        inp = _input("notion.create_page", data, notion.allow_entry)
        with pytest.raises(ApplicationError) as refused:
            await _create(http)(inp, _cred(notion, OLD))
    finally:
        notion.bad_tokens.discard(TOKEN)
        notion.read_only_tokens.discard(TOKEN)
        notion.unshared.discard(db)
    err = refused.value
    details = _details(err)
    assert (err.type, err.non_retryable) == (taxonomy, not retryable)
    assert details["taxonomy"] == taxonomy and details["http_status"] == status
    said = details["provider_response"]
    assert said["code"] == code and said["status"] == status and said["message"]
    assert f"Notion answered HTTP {status}, {code}" in err.message
    assert said["message"] not in err.message  # Moat's words; Notion's kept beside them
    if code == "rate_limited":
        assert err.next_retry_delay == timedelta(seconds=3)
    assert notion.pages_in(db) == []


async def test_title_and_mark_belong_to_the_connection(
    notion: FakeNotion, http: httpx.AsyncClient
) -> None:
    db = _db(notion)
    for name in (MARK, "title"):
        data = {"database_id": db, "title": "t", "properties": {name: {"rich_text": []}}}
        inp = _input("notion.create_page", data, notion.allow_entry)
        with pytest.raises(ApplicationError) as refused:
            await _create(http)(inp, _cred(notion))
        assert refused.value.type == "schema_validation_failed" and refused.value.non_retryable
    bad = Credential("con_test", "notion", TOKEN, {"notion_version": "2021-08-16"})
    inp = _input("notion.create_page", {"database_id": db, "title": "t"}, notion.allow_entry)
    with pytest.raises(ApplicationError) as invalid:
        await _create(http)(inp, bad)
    assert invalid.value.type == "connection_invalid"
    assert notion.pages_in(db) == []


async def test_a_database_of_several_data_sources_needs_one_named(
    notion: FakeNotion, http: httpx.AsyncClient
) -> None:
    db = _db(notion, data_sources=2)
    inp = _input("notion.create_page", {"database_id": db, "title": "t"}, notion.allow_entry)
    with pytest.raises(ApplicationError) as refused:
        await _create(http)(inp, _cred(notion))
    assert refused.value.non_retryable and "data_source_id" in refused.value.message
    second = notion.data_sources_of(db)[1]
    data = {"database_id": db, "title": "t", "data_source_id": second}
    inp = _input("notion.create_page", data, notion.allow_entry)
    notion.fail_next(1)
    with pytest.raises(ApplicationError):
        await _create(http)(inp, _cred(notion))
    out = await _create(http)(_again(inp), _cred(notion))
    [page] = notion.pages_in(db)
    assert out.reconciled is True and page["parent"]["data_source_id"] == second


@pytest.mark.parametrize("version", [OLD, NEW])
async def test_an_update_repeated_leaves_the_same_page(
    notion: FakeNotion, http: httpx.AsyncClient, version: str
) -> None:
    db = _db(notion)
    made = await _create(http)(
        _input("notion.create_page", {"database_id": db, "title": "t"}, notion.allow_entry),
        _cred(notion, version),
    )
    page_id = made.output["page_id"]
    change = {"page_id": page_id, "properties": {"Done": {"checkbox": True}}}
    inp = _input("notion.update_page", change, notion.allow_entry)
    adapter, cred = _update(http), _cred(notion, version)
    notion.fail_next(1)
    with pytest.raises(ApplicationError) as lost:
        await adapter(inp, cred)
    assert not lost.value.non_retryable
    first = await adapter(_again(inp), cred)
    second = await adapter(_input("notion.update_page", change, notion.allow_entry), cred)
    same = {"page_id": page_id, "url": made.output["url"], "archived": False}
    assert first.output == second.output == same
    [page] = notion.pages_in(db)
    assert page["properties"]["Done"]["checkbox"] is True
    assert len([r for r in notion.calls(page_id) if r.method == "PATCH"]) == 3


async def test_a_repeated_move_to_the_trash_finds_the_page_there(
    notion: FakeNotion, http: httpx.AsyncClient
) -> None:
    db = _db(notion)
    made = await _create(http)(
        _input("notion.create_page", {"database_id": db, "title": "t"}, notion.allow_entry),
        _cred(notion),
    )
    page_id = made.output["page_id"]
    change = {"page_id": page_id, "properties": {"Done": {"checkbox": True}}, "archived": True}
    inp = _input("notion.update_page", change, notion.allow_entry)
    adapter, cred = _update(http), _cred(notion)
    notion.fail_next(1)
    with pytest.raises(ApplicationError):
        await adapter(inp, cred)
    out = await adapter(_again(inp), cred)  # refused (a page in the trash), found there
    assert out.output == {"page_id": page_id, "url": made.output["url"], "archived": True}
    [page] = notion.pages_in(db)
    assert page["in_trash"] and page["properties"]["Done"]["checkbox"] is True
    sent = [r.json() for r in notion.calls(page_id) if r.method == "PATCH"]
    assert all("in_trash" in body and "archived" not in body for body in sent)
    # A first attempt refused so is a failure: it cannot have been ours.
    with pytest.raises(ApplicationError) as refused:
        await adapter(_input("notion.update_page", change, notion.allow_entry), cred)
    assert refused.value.type == "provider_invalid_input"


async def test_the_conformance_fake_counts_what_the_kit_checks(
    notion_conformance: NotionConformanceFake, http: httpx.AsyncClient
) -> None:
    """``NotionConformanceFake`` as the kit drives it: a lost answer leaves one effect, a
    rate limit refuses the effect's call, and each call to the effect endpoint is timed."""
    fake = notion_conformance
    adapter = _create(http)
    cred = Credential("con_kit", "notion", TOKEN, fake.connection_config())
    inp = _input("notion.create_page", fake.input(), fake.allow_entry)
    assert fake.effects() == 0 and fake.call_times() == []
    fake.lose_answers(1)
    with pytest.raises(ApplicationError):
        await adapter(inp, cred)
    assert (await adapter(_again(inp), cred)).reconciled is True
    assert fake.effects() == 1 and len(fake.call_times()) == 1
    assert fake.rate_limit(1, 2) is True
    other = _input("notion.create_page", fake.input("two"), fake.allow_entry)
    with pytest.raises(ApplicationError) as limited:
        await adapter(other, cred)
    assert limited.value.next_retry_delay == timedelta(seconds=2)
    assert fake.effects() == 1 and len(fake.call_times()) == 2
    assert (await adapter(_again(other), cred)).reconciled is False
    assert fake.effects() == 2 and len(fake.call_times()) == 3


@pytest.mark.parametrize(
    ("status", "body", "taxonomy", "retryable"),
    [
        (400, {"object": "error", "status": 400, "code": "invalid_grant", "message": "m"},
         "provider_invalid_input", False),
        (403, {"object": "error", "status": 403, "code": "new_code", "message": "m"},
         "provider_auth_failure", False),
        (502, None, "provider_server_error", True),
        (599, {"code": "odd"}, "provider_server_error", True),
    ],
)  # fmt: skip
def test_an_unknown_code_maps_by_its_status(
    status: int, body: dict[str, Any] | None, taxonomy: str, retryable: bool
) -> None:
    content = b"<html>bad gateway</html>" if body is None else json.dumps(body).encode()
    answer = ProviderResponse(
        httpx.Response(status, content=content),
        Body(content, len(content), "sha256:" + "0" * 64, 4096),
    )
    err = refusal(answer)
    assert (err.type, err.non_retryable) == (taxonomy, not retryable)
    if body is not None:
        assert f"HTTP {status}, {body['code']})" in err.message
    else:
        assert _details(err)["provider_response"] == "<html>bad gateway</html>"


@pytest.mark.parametrize(
    ("config", "refused"),
    [
        ({}, None),
        ({"notion_version": OLD, "mark_property": MARK, "title_property": "Task"}, None),
        ({"notion_version": "2021-08-16-secretish"}, "notion_version"),
        ({"mark_property": 7}, "mark_property"),
        ({"title_property": ""}, "title_property"),
        ({"mark_property": "x" * 201}, "mark_property"),
    ],
)
def test_a_connections_config_is_checked_without_repeating_it(
    config: dict[str, Any], refused: str | None
) -> None:
    """The check a ``notion`` connection's config passes (``schemas.notion.check_config``):
    the adapter's, and the one a connection's creation can run."""
    if refused is None:
        assert check_config(config) == config
        return
    with pytest.raises(ValueError) as err:
        check_config(config)
    assert str(err.value).startswith(refused)
    assert "secretish" not in str(err.value)
