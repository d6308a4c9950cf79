"""Notion pages as capabilities (effect type ``SOR_UPDATE``): ``notion.create_page``, exactly
once by reconcile, and ``notion.update_page``, exactly once by nature (``docs/notion.md``).

A ``notion`` connection holds an integration token as its secret; its ``config``:

- ``base_url``: Notion's API (``https://api.notion.com/v1``) unless given;
- ``notion_version``: the ``Notion-Version`` sent, one of ``NOTION_VERSIONS`` (default
  ``2025-09-03``, under which a database is a container of data sources);
- ``mark_property``: the name (or id) of a rich-text property of the database, into which
  ``create_page`` writes the execution's downstream key and by which a repeated attempt
  looks for the page. Without it ``create_page`` has no look-up and repeats nothing;
- ``title_property``: the property ``title`` is written to; default ``title``, the id
  Notion gives the title property of every database.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.capabilities import Capability, CapabilitySpec, EffectType, IdempotencyStrategy
from schemas.connections import ConnectionKind
from schemas.jsonvalues import CanonicalAny

# The connection type, and where its token goes when its config names no ``base_url``.
NOTION = "notion"
DEFAULT_BASE_URL = "https://api.notion.com/v1"
NOTION_VERSIONS = ("2022-06-28", "2025-09-03")
DEFAULT_NOTION_VERSION = "2025-09-03"
# The id Notion gives the title property of every database (a property may be named by
# its id wherever its name is taken).
DEFAULT_TITLE_PROPERTY = "title"
# Notion's limits: the characters of one rich-text object, the blocks of one request.
MAX_TEXT = 2000
MAX_BLOCKS = 100
MAX_PROPERTY_NAME = 200

# A Notion id: a UUID, with or without its dashes.
NOTION_ID_PATTERN = (
    r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$"
)
NotionId = Annotated[str, Field(pattern=NOTION_ID_PATTERN, max_length=36)]
PropertyName = Annotated[str, Field(min_length=1, max_length=MAX_PROPERTY_NAME)]
# A property value object as Notion takes it (``{"rich_text": [...]}``, ``{"select":
# {"name": ...}}``, …): passed on as it is.
PropertyValues = dict[PropertyName, dict[str, CanonicalAny]]
# One block of content: a paragraph's plain text, or a Notion block object as it is.
ContentItem = Annotated[str, Field(min_length=1, max_length=MAX_TEXT)] | dict[str, CanonicalAny]


def check_config(config: dict[str, Any]) -> dict[str, Any]:
    """A ``notion`` connection's config as the adapter reads it; ValueError naming the key
    that it cannot use (never repeating its value)."""
    version = config.get("notion_version")
    if version is not None and version not in NOTION_VERSIONS:
        raise ValueError(f"notion_version must be one of {', '.join(NOTION_VERSIONS)}")
    for key in ("mark_property", "title_property"):
        value = config.get(key)
        if value is not None and not (
            isinstance(value, str) and 0 < len(value) <= MAX_PROPERTY_NAME
        ):
            raise ValueError(
                f"{key} must be a property's name or id (1 to {MAX_PROPERTY_NAME} characters)"
            )
    return config


class NotionCreatePageInput(BaseModel):
    """Input of ``notion.create_page`` (Notion's ``POST /v1/pages``, in a database)."""

    # A refused value may be a secret: the error text never shows it.
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    database_id: NotionId
    title: str = Field(min_length=1, max_length=MAX_TEXT)
    properties: PropertyValues | None = Field(
        default=None,
        description="Other property values, by property name or id, as Notion's page "
        "property value objects. Not the title or mark property: the connection names those.",
    )
    content: list[ContentItem] | None = Field(
        default=None,
        max_length=MAX_BLOCKS,
        description="The page's content: each item a paragraph's plain text, or a Notion "
        "block object sent as it is.",
    )
    data_source_id: NotionId | None = Field(
        default=None,
        description="Notion version 2025-09-03: the database's data source to create the "
        "page in. Unset: the database's only data source (a database of several is refused).",
    )


class NotionUpdatePageInput(BaseModel):
    """Input of ``notion.update_page`` (Notion's ``PATCH /v1/pages/{page_id}``)."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    page_id: NotionId
    properties: PropertyValues | None = Field(
        default=None, description="Property values to set, by property name or id."
    )
    archived: bool | None = Field(
        default=None, description="True: move the page to the trash; false: restore it."
    )

    @model_validator(mode="after")
    def _changes_something(self) -> NotionUpdatePageInput:
        if self.properties is None and self.archived is None:
            raise ValueError("name `properties`, `archived` or both")
        return self


CREATE_PAGE = CapabilitySpec(
    id="notion.create_page",
    version="1.0.0",
    adapter="notion_create_page",
    adapter_id="notion-create-page-adapter-v1",
    description=(
        "Creates a page in a Notion database (POST /v1/pages). Notion has no idempotency "
        "key: the page carries Moat's key in the rich-text property the connection names "
        "(`config.mark_property`), and a repeated attempt first queries the database for "
        "it. A connection without a mark property repeats nothing: an attempt without an "
        "answer ends `outcome_unknown`."
    ),
    effect_type=EffectType.SOR_UPDATE,
    timeout_seconds=20.0,
    idempotency=IdempotencyStrategy.RECONCILE,
    connection_types=(NOTION,),
    connection_required=True,
)
UPDATE_PAGE = CapabilitySpec(
    id="notion.update_page",
    version="1.0.0",
    adapter="notion_update_page",
    adapter_id="notion-update-page-adapter-v1",
    description=(
        "Sets a Notion page's property values and/or moves it to the trash or back "
        "(PATCH /v1/pages/{page_id}). Setting the same values twice leaves the same page."
    ),
    effect_type=EffectType.SOR_UPDATE,
    timeout_seconds=20.0,
    idempotency=IdempotencyStrategy.NATURAL,
    connection_types=(NOTION,),
    connection_required=True,
)

_PAGE: dict[str, Any] = dict.fromkeys(("page_id", "url"))
NOTION_KIND = ConnectionKind(
    NOTION,
    "A Notion integration token; config: notion_version, mark_property, title_property.",
    DEFAULT_BASE_URL,
    check_config,
)
CAPABILITIES: tuple[Capability, ...] = (
    Capability(
        spec=CREATE_PAGE,
        input_model=NotionCreatePageInput,
        adapter="activities.adapters.notion:create_page",
        output_shape={**_PAGE, "reconciled": None},
        connection_kinds=(NOTION_KIND,),
    ),
    Capability(
        spec=UPDATE_PAGE,
        input_model=NotionUpdatePageInput,
        adapter="activities.adapters.notion:update_page",
        output_shape={**_PAGE, "archived": None},
        connection_kinds=(NOTION_KIND,),
    ),
)
