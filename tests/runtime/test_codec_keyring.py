"""The development codec keyring is created once, whoever comes first: a gateway and a
worker that start together end up with the same key, and neither fails."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from temporalio.api.common.v1 import Payload

from schemas.settings import MoatSettings
from starter.runtime.codec import EncryptionCodec, load_codec


def test_processes_starting_together_share_one_key(tmp_path: Path) -> None:
    settings = MoatSettings(home=tmp_path / "home")
    callers = 16
    start = threading.Barrier(callers)

    def load() -> EncryptionCodec:
        start.wait()
        return load_codec(settings)

    with ThreadPoolExecutor(callers) as pool:
        codecs = list(pool.map(lambda _: load(), range(callers)))

    async def round_trips() -> None:
        payload = Payload(metadata={"encoding": b"json/plain"}, data=b'{"a":1}')
        (sealed,) = await codecs[0].encode([payload])
        for codec in codecs:
            assert await codec.decode([sealed]) == [payload]

    asyncio.run(round_trips())
    keyring = settings.home / "codec-keys.json"
    assert keyring.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in keyring.parent.iterdir()] == ["codec-keys.json"]  # no leftovers
