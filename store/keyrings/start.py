"""The keys that sign run starts: gateways sign what they vouch for, workers check it.

The keyring is a JSON file (mode 0600) ``{"active": kid, "keys": {kid: base64url key}}``
that every gateway and worker shares. A signature is
``<claims version>.<kid>.<base64url HMAC-SHA256>``: gateways sign with the active key and
workers accept any key of the ring, so a key is rotated by adding it everywhere first, then
making it active, and removed only once no run signed with it can still be reset.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from typing import Protocol

from schemas.approvals import ApprovalVerdict
from schemas.run import ExecuteWorkflowInput
from schemas.settings import MoatSettings
from schemas.start import DecisionClaims, StartClaims
from store.keyrings.files import symmetric_keyring

MIN_KEY_BYTES = 32


class Claims(Protocol):
    """What the ring signs: a start's claims, or an approval decision's."""

    @property
    def version(self) -> str: ...

    def message(self) -> bytes: ...


class StartKeyring:
    """HMAC keys, one of them active. Build with ``from_settings``."""

    def __init__(self, keys: Mapping[str, bytes], active: str) -> None:
        if active not in keys:
            raise ValueError(f"start keyring: active key {active!r} is not in the keyring")
        short = [kid for kid, key in keys.items() if len(key) < MIN_KEY_BYTES]
        if short:
            raise ValueError(f"start keyring: keys {short} are shorter than {MIN_KEY_BYTES} bytes")
        self._keys = dict(keys)
        self._active = active

    @classmethod
    def from_settings(cls, settings: MoatSettings) -> StartKeyring:
        """The ring at ``MOAT_START_KEYRING``, or at ``$MOAT_HOME/start-keys.json``, which is
        created with a fresh key on first use (development only: a configured keyring that
        is missing is an error, never silently replaced by a key no other process has)."""
        keys, active = symmetric_keyring(
            settings.start_keyring_path,
            configured_as="MOAT_START_KEYRING" if settings.start_keyring is not None else None,
            new_kid="s-" + secrets.token_hex(4),
        )
        return cls(keys, active)

    def sign(self, claims: Claims) -> str:
        mac = self._mac(self._keys[self._active], claims)
        return f"{claims.version}.{self._active}.{mac}"

    def signed(self, req: ExecuteWorkflowInput, workflow_id: str) -> ExecuteWorkflowInput:
        """``req`` with its signature for the run ``workflow_id``: the one way a legitimate
        start of ``ExecuteCapability`` is made."""
        claims = StartClaims.of_start(req, workflow_id)
        return req.model_copy(update={"start_signature": self.sign(claims)})

    def signed_decision(
        self, tenant_id: str, workflow_id: str, verdict: ApprovalVerdict
    ) -> ApprovalVerdict:
        """``verdict`` with the signature of a gateway that checked its decider, for the
        run ``workflow_id``: the one way a person's decision reaches a run."""
        claims = DecisionClaims.of(tenant_id, workflow_id, verdict)
        return verdict.model_copy(update={"signature": self.sign(claims)})

    def refusal(self, claims: Claims, signature: str) -> str | None:
        """Why ``signature`` does not vouch for ``claims`` (None: it does)."""
        if not signature:
            return "unsigned"
        version, _, rest = signature.partition(".")
        kid, _, mac = rest.rpartition(".")
        if version != claims.version or not kid or not mac:
            return "malformed"
        key = self._keys.get(kid)
        if key is None:
            return "unknown_key"
        if not hmac.compare_digest(mac.encode(), self._mac(key, claims).encode()):
            return "mismatch"
        return None

    @staticmethod
    def _mac(key: bytes, claims: Claims) -> str:
        digest = hmac.new(key, claims.message(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")
