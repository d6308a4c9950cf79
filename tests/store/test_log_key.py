"""The log key: made once in development (private 0600, its public half beside it), never
made when configured, and the public half is all a gateway reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas import translog
from schemas.settings import MoatSettings
from store.keyrings import log as log_key


def test_development_key_is_made_once_private_with_its_public_half(tmp_path: Path) -> None:
    settings = MoatSettings(home=tmp_path)
    key = log_key.signing_key(settings)
    assert settings.log_key_path.stat().st_mode & 0o777 == 0o600
    assert b"PRIVATE" not in settings.log_public_key_path.read_bytes()
    again = log_key.signing_key(settings)
    raw = translog.public_key_bytes
    assert raw(again.public_key()) == raw(key.public_key())
    assert raw(log_key.public_key(settings)) == raw(key.public_key())
    assert log_key.origin(settings, "acme") == "moat.local/log/acme"


def test_a_configured_key_is_never_made(tmp_path: Path) -> None:
    settings = MoatSettings(home=tmp_path, log_key=tmp_path / "mounted" / "log-key.pem")
    with pytest.raises(log_key.LogKeyMissingError, match="MOAT_LOG_KEY"):
        log_key.signing_key(settings)
    with pytest.raises(log_key.LogKeyMissingError):
        log_key.public_key(settings)
    assert not (tmp_path / "mounted").exists()
