"""The blocking client: each call runs the async client in an event loop of its own, so
it cannot be called from inside a running loop (use ``MoatClient`` there)."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any

from moat_client._client import ExecutionResult, MoatClient
from moat_client.models import Receipt, ReceiptPage


class MoatClientSync:
    """Blocking wrapper of ``MoatClient`` for scripts and synchronous agents."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 120.0) -> None:
        self._base_url = base_url
        self._api_key = api_key
        self._timeout = timeout

    def execute(self, capability_id: str, input: dict[str, Any], **kwargs: Any) -> ExecutionResult:
        result: ExecutionResult = asyncio.run(self._call("execute", capability_id, input, **kwargs))
        return result

    def get_receipt(self, receipt_id: str) -> Receipt:
        result: Receipt = asyncio.run(self._call("get_receipt", receipt_id))
        return result

    def get_execution(self, receipt_id: str) -> ExecutionResult:
        result: ExecutionResult = asyncio.run(self._call("get_execution", receipt_id))
        return result

    def list_receipts(self, **filters: Any) -> ReceiptPage:
        result: ReceiptPage = asyncio.run(self._call("list_receipts", **filters))
        return result

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        async with MoatClient(self._base_url, self._api_key, timeout=self._timeout) as client:
            return await getattr(client, name)(*args, **kwargs)

    def __enter__(self) -> MoatClientSync:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None
