"""GitHub App tokens: the JWT Moat signs is what GitHub documents (RS256, ``iss`` the App's
id, ``iat`` a minute back, ``exp`` at most 10 minutes after ``iat``), the fake checks every
one of those, answers its mint as GitHub does and honours the tokens it issued until they
expire or are revoked; a refusal for good marks the connection ``needs_reauth`` in Moat's
words, and a JWT signed with another key is a clear failure."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import pytest_asyncio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from joserfc import jwt
from joserfc.jwk import RSAKey
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.exceptions import ApplicationError

from activities import HostGuard, http_client
from activities.adapters.github_app import AppCredential, GithubAppTokens, app_jwt
from schemas.connections import ConnectionCreate, ConnectionType, Credential
from schemas.settings import MoatSettings
from starter.devstack.providers import FakeGithub
from store import connections, tenancy, tenants
from store.keyrings.connections import ConnectionCipher
from tests.activities.test_provider_adapters import _input


def _keys() -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public.decode()


PRIVATE, PUBLIC = _keys()
APP = 4242


@pytest.fixture(scope="module")
def github() -> Iterator[FakeGithub]:
    with FakeGithub() as fake:
        fake.apps.register_app(APP, PUBLIC, 1, 2, 3)
        yield fake


@pytest_asyncio.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    client = http_client()
    yield client
    await client.aclose()


def _mint(github: FakeGithub, token: str, installation: int = 1) -> httpx.Response:
    return httpx.post(
        f"{github.base_url}/app/installations/{installation}/access_tokens",
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        },
    )


def _signed(claims: dict[str, object], private: str = PRIVATE) -> str:
    return jwt.encode({"alg": "RS256"}, claims, RSAKey.import_key(private))


def test_the_jwt_is_what_github_documents() -> None:
    now = time.time()
    token = app_jwt(APP, PRIVATE, now)
    decoded = jwt.decode(token, RSAKey.import_key(PUBLIC), algorithms=["RS256"])
    assert decoded.header["alg"] == "RS256"
    claims = decoded.claims
    assert claims["iss"] == str(APP)
    assert claims["iat"] == int(now) - 60
    assert claims["exp"] - claims["iat"] == 600


def test_the_fake_checks_the_jwt_and_honours_its_tokens(github: FakeGithub) -> None:
    now = int(time.time())
    refusals = {
        "too long": _signed({"iss": str(APP), "iat": now - 60, "exp": now + 600}),
        "in the future": _signed({"iss": str(APP), "iat": now + 120, "exp": now + 300}),
        "expired": _signed({"iss": str(APP), "iat": now - 700, "exp": now - 100}),
        "another app": _signed({"iss": "999999", "iat": now - 60, "exp": now + 60}),
        "another key": _signed({"iss": str(APP), "iat": now, "exp": now + 60}, _keys()[0]),
        "not a jwt": "ghp_not_a_jwt",
    }
    for why, token in refusals.items():
        answer = _mint(github, token)
        assert answer.status_code == 401, why
        assert set(answer.json()) >= {"message", "documentation_url"}, why
    assert _mint(github, app_jwt(APP, PRIVATE), installation=77).status_code == 404
    minted = _mint(github, app_jwt(APP, PRIVATE))
    assert minted.status_code == 201, minted.text
    body = minted.json()
    assert body["token"].startswith("ghs_") and body["expires_at"].endswith("Z")
    assert body["permissions"] == {"issues": "write"}
    assert body["repository_selection"] == "selected"
    issues = f"{github.base_url}/repos/o/r/issues"
    bearer = {"Authorization": f"token {body['token']}"}
    assert httpx.get(issues, headers=bearer).status_code == 200
    revoke = httpx.delete(f"{github.base_url}/installation/token", headers=bearer)
    assert revoke.status_code == 204
    assert httpx.get(issues, headers=bearer).status_code == 401
    forged = {"Authorization": "Bearer ghs_" + "x" * 36}
    assert httpx.get(issues, headers=forged).status_code == 401


def test_an_app_is_registered_over_the_control_route(github: FakeGithub) -> None:
    private, public = _keys()
    body = {"app_id": 77, "public_key": public, "installations": [770]}
    assert httpx.post(f"{github.base_url}/_fake/apps", json=body).status_code == 200
    before = httpx.get(f"{github.base_url}/_fake/state").json()["app_mints"]
    minted = _mint(github, app_jwt(77, private), installation=770)
    assert minted.status_code == 201, minted.text
    assert httpx.get(f"{github.base_url}/_fake/state").json()["app_mints"] == before + 1


async def _app_credential(
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    cipher: ConnectionCipher,
    github: FakeGithub,
    installation: int,
    private: str = PRIVATE,
) -> tuple[str, Credential]:
    config = {"base_url": github.base_url, "app_id": APP, "installation_id": installation}
    body = ConnectionCreate(type="github", name="app", secret=private, config=config)
    async with sessions.begin() as session:
        tenant = await tenants.create_tenant(session, f"app-{uuid.uuid4().hex[:8]}")
    async with tenancy.tenant_transaction(app_sessions, tenant.id) as session:
        row = await connections.create_connection(
            session,
            cipher,
            tenant_id=tenant.id,
            type=ConnectionType.GITHUB,
            name=body.name,
            secret=body.secret,
            config=body.config,
        )
    return tenant.id, Credential(row.id, row.type, private, body.config, row.fingerprint)


@pytest.mark.parametrize(
    ("installation", "suspended", "code", "words"),
    [
        (2, False, "connection_needs_reauth", "install the App again"),
        (3, True, "connection_needs_reauth", "suspended"),
        (1, False, "provider_auth_failure", "app_id and private key"),
    ],
)
async def test_refusals_say_what_to_do(
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    github: FakeGithub,
    http: httpx.AsyncClient,
    installation: int,
    suspended: bool,
    code: str,
    words: str,
    base_settings: MoatSettings,
) -> None:
    # The session's keyring: a row sealed under another breaks `moat connection reencrypt`
    # for every later test of the process.
    cipher = ConnectionCipher.from_settings(base_settings)
    if installation == 2:
        github.apps.installations.pop(2, None)  # uninstalled
    if suspended:
        github.apps.installations[3].suspended = True
    private = _keys()[0] if code == "provider_auth_failure" else PRIVATE
    tenant_id, cred = await _app_credential(
        sessions, app_sessions, cipher, github, installation, private
    )
    wrapped = GithubAppTokens(app_sessions, cipher, http, HostGuard([])).wrap(tenant_id, cred)
    assert isinstance(wrapped, AppCredential) and wrapped.bearer is not None
    inp = _input("github.create_issue", {"owner": "o", "repo": "r", "title": "t"}, "x")
    inp = inp.model_copy(update={"http_allow_hosts": [github.allow_entry]})
    for _ in range(2):
        with pytest.raises(ApplicationError) as refused:
            await wrapped.bearer(inp, None)
        assert refused.value.type == code
        assert words in refused.value.message
        assert PRIVATE not in refused.value.message
