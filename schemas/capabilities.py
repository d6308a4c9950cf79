"""Capability manifests: what can be executed, with which adapter and retry settings."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, HttpUrl, field_validator
from pydantic.config import JsonDict
from pydantic_core import PydanticCustomError

from schemas.connections import ConnectionKind, ConnectionType, ConnectionTypeName
from schemas.jsonvalues import CANONICAL_JSON, CanonicalAny, marker, model_schema

# The most of a provider's answer ``http.request`` reads (``MOAT_HTTP_MAX_RESPONSE_BYTES``).
DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024


class EffectType(StrEnum):
    SEND_EMAIL = "SEND_EMAIL"
    API_CALL = "API_CALL"
    SOR_UPDATE = "SOR_UPDATE"
    WEBHOOK_CALL = "WEBHOOK_CALL"
    NONE = "NONE"


class IdempotencyStrategy(StrEnum):
    """How a capability keeps one effect per key when an attempt is repeated."""

    # The provider dedupes on the downstream key (``Idempotency-Key``, ``webhook-id``).
    PROVIDER_KEY = "provider_key"
    # The provider has no key: the adapter marks what it creates with the downstream key
    # and looks for its mark before any repeated attempt.
    RECONCILE = "reconcile"
    # Repeating the call leaves the same state: it names the state it leaves (this issue
    # closed, this message gone), so a repeat finds that state and changes nothing more.
    NATURAL = "natural"
    NONE = "none"


class RetrySettings(BaseModel):
    """Retries after the first attempt, with exponential backoff from ``base_delay_seconds``."""

    model_config = ConfigDict(frozen=True)

    max_retries: int = Field(ge=0, le=20)
    base_delay_seconds: float = Field(gt=0)
    max_delay_seconds: float = Field(default=300.0, gt=0)


RETRY_DEFAULTS: dict[EffectType, RetrySettings] = {
    EffectType.SEND_EMAIL: RetrySettings(max_retries=3, base_delay_seconds=2.0),
    EffectType.API_CALL: RetrySettings(max_retries=5, base_delay_seconds=1.0),
    EffectType.SOR_UPDATE: RetrySettings(max_retries=1, base_delay_seconds=5.0),
    EffectType.WEBHOOK_CALL: RetrySettings(max_retries=5, base_delay_seconds=1.0),
    EffectType.NONE: RetrySettings(max_retries=0, base_delay_seconds=1.0),
}


class ProbeSpec(BaseModel):
    """How a capability can be called with no side effect."""

    model_config = ConfigDict(frozen=True)

    default_input: dict[str, Any] | None = Field(
        default=None, description="The input a probe sends when it names none."
    )
    allowed_values: dict[str, tuple[str, ...]] = Field(
        default_factory=dict,
        description="Top-level input fields a probe's input must hold one of these values "
        "in (e.g. `method`: GET or HEAD).",
    )

    def refusal(self, value: dict[str, Any]) -> str | None:
        """Why ``value`` is not a safe probe input (None: it is)."""
        for field, allowed in self.allowed_values.items():
            if value.get(field) not in allowed:
                return f"a probe's `{field}` must be one of {', '.join(allowed)}"
        return None


class CapabilitySpec(BaseModel):
    """A versioned capability manifest."""

    model_config = ConfigDict(frozen=True)

    id: str
    version: str
    adapter: str = Field(description="Adapter implementation name, e.g. 'http' or 'echo'.")
    adapter_id: str = Field(description="Adapter identity recorded on receipts.")
    description: str = ""
    effect_type: EffectType
    required_scopes: tuple[str, ...] = ()
    timeout_seconds: float = Field(default=30.0, gt=0)
    retry: RetrySettings | None = None
    requires_approval: bool = False
    idempotency: IdempotencyStrategy = IdempotencyStrategy.NONE
    # Connection types the adapter accepts; empty: the capability takes no connection.
    connection_types: tuple[ConnectionTypeName, ...] = ()
    # True: the adapter cannot act without a connection, so a call naming none is refused
    # before anything is claimed or started (``connection_required``).
    connection_required: bool = False
    # None: the capability has no call free of side effects, and is never probed.
    probe: ProbeSpec | None = None

    @property
    def retry_settings(self) -> RetrySettings:
        return self.retry or RETRY_DEFAULTS[self.effect_type]


# What the schema says of a URL field: http(s), with a host (pydantic's ``HttpUrl``).
HTTP_URL_PATTERN = r"^[Hh][Tt][Tt][Pp][Ss]?://[^/?#\s]+"
_HTTP_URL: JsonDict = {"pattern": HTTP_URL_PATTERN}

# RFC 9110: a field name is a token; a field value is visible characters with spaces or
# tabs only between them. Only ASCII, because that is all an HTTP library sends. A control
# character (a newline pasted with a key) would otherwise reach the HTTP library, whose
# refusal repeats the value, a secret, in its error text.
HEADER_NAME_PATTERN = r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$"
HEADER_VALUE_PATTERN = r"^(?:[!-~](?:[ \t!-~]*[!-~])?)?$"
_HEADER_NAME = re.compile(HEADER_NAME_PATTERN)
_HEADER_VALUE = re.compile(HEADER_VALUE_PATTERN)


def _header_value(value: str) -> str:
    if not _HEADER_VALUE.fullmatch(value):
        # The message never repeats the value: it is often a credential.
        raise PydanticCustomError(
            "header_value_invalid",
            "header values may hold visible ASCII characters, with spaces or tabs only "
            "between them: remove control characters (CR, LF, NUL, …), leading or trailing "
            "white space (often a newline pasted with a key) and non-ASCII characters",
        )
    return value


HeaderValue = Annotated[str, AfterValidator(_header_value)]


class HttpRequestInput(BaseModel):
    """Input of ``http.request``."""

    # A refused value may be a secret: the error text never shows it.
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"]
    url: HttpUrl = Field(json_schema_extra=_HTTP_URL)
    headers: dict[str, HeaderValue] = Field(
        default_factory=dict,
        json_schema_extra={
            "propertyNames": {"pattern": HEADER_NAME_PATTERN},
            "additionalProperties": {"type": "string", "pattern": HEADER_VALUE_PATTERN},
        },
    )
    json_body: CanonicalAny = Field(default=None, alias="json")

    @field_validator("headers", mode="before")
    @classmethod
    def _header_names(cls, value: object) -> object:
        """Names are checked before values, so that a value's error, which names its header
        in its location, only ever names a valid one; a bad name is given by its position,
        as it may be a pasted ``Name: secret`` line."""
        if isinstance(value, dict):
            for position, name in enumerate(value, start=1):
                if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
                    raise PydanticCustomError(
                        "header_name_invalid",
                        "header name number {position} is not an RFC 9110 token: use "
                        "letters, digits and !#$%&'*+-.^_`|~ only",
                        {"position": position},
                    )
        return value


class EchoInput(BaseModel):
    """Input of ``demo.echo``: any JSON object, returned as it is."""

    model_config = ConfigDict(
        extra="allow", json_schema_extra={"additionalProperties": marker(CANONICAL_JSON)}
    )


class WebhookPostInput(BaseModel):
    """Input of ``webhook.post``: one Standard Webhooks delivery, signed with the
    connection's ``whsec_`` secret."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    url: HttpUrl = Field(json_schema_extra=_HTTP_URL)
    event_type: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:-]+$")
    payload: dict[str, CanonicalAny] = Field(default_factory=dict)


