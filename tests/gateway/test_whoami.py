"""Who a key is, and refusals that say what was meant: ``GET /v1/whoami`` names the key's
tenant (id and name), the key and its scopes; a refused key is named by its public prefix
(never its secret); a mistyped capability id is answered with the nearest one."""

from __future__ import annotations

from typing import Any

from store.api_keys import key_prefix
from tests.support.stack import Stack


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_whoami_names_the_tenant_the_key_and_its_scopes(stack: Stack) -> None:
    answer = await stack.http.get(f"{stack.url}/v1/whoami", headers=bearer(stack.api_key))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    key_id = stack.api_key.split("_")[1]
    assert body["tenant_id"] == stack.tenant_id
    assert body["tenant_name"] and body["key_id"] == key_id
    assert body["key_prefix"] == key_prefix(key_id)
    assert "execute:*" in body["scopes"]
    assert stack.api_key.split("_", 2)[2] not in answer.text


async def test_whoami_is_in_the_contract(stack: Stack) -> None:
    contract: dict[str, Any] = (await stack.http.get(f"{stack.url}/openapi.json")).json()
    route = contract["paths"]["/v1/whoami"]["get"]
    schema = route["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/WhoAmI"}
    assert set(contract["components"]["schemas"]["WhoAmI"]["required"]) >= {
        "tenant_id",
        "tenant_name",
        "key_id",
        "scopes",
    }
    assert "401" in route["responses"]


async def test_a_refused_key_is_named_by_its_prefix_never_its_secret(stack: Stack) -> None:
    wrong = "moat_nosuchkey_" + "s" * 32
    for answer in (
        await stack.http.get(f"{stack.url}/v1/whoami", headers=bearer(wrong)),
        await stack.http.get(f"{stack.url}/v1/receipts", headers=bearer(wrong)),
        await stack.execute("demo.echo", {}, api_key=wrong),
    ):
        assert answer.status_code == 401, answer.text
        error = answer.json()["error"]
        assert error["code"] == "unauthenticated"
        assert "moat_nosuchkey_" in error["message"], error
        assert error["details"]["key_prefix"] == "moat_nosuchkey_"
        assert "s" * 32 not in answer.text
    malformed = await stack.http.get(f"{stack.url}/v1/whoami", headers=bearer("not-a-key"))
    assert malformed.status_code == 401
    assert "moat_<id>_<secret>" in malformed.json()["error"]["message"]


async def test_a_mistyped_capability_gets_did_you_mean(stack: Stack) -> None:
    answer = await stack.execute("slack.post_mesage", {"channel": "C1", "text": "hi"})
    assert answer.status_code == 404, answer.text
    error = answer.json()["error"]
    assert error["code"] == "capability_not_found"
    assert "did you mean 'slack.post_message'?" in error["message"]
    assert error["details"] == {
        "capability_id": "slack.post_mesage",
        "did_you_mean": "slack.post_message",
    }
    far = (await stack.execute("nothing.like.it", {})).json()["error"]
    assert "did_you_mean" not in far["details"] and "did you mean" not in far["message"]
