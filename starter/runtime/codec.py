"""Encryption of Temporal payloads (AES-256-GCM, key id in the payload metadata).

Workflow inputs carry the caller's raw input (headers with tokens included); with this
codec Temporal only ever stores ciphertext. Failures are converted with their message and
stack trace moved into an encoded payload, so the text of an exception (which may repeat a
header value) is ciphertext too. Old keys stay in the keyring so history written before a
rotation still decodes.

Moat's workers and gateways only ever read payloads that Moat wrote, so their codec refuses
a payload that is not encrypted: anyone able to start a workflow in the namespace could
otherwise hand the worker a plaintext input naming any tenant. Search attributes and
headers never pass through a codec, so they are not affected. Only the ops codec endpoint
decodes leniently (``accepting_plaintext``): a person reading history sees whatever is
there, and reading grants nothing.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadCodec,
)
from temporalio.exceptions import ApplicationError

from schemas.errors import ErrorCode
from schemas.settings import MoatSettings
from store.keyrings.codec import load_codec_keys

ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"
PLAINTEXT_REFUSED = ErrorCode.PAYLOAD_NOT_ENCRYPTED


def plaintext_refused() -> ApplicationError:
    """Non-retryable: a workflow whose input (or any later payload) arrived unencrypted
    fails at once instead of retrying a task that can never succeed, and so does not keep
    its workflow id (an idempotency key's) held."""
    return ApplicationError(
        "A payload reached Moat without the payload codec's encryption; Moat reads only what "
        "its gateway and workers wrote. Start executions through the gateway's API.",
        type=PLAINTEXT_REFUSED,
        non_retryable=True,
    )


class EncryptionCodec(PayloadCodec):
    def __init__(
        self, keys: dict[str, bytes], active: str, *, accept_plaintext: bool = False
    ) -> None:
        if active not in keys:
            raise ValueError(f"active codec key {active!r} is not in the keyring")
        self._keys = keys
        self._ciphers = {kid: AESGCM(key) for kid, key in keys.items()}
        self._active = active
        self._accept_plaintext = accept_plaintext

    def accepting_plaintext(self) -> EncryptionCodec:
        """The same keyring, decoding payloads that are not encrypted as they are: for the
        ops codec endpoint, which shows history to a person and feeds nothing to a run."""
        return EncryptionCodec(self._keys, self._active, accept_plaintext=True)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        cipher = self._ciphers[self._active]
        out = []
        for payload in payloads:
            nonce = os.urandom(12)
            data = nonce + cipher.encrypt(nonce, payload.SerializeToString(), None)
            out.append(
                Payload(metadata={"encoding": ENCODING, KEY_ID: self._active.encode()}, data=data)
            )
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = []
        for payload in payloads:
            if payload.metadata.get("encoding") != ENCODING:
                if not self._accept_plaintext:
                    raise plaintext_refused()
                out.append(payload)
                continue
            kid = payload.metadata.get(KEY_ID, b"").decode()
            cipher = self._ciphers.get(kid)
            if cipher is None:
                raise ValueError(f"payload encrypted with unknown key {kid!r}")
            nonce, ciphertext = payload.data[:12], payload.data[12:]
            out.append(Payload.FromString(cipher.decrypt(nonce, ciphertext, None)))
        return out


def load_codec(settings: MoatSettings) -> EncryptionCodec:
    """The codec with the keyring ``store.keyrings.codec`` loads (and creates in development)."""
    return EncryptionCodec(*load_codec_keys(settings))


def data_converter(settings: MoatSettings) -> DataConverter:
    """Pydantic payloads, encrypted, failures' messages and stack traces included. Every
    Temporal client Moat builds (worker, gateway, CLI, tests, bench) takes this one."""
    return dataclasses.replace(
        pydantic_data_converter,
        payload_codec=load_codec(settings),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )
