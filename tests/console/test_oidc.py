"""Console sign-in with OpenID Connect against a real OpenID provider (authlib's, on
loopback): a mapped person signs in and holds their scopes; every check of the relying
party refuses on its own (bad state, bad nonce, wrong audience, expired token, a token
signed by another key, an unknown subject, a disabled person), and a refusal opens no
session."""

from __future__ import annotations

import html
import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import OctKey, RSAKey
from pydantic import SecretStr

from schemas.settings import MoatSettings
from starter.gateway.console.auth import SESSION_COOKIE
from starter.gateway.console.pages.oidc import TRANSIENT_COOKIE
from starter.service import MoatError, console_sessions
from starter.service.console_sessions import Ended
from starter.service.oidc import RelyingParty, Transient, check_claims
from tests.gateway.test_scopes import new_key
from tests.support.console import sign_in
from tests.support.oidc import Client, OpenIDProvider
from tests.support.stack import Stack, StackFactory

LINK = re.compile(r'<a href="([^"]+)">Continue')
HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)">')


@pytest.fixture(scope="module")
def idp() -> Iterator[OpenIDProvider]:
    with OpenIDProvider() as provider:
        yield provider


@pytest.fixture(scope="module")
def rp_client(idp: OpenIDProvider) -> Client:
    return idp.add_client(auth_method="client_secret_post")


def settings_for(idp: OpenIDProvider, client: Client) -> dict[str, Any]:
    return {
        "console_oidc_issuer": idp.issuer,
        "console_oidc_client_id": client.client_id,
        "console_oidc_client_secret": SecretStr(client.client_secret),
    }


@pytest.fixture
async def oidc_stack(
    make_stack: StackFactory, idp: OpenIDProvider, rp_client: Client
) -> AsyncIterator[Stack]:
    async with make_stack(**settings_for(idp, rp_client)) as stack:
        rp_client.redirect_uris.append(f"{stack.url}/console/oidc/callback")
        yield stack


def party(idp: OpenIDProvider, client: Client) -> RelyingParty:
    found = RelyingParty.of(MoatSettings(**settings_for(idp, client)))
    assert found is not None
    return found


def continue_link(answer: httpx.Response) -> str:
    found = LINK.search(answer.text)
    assert found is not None, answer.text
    return html.unescape(found.group(1))


async def sign_in_at_provider(
    http: httpx.AsyncClient, stack: Stack, tenant: str, username: str, password: str
) -> httpx.Response:
    """The browser's round trip: the console's start, the provider's login form filled in,
    and the callback the provider sends the browser to; the callback's answer."""
    started = await http.get(f"{stack.url}/console/oidc/start", params={"tenant": tenant})
    assert started.status_code == 200, started.text
    assert "samesite=lax" in started.headers["set-cookie"].lower()
    form = await http.get(continue_link(started))
    assert form.status_code == 200, form.text
    fields = {html.unescape(k): html.unescape(v) for k, v in HIDDEN.findall(form.text)}
    assert fields["code_challenge_method"] == "S256" and fields["nonce"] and fields["state"]
    sent = await http.post(
        str(form.url.copy_with(query=None)),
        data={**fields, "username": username, "password": password},
    )
    assert sent.status_code == 302, sent.text
    return await http.get(sent.headers["location"])


async def test_a_mapped_person_signs_in_and_others_are_refused(
    oidc_stack: Stack, idp: OpenIDProvider
) -> None:
    stack = oidc_stack
    ada, bob = idp.add_user("ada", "Ada"), idp.add_user("bob")
    admin = await new_key(stack, stack.tenant_id, ["people:*", "approvals:*"])
    person = {
        "scopes": ["approvals:read", "approvals:write"],
        "oidc_issuer": idp.issuer,
        "oidc_subject": ada.subject,
    }
    put = await stack.http.put(
        f"{stack.url}/v1/people/ada",
        json=person,
        headers={"Authorization": f"Bearer {admin['api_key']}"},
    )
    assert put.status_code == 200, put.text

    async with httpx.AsyncClient(timeout=30) as http:
        await sign_in(http, stack.url, stack.api_key)
        key_session = http.cookies[SESSION_COOKIE]
        signin = await http.get(f"{stack.url}/console/sign-in")
        assert "Sign in with OpenID Connect" in signin.text and idp.issuer in signin.text
        done = await sign_in_at_provider(http, stack, stack.tenant_id, "ada", ada.password)
        assert done.status_code == 200, done.text
        assert (
            SESSION_COOKIE in done.cookies
            and "samesite=strict" in done.text + str(done.headers.get_list("set-cookie")).lower()
        )
        home = await http.get(f"{stack.url}/console")
        assert home.status_code == 200 and "person:ada" in home.text, home.text
    # Starting the sign-in ended the session the browser held with a key.
    assert isinstance(await console_sessions.resolve(stack.sessions, key_session), Ended)

    async with httpx.AsyncClient(timeout=30) as http:
        done = await sign_in_at_provider(http, stack, stack.tenant_id, "bob", bob.password)
        assert done.status_code == 401 and "No person of tenant" in done.text, done.text
        assert SESSION_COOKIE not in done.cookies
        # Ada of another tenant is nobody there (and that tenant's existence is not told).
        done = await sign_in_at_provider(http, stack, "ten_nosuch", "ada", ada.password)
        assert done.status_code == 401 and "No person of tenant" in done.text
        assert SESSION_COOKIE not in done.cookies

    disabled = await stack.http.post(
        f"{stack.url}/v1/people/ada/disable",
        headers={"Authorization": f"Bearer {admin['api_key']}"},
    )
    assert disabled.status_code == 200, disabled.text
    async with httpx.AsyncClient(timeout=30) as http:
        done = await sign_in_at_provider(http, stack, stack.tenant_id, "ada", ada.password)
        assert done.status_code == 401 and "was disabled" in done.text, done.text
        assert SESSION_COOKIE not in done.cookies


