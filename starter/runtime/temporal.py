"""Connecting to Temporal: envconfig (``TEMPORAL_*``, profiles, TLS, API keys) first, Moat's
settings on top, and the pydantic data converter everywhere."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio.client import Client, Interceptor
from temporalio.envconfig import ClientConfig

from schemas.settings import MoatSettings
from starter.runtime.codec import data_converter
from starter.runtime.observability import temporal_runtime


async def connect(settings: MoatSettings, interceptors: Sequence[Interceptor] = ()) -> Client:
    """A client for the configured namespace: ``MOAT_TEMPORAL_ADDRESS``, else
    ``TEMPORAL_ADDRESS``/profile, else the local dev server that ``moat up`` runs."""
    config: dict[str, Any] = dict(ClientConfig.load_client_connect_config())
    target = settings.temporal_address or config.get("target_host") or settings.temporal_target
    config.update(
        target_host=target,
        namespace=settings.temporal_namespace,
        data_converter=data_converter(settings),
        interceptors=list(interceptors),
    )
    runtime = temporal_runtime(settings.metrics_address)
    if runtime is not None:
        config["runtime"] = runtime
    return await Client.connect(**config)
