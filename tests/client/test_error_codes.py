"""The client's copy of the gateway's error codes (it imports nothing of the server) holds
exactly the codes of ``schemas.errors``: a code added, renamed or removed on one side only
fails here, named. The client's own codes are none of the gateway's."""

from __future__ import annotations

from moat_client import ClientErrorCode
from moat_client import ErrorCode as ClientCopy

from schemas.errors import ErrorCode


def members(enum: type[ErrorCode] | type[ClientCopy]) -> dict[str, str]:
    return {member.name: member.value for member in enum}


def test_the_client_copy_equals_the_gateway_codes() -> None:
    server, client = members(ErrorCode), members(ClientCopy)
    assert {n: v for n, v in server.items() if client.get(n) != v} == {}
    assert {n: v for n, v in client.items() if server.get(n) != v} == {}


def test_the_client_own_codes_are_not_the_gateway_codes() -> None:
    assert sorted({c.value for c in ClientErrorCode} & {c.value for c in ErrorCode}) == []
