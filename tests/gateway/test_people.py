"""People routes: reading needs `people:read`, writing `people:write`; a key gives a
person only scopes it holds and changes only a person whose scopes it holds; one tenant
never sees or touches another's people; a disabled person's console sessions end."""

from __future__ import annotations

from typing import Any

from starter.service import console_sessions, people
from starter.service.console_sessions import Ended
from store import tenancy
from tests.gateway.test_scopes import new_key
from tests.support.stack import Stack

ISSUER = "https://id.example.test"


def bearer(key: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {key['api_key']}"}


async def test_a_key_gives_only_scopes_it_holds(stack: Stack) -> None:
    url = f"{stack.url}/v1/people"
    writer = await new_key(stack, stack.tenant_id, ["people:write", "approvals:read"])
    strong = await new_key(
        stack, stack.tenant_id, ["people:*", "approvals:read", "approvals:write"]
    )
    body = {"display_name": "Ada", "scopes": ["approvals:read", "approvals:write"]}

    refused = await stack.http.put(f"{url}/ada", json=body, headers=bearer(writer))
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert error["code"] == "scope_missing"
    assert error["details"]["missing_scopes"] == ["approvals:write"]
    assert "only scopes it holds itself" in error["message"]

    made = await stack.http.put(f"{url}/ada", json=body, headers=bearer(strong))
    assert made.status_code == 200, made.text
    assert made.json()["actor"] == "person:ada"
    # A weaker key cannot repoint a stronger person's sign-in at its holder.
    hijack = {"scopes": ["approvals:read"], "oidc_issuer": ISSUER, "oidc_subject": "me"}
    refused = await stack.http.put(f"{url}/ada", json=hijack, headers=bearer(writer))
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "scope_missing"

    no_read = await stack.http.get(url, headers=bearer(writer))
    assert no_read.status_code == 403, no_read.text
    listed = await stack.http.get(url, headers=bearer(strong))
    assert [p["handle"] for p in listed.json()["items"]] == ["ada"]
    assert listed.json()["items"][0]["scopes"] == ["approvals:read", "approvals:write"]

    both = {"scopes": [], "slack_user_id": "U0ADA"}
    assert (await stack.http.put(f"{url}/ada", json=both, headers=bearer(strong))).is_success
    taken = await stack.http.put(f"{url}/bob", json=both, headers=bearer(strong))
    assert taken.status_code == 409 and taken.json()["error"]["code"] == "conflict"
    half = {"oidc_issuer": ISSUER}
    invalid = await stack.http.put(f"{url}/bob", json=half, headers=bearer(strong))
    assert invalid.status_code == 400, invalid.text


async def test_people_stay_in_their_tenant_and_disabling_ends_sessions(stack: Stack) -> None:
    mine = await new_key(stack, stack.tenant_id, ["people:*", "approvals:read"])
    other_tenant, _ = await stack.new_tenant()
    theirs = await new_key(stack, other_tenant, ["people:*", "approvals:read"])
    person = {"scopes": ["approvals:read"], "oidc_issuer": ISSUER, "oidc_subject": "s-1"}
    person["slack_user_id"] = "U0CAROL"
    url = f"{stack.url}/v1/people"
    assert (await stack.http.put(f"{url}/carol", json=person, headers=bearer(mine))).is_success

    listed = await stack.http.get(url, headers=bearer(theirs))
    assert listed.json()["items"] == []
    gone = await stack.http.post(f"{url}/carol/disable", headers=bearer(theirs))
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "person_not_found"
    # The same identity may name a person of another tenant.
    again = await stack.http.put(f"{url}/carol", json=person, headers=bearer(theirs))
    assert again.is_success, again.text

    opened = await console_sessions.open_for_person(
        stack.sessions,
        tenant_id=stack.tenant_id,
        handle="carol",
        scopes=["approvals:read"],
        lifetime_seconds=600,
    )
    assert not isinstance(await console_sessions.resolve(stack.sessions, opened.cookie), Ended)
    async with tenancy.tenant_transaction(stack.sessions, stack.tenant_id) as session:
        assert (await people.find_by_slack_user(session, stack.tenant_id, "U0CAROL")) is not None

    disabled = await stack.http.post(f"{url}/carol/disable", headers=bearer(mine))
    assert disabled.status_code == 200 and disabled.json()["disabled_at"] is not None
    ended = await console_sessions.resolve(stack.sessions, opened.cookie)
    assert ended is Ended.PERSON_DISABLED
    async with tenancy.tenant_transaction(stack.sessions, stack.tenant_id) as session:
        assert await people.find_by_slack_user(session, stack.tenant_id, "U0CAROL") is None
        found = await people.find_by_oidc(session, stack.tenant_id, ISSUER, "s-1")
        assert found is not None and found.disabled_at is not None
    async with tenancy.tenant_transaction(stack.sessions, other_tenant) as session:
        theirs_found = await people.find_by_slack_user(session, other_tenant, "U0CAROL")
        assert theirs_found is not None and theirs_found.tenant_id == other_tenant

    # Enabled again, the person signs in afresh: the sessions of before stay ended.
    enabled = await stack.http.put(f"{url}/carol", json=person, headers=bearer(mine))
    assert enabled.is_success and enabled.json()["disabled_at"] is None
    assert await console_sessions.resolve(stack.sessions, opened.cookie) is Ended.SIGNED_OUT
