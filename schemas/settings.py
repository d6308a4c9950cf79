"""The one configuration object. Entry points build it; everything else receives it.

Every variable carries the ``MOAT_`` prefix. Nothing else in the project reads the
environment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class MoatSettings(BaseSettings):
    """Settings for every Moat process (``moat up``, worker, gateway, CLI)."""

    model_config = SettingsConfigDict(env_prefix="MOAT_", extra="ignore")

    home: Path = Field(default=Path(".moat"), description="State folder of the embedded stack.")
    database_url: str | None = Field(
        default=None,
        description="External Postgres (postgresql://…). Unset: the embedded one under home.",
    )
    database_port: int = Field(default=55432, description="Port of the embedded Postgres.")
    temporal_address: str | None = Field(
        default=None,
        description="External Temporal frontend host:port. Unset: the dev server `moat up` starts.",
    )
    temporal_port: int = 7233
    temporal_ui_port: int = 8233
    temporal_namespace: str = "moat"
    task_queue: str = "moat-execute"
    gateway_host: str = "127.0.0.1"
    gateway_port: int = 8000
    gateway_url: str | None = Field(
        default=None, description="Where `moat execute` sends requests. Unset: the local gateway."
    )
    api_key: str | None = Field(
        default=None, description="API key `moat execute` uses. Unset: the demo tenant's key."
    )
    http_allow_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description=(
            "Hosts the http.request adapter may call besides public ones. Empty: public hosts "
            "only, never loopback or private ranges."
        ),
    )
    idempotency_ttl_seconds: int = Field(
        default=24 * 3600, ge=60, description="Default idempotency window for new tenants."
    )
    wait_seconds: float = Field(
        default=60.0, ge=0, description="How long POST /v1/executions waits for the run to end."
    )
    local_activities: bool = Field(
        default=True,
        description="Run policy and record steps as local activities (chosen by bench/).",
    )
    codec_keyring: Path | None = Field(
        default=None,
        description="Keyring of the Temporal payload codec. Unset: $MOAT_HOME/codec-keys.json.",
    )
    namespace_retention_hours: int = Field(
        default=72, description="Retention `moat up` sets on its namespace; must exceed the TTL."
    )

    @field_validator("http_allow_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        if isinstance(value, str):
            return [h.strip().lower() for h in value.split(",") if h.strip()]
        return value

    @property
    def embedded_database(self) -> bool:
        return self.database_url is None

    @property
    def sqlalchemy_url(self) -> str:
        """The database URL in SQLAlchemy's psycopg 3 form."""
        url = self.database_url or f"postgresql://postgres@127.0.0.1:{self.database_port}/moat"
        for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
            if url.startswith(prefix):
                return "postgresql+psycopg://" + url[len(prefix) :]
        return url

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    @property
    def temporal_target(self) -> str:
        return self.temporal_address or f"127.0.0.1:{self.temporal_port}"

    @property
    def local_gateway_url(self) -> str:
        return self.gateway_url or f"http://127.0.0.1:{self.gateway_port}"

    def child_environment(self, **overrides: str) -> dict[str, str]:
        """The environment for a process ``moat up`` spawns: this one's, with ``MOAT_<NAME>``
        set for each override, so the child builds matching settings."""
        env = dict(os.environ)
        env.update({f"MOAT_{name.upper()}": value for name, value in overrides.items()})
        return env