async def test_a_callback_that_is_not_this_browsers_is_refused(
    oidc_stack: Stack, idp: OpenIDProvider
) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        started = await http.get(
            f"{oidc_stack.url}/console/oidc/start", params={"tenant": oidc_stack.tenant_id}
        )
        callback = f"{oidc_stack.url}/console/oidc/callback"
        wrong = await http.get(callback, params={"state": "forged", "code": "x"})
        assert wrong.status_code == 401 and "state differs" in html.unescape(wrong.text)
        assert SESSION_COOKIE not in wrong.cookies
    async with httpx.AsyncClient(timeout=30) as other_browser:
        state = re.search(r"state=([^&]+)", continue_link(started))
        assert state is not None
        stolen = await other_browser.get(callback, params={"state": state.group(1), "code": "x"})
        assert stolen.status_code == 401 and "did not start this sign-in" in stolen.text
        assert TRANSIENT_COOKIE not in other_browser.cookies


async def test_the_id_token_checks(idp: OpenIDProvider, rp_client: Client) -> None:
    rp = party(idp, rp_client)
    now = int(time.time())
    good = {"iss": idp.issuer, "sub": "s", "aud": rp_client.client_id, "iat": now}
    good |= {"exp": now + 300, "nonce": "n-1"}
    assert check_claims(dict(good), idp.issuer, rp_client.client_id, "n-1")["sub"] == "s"

    def refused(claims: dict[str, Any], nonce: str = "n-1") -> str:
        with pytest.raises(MoatError) as caught:
            check_claims(claims, idp.issuer, rp_client.client_id, nonce)
        return str(caught.value.details["reason"]) + " " + caught.value.message

    assert "nonce" in refused(good, nonce="n-2")
    assert "aud" in refused(good | {"aud": "another-client"})
    assert "azp" in refused(good | {"aud": [rp_client.client_id, "x"], "azp": "x"})
    assert refused(good | {"exp": now - 120}).startswith("expired")
    assert "iss" in refused(good | {"iss": "https://elsewhere.example"})
    assert "iat" in refused(good | {"iat": now + 600})
    # Within the leeway, a little skew passes.
    assert check_claims(good | {"exp": now - 30}, idp.issuer, rp_client.client_id, "n-1")

    signed = jwt.encode({"alg": "RS256", "kid": idp.key.kid}, good, idp.key)
    assert (await rp.verify(signed, "n-1"))["sub"] == "s"
    impostor = RSAKey.generate_key(2048, parameters={"kid": idp.key.kid})
    forged = jwt.encode({"alg": "RS256", "kid": idp.key.kid}, good, impostor)
    with pytest.raises(MoatError, match="did not pass"):
        await rp.verify(forged, "n-1")
    unknown = RSAKey.generate_key(2048, parameters={"kid": "not-published"})
    with pytest.raises(MoatError, match="did not pass"):
        await rp.verify(jwt.encode({"alg": "RS256", "kid": "not-published"}, good, unknown), "n-1")
    with pytest.raises(MoatError, match="did not pass"):
        await rp.verify(jwt.encode({"alg": "HS256"}, good, OctKey.import_key("x" * 32)), "n-1")


async def test_the_transient_state_is_signed_and_short_lived(
    idp: OpenIDProvider, rp_client: Client
) -> None:
    rp = party(idp, rp_client)
    sealed = rp.seal(Transient("ten_a", "s", "n", "v", "/console"))
    assert rp.unseal(sealed).tenant_id == "ten_a"
    body, _, mac = sealed.partition(".")
    other = rp.seal(Transient("ten_b", "s", "n", "v", "/console"))
    for altered in (f"{other.partition('.')[0]}.{mac}", f"{body}.{mac[:-2]}AA", "", None):
        with pytest.raises(MoatError, match="did not start this sign-in"):
            rp.unseal(altered)
    with pytest.raises(MoatError, match="expired"):
        rp.unseal(sealed, now=time.time() + 3600)
    with pytest.raises(MoatError, match="state differs"):
        await rp.finish(rp.unseal(sealed), "other-state", "code", "http://127.0.0.1/cb")


async def test_discovery_is_held_to_the_issuer(idp: OpenIDProvider, rp_client: Client) -> None:
    assert (await party(idp, rp_client).discovery()).token_endpoint == f"{idp.issuer}/token"
    settings = settings_for(idp, rp_client)
    settings["console_oidc_issuer"] = idp.issuer.replace("127.0.0.1", "localhost")
    elsewhere = RelyingParty(MoatSettings(**settings))
    with pytest.raises(MoatError, match="another issuer"):
        await elsewhere.discovery()
    idp.endpoints_at = "http://127.0.0.2:9"
    try:
        with pytest.raises(MoatError, match="outside the issuer's origin"):
            await party(idp, rp_client).discovery()
    finally:
        idp.endpoints_at = None
