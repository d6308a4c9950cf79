"""The one configuration object. Entry points build it; everything else receives it.

Every variable carries the ``MOAT_`` prefix. Nothing else in the project reads the
environment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

APP_DATABASE_ROLE = "moat_app"
MIN_ADMIN_KEY_LENGTH = 32


class MoatSettings(BaseSettings):
    """Settings for every Moat process (``moat up``, worker, gateway, CLI)."""

    model_config = SettingsConfigDict(env_prefix="MOAT_", extra="ignore")

    home: Path = Field(default=Path(".moat"), description="State folder of the embedded stack.")
    database_url: str | None = Field(
        default=None,
        description=(
            "External Postgres (postgresql://…) as the owner role that runs migrations. "
            "Unset: the embedded one under home."
        ),
    )
    database_app_url: str | None = Field(
        default=None,
        description=(
            "Postgres as the application role (not the owner, no BYPASSRLS) that the gateway "
            f"and worker use. Unset: the owner URL with the user replaced by {APP_DATABASE_ROLE}."
        ),
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
    max_wait_seconds: float = Field(
        default=300.0, ge=0, description="The most a client may ask for with `Prefer: wait=N`."
    )
    max_body_bytes: int = Field(
        default=256 * 1024, ge=1024, description="Largest request body the gateway accepts."
    )
    admin_api_key: SecretStr | None = Field(
        default=None,
        description=(
            "Key of the admin HTTP endpoints (/v1/admin/…). Unset: the admin API is disabled. "
            f"At least {MIN_ADMIN_KEY_LENGTH} characters."
        ),
    )
    local_activities: bool = Field(
        default=True,
        description="Run the policy, record and manifest steps as local activities "
        "(chosen by bench/).",
    )
    metrics_address: str | None = Field(
        default=None,
        description="host:port where this process serves Temporal SDK metrics for Prometheus "
        "(/metrics). Unset: no metrics endpoint.",
    )
    codec_keyring: Path | None = Field(
        default=None,
        description="Keyring of the Temporal payload codec. Unset: $MOAT_HOME/codec-keys.json.",
    )
    codec_door: Path | None = Field(
        default=None,
        description="Token file of the Temporal Web UI's codec door (/codec/ui/<token>/…), "
        "written by `moat codec rotate`; every gateway reads the same file. Unset: "
        "$MOAT_HOME/codec-door.json.",
    )
    log_format: Literal["json", "text"] = Field(
        default="json",
        description="Worker and gateway logs: one JSON object per line (with trace_id), or text.",
    )
    codec_cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description=(
            "Browser origins (the Temporal Web UI's) allowed to call the gateway's /codec "
            "endpoint, comma-separated. `moat up` sets its own UI's."
        ),
    )
    manifest_root: Path | None = Field(
        default=None, description="Where run manifests are stored. Unset: $MOAT_HOME/manifests."
    )
    signing_keyring: Path | None = Field(
        default=None,
        description="Manifest signing keyring. Unset: $MOAT_HOME/signing-keys.json.",
    )
    start_keyring: Path | None = Field(
        default=None,
        description="HMAC keys with which gateways sign the runs they start and workers check "
        "them; every gateway and worker needs the same file. Unset: $MOAT_HOME/start-keys.json.",
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

    @field_validator("codec_cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: object) -> object:
        if isinstance(value, str):
            return [o.strip().rstrip("/") for o in value.split(",") if o.strip()]
        return value

    @field_validator("admin_api_key")
    @classmethod
    def _strong_admin_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_ADMIN_KEY_LENGTH:
            raise ValueError(f"admin_api_key must be at least {MIN_ADMIN_KEY_LENGTH} characters")
        return value

    @property
    def sqlalchemy_url(self) -> str:
        """The owner's database URL (migrations, operator commands), in psycopg 3 form."""
        url = self.database_url or f"postgresql://postgres@127.0.0.1:{self.database_port}/moat"
        return _psycopg_url(url)

    @property
    def app_sqlalchemy_url(self) -> str:
        """The application role's database URL (gateway, worker), in psycopg 3 form.

        Derived from the owner URL when unset: same host and database, user
        ``moat_app``, no password (enough for the embedded trust-auth Postgres)."""
        if self.database_app_url:
            return _psycopg_url(self.database_app_url)
        owner = urlsplit(self.sqlalchemy_url)
        host = owner.netloc.rpartition("@")[2]
        return urlunsplit(owner._replace(netloc=f"{APP_DATABASE_ROLE}@{host}"))

    @property
    def manifests_dir(self) -> Path:
        return self.manifest_root or self.home / "manifests"

    @property
    def signing_keyring_path(self) -> Path:
        return self.signing_keyring or self.home / "signing-keys.json"

    @property
    def start_keyring_path(self) -> Path:
        return self.start_keyring or self.home / "start-keys.json"

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


def _psycopg_url(url: str) -> str:
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url
