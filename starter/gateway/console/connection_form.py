"""The add-a-connection form: the fields a connection type's config takes, read from its
declared JSON Schema (or ``base_url`` and ``allowed_origins`` for a type that declares
none), and the ``ConnectionCreate`` a submitted form makes. The secret is a field of its
own, taken once and never put back into a page."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schemas.connections import ConnectionCreate, ConnectionKind
from starter.service import json_body

# How a field is typed in and read back: one line of text, a whole number, a choice, one
# item a line (a list of strings), or a JSON value.
TEXT, NUMBER, CHOICE, LINES, JSON = "text", "number", "choice", "lines", "json"

ORIGIN_FIELDS: tuple[dict[str, Any], ...] = (
    {"name": "base_url", "kind": TEXT, "help": "Where the provider's API is (optional)."},
    {
        "name": "allowed_origins",
        "kind": LINES,
        "help": "The origins the secret may be sent to, one a line (https://host[:port]).",
    },
)


@dataclass(frozen=True)
class Field:
    name: str
    kind: str
    required: bool = False
    help: str = ""
    choices: tuple[str, ...] = ()
    default: str = ""


def _kind_of(prop: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    options = [prop, *prop.get("anyOf", ())]
    types = {o.get("type") for o in options}
    enum = next((o["enum"] for o in options if "enum" in o), None)
    if enum:
        return CHOICE, tuple(str(e) for e in enum)
    if "integer" in types:
        return NUMBER, ()
    if "array" in types:
        return LINES, ()
    if "string" in types and not any("$ref" in o for o in options):
        return TEXT, ()
    return JSON, ()


def fields_of(kind: ConnectionKind) -> tuple[Field, ...]:
    """The config fields of ``kind``, in the order its schema declares them."""
    schema = kind.config_schema
    if schema is None:
        return tuple(Field(**f) for f in ORIGIN_FIELDS) if kind.http else ()
    required = set(schema.get("required", ()))
    fields = []
    for name, prop in schema.get("properties", {}).items():
        shape, choices = _kind_of(prop)
        default = prop.get("default")
        fields.append(
            Field(
                name=name,
                kind=shape,
                required=name in required,
                help=str(prop.get("description", "")).split("\n")[0],
                choices=choices,
                default="" if default is None else str(default),
            )
        )
    return tuple(fields)


def _value(field: Field, text: str) -> Any:
    if field.kind == NUMBER:
        return int(text) if text.lstrip("-").isdigit() else text
    if field.kind == LINES:
        return [line.strip() for line in text.splitlines() if line.strip()]
    if field.kind == JSON:
        return json_body.parse(text)
    return text


def config_of(kind: ConnectionKind, form: Mapping[str, str]) -> dict[str, Any]:
    """The config a submitted form gives (an empty field is left out; a JSON field that is
    not JSON is ``bad_json``)."""
    config: dict[str, Any] = {}
    for field in fields_of(kind):
        text = form.get(f"config.{field.name}", "").strip()
        if text:
            config[field.name] = _value(field, text)
    return config


def creation(kind: ConnectionKind, form: Mapping[str, str]) -> ConnectionCreate:
    """The body the API would take; a ``ValidationError`` (whose errors never hold the
    input) when the form is not one."""
    return ConnectionCreate.model_validate(
        {
            "type": kind.name,
            "name": form.get("name", ""),
            "secret": form.get("secret", ""),
            "config": config_of(kind, form),
        }
    )
