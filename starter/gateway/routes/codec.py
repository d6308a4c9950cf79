"""The remote codec endpoint: ops read Moat's encrypted Temporal payloads in the Web UI and CLI.

Temporal stores every payload encrypted (``starter.runtime.codec``), so its UI shows ciphertext
until it is given a codec endpoint. This is Temporal's remote codec protocol:
``POST …/decode`` and ``POST …/encode`` with ``{"payloads": [...]}`` (``Payload`` messages in
proto3 JSON, bytes base64) answered in the same shape.

Two doors, both behind a secret, because decoded payloads hold callers' raw input:
- ``/codec/decode`` and ``/codec/encode`` take the admin key as a bearer (the ``temporal``
  CLI: ``--codec-endpoint <gateway>/codec --codec-auth 'Bearer <admin key>'``);
- ``/codec/ui/<token>/decode`` is the address given to the Web UI, which cannot add an
  ``Authorization`` header: the token is the codec door's own rotated secret
  (``starter.runtime.codec_door``; ``moat up`` configures its UI with it). It only decodes: a token
  in a URL ends up in browser history and proxy logs, so it must not also let its holder
  encrypt payloads that a worker would accept as Moat's own. Browsers reach it only from
  ``MOAT_CODEC_CORS_ORIGINS``.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, Path, Request
from google.protobuf import json_format
from pydantic import BaseModel, Field
from temporalio.api.common.v1 import Payload, Payloads

from schemas.errors import ErrorCode
from starter.gateway.access import public
from starter.gateway.deps import deps_of, require_admin, unauthenticated
from starter.gateway.errors import documented_errors
from starter.runtime.codec import EncryptionCodec
from starter.runtime.codec_door import DoorFile, door_path
from starter.service import MoatError

log = logging.getLogger("moat.codec")

PREFIX = "/codec"


# Base64 as proto3 JSON reads it: standard or URL-safe alphabet, padding optional.
_B64 = "[A-Za-z0-9+/_-]"
Base64 = Annotated[str, Field(pattern=rf"^(?:{_B64}{{4}})*(?:{_B64}{{2}}(?:==)?|{_B64}{{3}}=?)?$")]


class CodecPayload(BaseModel):
    """A Temporal ``Payload`` in proto3 JSON."""

    metadata: dict[str, Base64] = Field(
        default_factory=dict, description="Metadata values, base64 (e.g. `encoding`)."
    )
    data: Base64 = Field(default="", description="The payload's bytes, base64.")


class CodecPayloads(BaseModel):
    """The body of both directions; its size is bounded by the gateway's body limit."""

    payloads: list[CodecPayload]


def _door_file(request: Request) -> DoorFile:
    state = request.app.state
    door: DoorFile | None = getattr(state, "codec_door", None)
    if door is None:
        door = state.codec_door = DoorFile(door_path(deps_of(request).settings))
    return door


async def require_ui_token(request: Request, token: Annotated[str, Path(max_length=128)]) -> None:
    """The UI door: the path token must be the door's current token, or a retired one still
    within its grace period."""
    door = _door_file(request).load()
    if door is None:
        raise MoatError(
            ErrorCode.FORBIDDEN,
            "The Web UI's codec door is not set up on this gateway: create its token file "
            "with `moat codec rotate` (MOAT_CODEC_DOOR), or use the admin key at /codec.",
        )
    if not door.admits(token, datetime.now(UTC)):
        raise unauthenticated(
            "This codec address is not (or no longer) valid; `moat codec url` prints the "
            "current one."
        )


router = APIRouter(prefix=PREFIX, tags=["codec"], responses=documented_errors(400, 401, 403, 500))


async def _transcode(
    request: Request, body: CodecPayloads, direction: Literal["decode", "encode"], door: str
) -> CodecPayloads:
    codec = deps_of(request).client.data_converter.payload_codec
    if codec is None:
        raise MoatError(ErrorCode.FORBIDDEN, "This gateway's Temporal client has no payload codec.")
    if direction == "decode" and isinstance(codec, EncryptionCodec):
        # History also holds payloads no Moat codec wrote (a run started by someone else):
        # shown as they are; only the worker and the gateway's own client refuse them.
        codec = codec.accepting_plaintext()
    try:
        parsed = json_format.ParseDict(body.model_dump(), Payloads())
    except json_format.ParseError as err:
        raise MoatError(
            ErrorCode.SCHEMA_VALIDATION_FAILED, f"The payloads are not valid: {err}"
        ) from err
    source: list[Payload] = list(parsed.payloads)
    try:
        done = await (codec.decode(source) if direction == "decode" else codec.encode(source))
    except Exception as err:  # unknown key id, tampered ciphertext, unparseable plaintext
        raise MoatError(
            ErrorCode.PAYLOAD_NOT_DECODABLE,
            "A payload could not be decoded with this gateway's codec keyring.",
            {"reason": type(err).__name__},
        ) from err
    log.info(
        "codec %s: %d payload(s), namespace %s, via %s",
        direction,
        len(source),
        request.headers.get("x-namespace", "-"),
        door,
    )
    answer = json_format.MessageToDict(Payloads(payloads=done))
    return CodecPayloads.model_validate({"payloads": answer.get("payloads", [])})


Namespace = Annotated[
    str | None,
    Header(alias="X-Namespace", max_length=256, description="Sent by the Temporal UI."),
]

DECODE = "Decode Temporal payloads (remote codec protocol)"
ENCODE = "Encode Temporal payloads (remote codec protocol)"
UNDECODABLE = documented_errors(422)
ADMIN_DOOR = [Depends(require_admin)]
UI_DOOR = [Depends(require_ui_token)]


@router.post("/decode", summary=DECODE, dependencies=ADMIN_DOOR, responses=UNDECODABLE)
async def decode(request: Request, body: CodecPayloads, _ns: Namespace = None) -> CodecPayloads:
    """Decrypt payloads; the admin key is the bearer."""
    return await _transcode(request, body, "decode", "admin key")


@router.post("/encode", summary=ENCODE, dependencies=ADMIN_DOOR, responses=UNDECODABLE)
async def encode(request: Request, body: CodecPayloads, _ns: Namespace = None) -> CodecPayloads:
    """Encrypt payloads (the UI encodes what it sends, e.g. a signal's input)."""
    return await _transcode(request, body, "encode", "admin key")


@router.post("/ui/{token}/decode", summary=DECODE, dependencies=UI_DOOR, responses=UNDECODABLE)
async def ui_decode(request: Request, body: CodecPayloads, _ns: Namespace = None) -> CodecPayloads:
    """The Web UI's door to `decode`: the token in the path is the credential."""
    return await _transcode(request, body, "decode", "UI token")


@router.post(
    "/ui/{token}/encode",
    include_in_schema=False,
    dependencies=[public("always refused: the UI door only decodes")],
)
async def ui_encode(token: Annotated[str, Path(max_length=128)]) -> None:
    """The Web UI's door decodes only, whatever the token."""
    raise MoatError(
        ErrorCode.FORBIDDEN,
        "The Web UI's codec door only decodes; encoding takes the admin key (POST /codec/encode).",
    )