SlackChannel = Annotated[str, Field(min_length=1, max_length=200)]
# A message's timestamp, its id within the channel.
SlackTs = Annotated[str, Field(pattern=r"^[0-9]+\.[0-9]+$")]


class SlackPostMessageInput(BaseModel):
    """Input of ``slack.post_message`` (Slack's ``chat.postMessage``)."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    channel: SlackChannel
    text: str = Field(min_length=1, max_length=40000)
    blocks: list[dict[str, CanonicalAny]] | None = None
    thread_ts: SlackTs | None = None


class SlackDeleteMessageInput(BaseModel):
    """Input of ``slack.delete_message`` (Slack's ``chat.delete``)."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    channel: SlackChannel
    ts: SlackTs


class SlackUpdateMessageInput(BaseModel):
    """Input of ``slack.update_message`` (Slack's ``chat.update``): the message's new text
    and blocks (``blocks`` unset: Slack keeps the message's blocks)."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    channel: SlackChannel
    ts: SlackTs
    text: str = Field(min_length=1, max_length=40000)
    blocks: list[dict[str, CanonicalAny]] | None = None


# GitHub's own rules for owner and repository names.
# GitHub's own rules, which also keep each name one path segment: an owner (user or
# organization) is letters, digits and single inner hyphens, at most 39 characters; a
# repository is letters, digits, ".", "_" and "-", and not "." or ".." (nor any name of
# dots only).
_GITHUB_OWNER = r"^[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*$"
_GITHUB_REPO = r"^\.*[A-Za-z0-9_-][A-Za-z0-9._-]*$"
GithubOwner = Annotated[str, Field(max_length=39, pattern=_GITHUB_OWNER)]
GithubRepo = Annotated[str, Field(max_length=100, pattern=_GITHUB_REPO)]


class GithubCreateIssueInput(BaseModel):
    """Input of ``github.create_issue`` (``POST /repos/{owner}/{repo}/issues``)."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    owner: GithubOwner
    repo: GithubRepo
    title: str = Field(min_length=1, max_length=256)
    body: str | None = Field(default=None, max_length=60000)
    labels: list[str] | None = None
    assignees: list[str] | None = None


class GithubCloseIssueInput(BaseModel):
    """Input of ``github.close_issue`` (``PATCH /repos/{owner}/{repo}/issues/{number}``)."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    owner: GithubOwner
    repo: GithubRepo
    number: int = Field(ge=1)
    state_reason: Literal["completed", "not_planned"] | None = Field(
        default=None, description="Why it is closed; unset: GitHub's default, `completed`."
    )


class NoInput(BaseModel):
    """Input of a read that takes none (``slack.auth_test``, ``github.rate_limit``): ``{}``."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)


INPUT_MODELS: dict[str, type[BaseModel]] = {
    "http": HttpRequestInput,
    "echo": EchoInput,
    "webhook": WebhookPostInput,
    "slack": SlackPostMessageInput,
    "github": GithubCreateIssueInput,
    "slack_auth_test": NoInput,
    "github_rate_limit": NoInput,
    "github_close_issue": GithubCloseIssueInput,
    "slack_delete_message": SlackDeleteMessageInput,
    "slack_update_message": SlackUpdateMessageInput,
}

# What an adapter's output holds, for a plan's references (``schemas.plans``): member name
# → what is below it (a dict: known members; None: any value, not checked further).
# ``ECHOED``: the output is the step's own input.
ECHOED = "input"
# None: the output is open (a plan's references into it are not checked).
OutputShape = dict[str, Any] | str | None
_ANSWER: dict[str, Any] = dict.fromkeys(
    ("status", "headers", "body", "truncated", "received_bytes", "sha256")
)
OUTPUT_SHAPES: dict[str, OutputShape] = {
    "echo": ECHOED,
    "http": _ANSWER,
    "webhook": _ANSWER,
    "slack": dict.fromkeys(("channel", "ts", "reconciled")),
    "github": dict.fromkeys(("number", "html_url", "id", "reconciled")),
    "slack_auth_test": dict.fromkeys(
        ("team", "team_id", "user", "user_id", "bot_id", "enterprise_id")
    ),
    "github_rate_limit": {"core": dict.fromkeys(("limit", "remaining", "used", "reset"))},
    "github_close_issue": dict.fromkeys(("number", "html_url", "state")),
    "slack_delete_message": dict.fromkeys(("channel", "ts", "already_deleted")),
    "slack_update_message": dict.fromkeys(("channel", "ts")),
}

BUILTIN_CAPABILITIES: tuple[CapabilitySpec, ...] = (
    CapabilitySpec(
        id="demo.echo",
        version="1.0.0",
        adapter="echo",
        adapter_id="echo-adapter-v1",
        description="Offline: returns its input. For trying Moat out.",
        effect_type=EffectType.NONE,
        timeout_seconds=5.0,
        probe=ProbeSpec(default_input={"probe": "demo.echo"}),
    ),
    CapabilitySpec(
        id="http.request",
        version="1.0.0",
        adapter="http",
        adapter_id="http-adapter-v1",
        description=(
            "A generic HTTP call to a public or allow-listed host, with Idempotency-Key sent. "
            "Headers that belong to the connection or the message framing (Host, "
            "Content-Length, Transfer-Encoding, Connection, Keep-Alive, Upgrade, TE, Trailer, "
            "Proxy-*) are dropped from `headers`: the HTTP client writes its own. With an "
            "`http_bearer` connection, its token is sent as `Authorization: Bearer …` in "
            "place of any Authorization header of the input; with an `oauth2` connection, its "
            "current access token."
        ),
        effect_type=EffectType.API_CALL,
        timeout_seconds=30.0,
        idempotency=IdempotencyStrategy.PROVIDER_KEY,
        connection_types=(ConnectionType.HTTP_BEARER, "oauth2"),
        # Reads only: a probe names its own URL (no default), and only GET or HEAD.
        probe=ProbeSpec(allowed_values={"method": ("GET", "HEAD")}),
    ),
    CapabilitySpec(
        id="webhook.post",
        version="1.0.0",
        adapter="webhook",
        adapter_id="webhook-adapter-v1",
        description=(
            "A Standard Webhooks delivery: `payload` sent as `{type, timestamp, data}` with "
            "`webhook-id` (the same on every retry: the receiver dedupes on it), "
            "`webhook-timestamp` and `webhook-signature` made with the connection's secret."
        ),
        effect_type=EffectType.WEBHOOK_CALL,
        timeout_seconds=15.0,
        idempotency=IdempotencyStrategy.PROVIDER_KEY,
        connection_types=(ConnectionType.WEBHOOK,),
        connection_required=True,
    ),
    CapabilitySpec(
        id="slack.post_message",
        version="1.0.0",
        adapter="slack",
        adapter_id="slack-adapter-v1",
        description=(
            "Posts a message with Slack's chat.postMessage. Slack has no idempotency key: the "
            "message carries Moat's key in its metadata, and a repeated attempt first looks for "
            "it in the channel's history (the bot needs the channel's `*:history` scope)."
        ),
        effect_type=EffectType.API_CALL,
        timeout_seconds=10.0,
        idempotency=IdempotencyStrategy.RECONCILE,
        connection_types=(ConnectionType.SLACK,),
        connection_required=True,
    ),
    CapabilitySpec(
        id="github.create_issue",
        version="1.0.0",
        adapter="github",
        adapter_id="github-adapter-v1",
        description=(
            "Creates an issue with GitHub's REST API. GitHub has no idempotency key: the body "
            "ends with a hidden `<!-- moat:<key> -->` comment, and a repeated attempt first "
            "looks for it among the repository's newest issues."
        ),
        effect_type=EffectType.API_CALL,
        timeout_seconds=10.0,
        idempotency=IdempotencyStrategy.RECONCILE,
        connection_types=(ConnectionType.GITHUB,),
        connection_required=True,
    ),
    # The providers' safe reads: what a probe of a Slack or GitHub connection calls.
    CapabilitySpec(
        id="slack.auth_test",
        version="1.0.0",
        adapter="slack_auth_test",
        adapter_id="slack-auth-test-adapter-v1",
        description=(
            "Checks a Slack connection with Slack's auth.test: who the token is (team, user, "
            "bot). Reads only, needs no scope; the read a probe of a Slack connection makes."
        ),
        effect_type=EffectType.NONE,
        timeout_seconds=10.0,
        connection_types=(ConnectionType.SLACK,),
        connection_required=True,
        probe=ProbeSpec(default_input={}),
    ),
    CapabilitySpec(
        id="github.rate_limit",
        version="1.0.0",
        adapter="github_rate_limit",
        adapter_id="github-rate-limit-adapter-v1",
        description=(
            "Checks a GitHub connection with GitHub's GET /rate_limit: the token's REST rate "
            "limit (`core`). Reads only and not counted against the limit; the read a probe "
            "of a GitHub connection makes."
        ),
        effect_type=EffectType.NONE,
        timeout_seconds=10.0,
        connection_types=(ConnectionType.GITHUB,),
        connection_required=True,
        probe=ProbeSpec(default_input={}),
    ),
    # What undoes the effects above: a plan's compensating steps.
    CapabilitySpec(
        id="github.close_issue",
        version="1.0.0",
        adapter="github_close_issue",
        adapter_id="github-close-issue-adapter-v1",
        description=(
            "Closes an issue with GitHub's PATCH /repos/{owner}/{repo}/issues/{number} "
            '(`{"state": "closed"}`, with `state_reason`). An issue already closed is '
            "answered as closed: repeating the call leaves the same state."
        ),
        effect_type=EffectType.API_CALL,
        timeout_seconds=10.0,
        idempotency=IdempotencyStrategy.NATURAL,
        connection_types=(ConnectionType.GITHUB,),
        connection_required=True,
    ),
    CapabilitySpec(
        id="slack.delete_message",
        version="1.0.0",
        adapter="slack_delete_message",
        adapter_id="slack-delete-message-adapter-v1",
        description=(
            "Deletes a message with Slack's chat.delete (a bot token deletes the bot's own "
            "messages). A repeated attempt answered `message_not_found` found the message "
            "gone, deleted by an earlier one: done (`already_deleted: true`); a first "
            "attempt answered so fails (`provider_not_found`)."
        ),
        effect_type=EffectType.API_CALL,
        timeout_seconds=10.0,
        idempotency=IdempotencyStrategy.NATURAL,
        connection_types=(ConnectionType.SLACK,),
        connection_required=True,
    ),
    CapabilitySpec(
        id="slack.update_message",
        version="1.0.0",
        adapter="slack_update_message",
        adapter_id="slack-update-message-adapter-v1",
        description=(
            "Replaces a message's text and blocks with Slack's chat.update (a bot token "
            "updates the bot's own messages). Repeating the call leaves the same message: "
            "exactly once by nature."
        ),
        effect_type=EffectType.API_CALL,
        timeout_seconds=10.0,
        idempotency=IdempotencyStrategy.NATURAL,
        connection_types=(ConnectionType.SLACK,),
        connection_required=True,
    ),
)


@dataclass(frozen=True)
class Capability:
    """A capability as a package declares it to Moat (``docs/adapters.md``): the manifest,
    the model its input is checked against, what its output holds, and where its adapter is
    made. A distribution lists its declarations under the entry point group
    ``moat.capabilities`` (``schemas.registry``); the built-ins are declared the same way.

    ``adapter`` is the import path (``package.module:factory``) of a callable that takes an
    ``AdapterContext`` and returns the adapter. Only a worker imports it: the gateway, the
    CLI and the MCP server read the declaration alone."""

    spec: CapabilitySpec
    input_model: type[BaseModel]
    adapter: str
    output_shape: OutputShape = None
    # Connection types of the package's own that the spec's ``connection_types`` name.
    connection_kinds: tuple[ConnectionKind, ...] = ()


def _declared(spec: CapabilitySpec, factory: str) -> Capability:
    return Capability(
        spec=spec,
        input_model=INPUT_MODELS[spec.adapter],
        adapter=f"activities.adapters.builtin:{factory}",
        output_shape=OUTPUT_SHAPES[spec.adapter],
    )


# The built-in capabilities as the entry point ``builtin`` of ``moat.capabilities`` names
# them (pyproject.toml): each spec with its adapter's factory (``activities.adapters.builtin``).
BUILTINS: tuple[Capability, ...] = tuple(
    _declared(spec, spec.adapter) for spec in BUILTIN_CAPABILITIES
)


class CapabilityCatalog:
    """Capabilities by id and version; the newest version answers when none is asked for.

    Without ``specs``: every capability installed (``schemas.registry.installed``). With
    them: those alone, each a ``CapabilitySpec`` whose adapter an installed declaration
    names, or a ``Capability`` declared on the spot (a test's, a conformance run's)."""

    def __init__(self, specs: Iterable[CapabilitySpec | Capability] | None = None) -> None:
        from schemas.registry import installed

        declared = installed()
        self._declarations: dict[str, Capability] = {c.spec.adapter: c for c in declared}
        self._specs: dict[str, dict[str, CapabilitySpec]] = {}
        for item in declared if specs is None else specs:
            if isinstance(item, Capability):
                self._declarations[item.spec.adapter] = item
                item = item.spec
            self._specs.setdefault(item.id, {})[item.version] = item

    def get(self, capability_id: str, version: str | None = None) -> CapabilitySpec | None:
        versions = self._specs.get(capability_id)
        if not versions:
            return None
        if version is not None:
            return versions.get(version)
        return versions[max(versions, key=_semver_key)]

    def all(self) -> list[CapabilitySpec]:
        return [s for versions in self._specs.values() for s in versions.values()]

    def closest(self, capability_id: str) -> str | None:
        """The catalog's id nearest to a mistyped one, if any is near enough."""
        found = difflib.get_close_matches(capability_id, list(self._specs), n=1, cutoff=0.6)
        return found[0] if found else None

    def declaration(self, adapter: str) -> Capability:
        """The declaration of the adapter ``adapter`` (a spec's ``adapter``)."""
        return self._declarations[adapter]

    def declarations(self) -> list[Capability]:
        """Every adapter a worker of this catalog makes, one declaration each."""
        return list(self._declarations.values())

    def input_model(self, spec: CapabilitySpec) -> type[BaseModel]:
        return self._declarations[spec.adapter].input_model

    def output_shape(self, spec: CapabilitySpec) -> OutputShape:
        """What the capability's output holds (its declaration's ``output_shape``)."""
        return self._declarations[spec.adapter].output_shape

    def input_schema(self, spec: CapabilitySpec) -> dict[str, Any]:
        """The JSON Schema of the capability's input, as the API lists and documents it."""
        return model_schema(self.input_model(spec))


def _semver_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("."))
