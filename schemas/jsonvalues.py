"""JSON Schema for the free-form JSON values Moat takes, stating the rules the code checks
on them, so that the published contract says what the server enforces.

- ``CanonicalJson``: a value RFC 8785 can canonicalize (its integers within
  ±(2^53 - 1)): every part of an execute request's input is hashed in that form.
- ``StorableJson``: a value Postgres stores as it is (no NUL in any text, keys included)
  and that names no secret by its keys (the redaction deny-list, case-insensitive).

Each is referenced as ``#/$defs/<name>`` from a model's schema; ``with_defs`` adds the
definitions a schema uses. Depth limits are not stated here: JSON Schema has no word for
"at most N levels" short of spelling out N nested copies.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, WithJsonSchema
from pydantic.config import JsonDict

from schemas.redaction import REDACTED_KEY_PATTERNS

MAX_SAFE_INTEGER = 2**53 - 1
CANONICAL_JSON = "CanonicalJson"
STORABLE_JSON = "StorableJson"
DEFS = "#/$defs/"

# Text Postgres can hold: no NUL (a lone surrogate cannot be sent as UTF-8 JSON at all).
STORABLE_TEXT_PATTERN = r"^[^\u0000]*$"


def _case_insensitive(word: str) -> str:
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else _escaped(c) for c in word)


def _escaped(c: str) -> str:
    return "\\" + c if c in r"\^$.|?*+()[]{}-" else c


# A key that holds one of the deny-list's words names a secret (``is_secret_key``).
SECRET_KEY_PATTERN = "|".join(_case_insensitive(w) for w in REDACTED_KEY_PATTERNS)


def _json_value(ref: str, string: dict[str, Any], integer: dict[str, Any]) -> dict[str, Any]:
    item = {"$ref": DEFS + ref}
    return {
        "anyOf": [
            {"type": "null"},
            {"type": "boolean"},
            {"type": "string", **string},
            {"type": "integer", **integer},
            {"type": "number", "not": {"type": "integer"}},
            {"type": "array", "items": item},
            {"type": "object", "additionalProperties": item, "propertyNames": string},
        ]
    }


DEFINITIONS: dict[str, dict[str, Any]] = {
    CANONICAL_JSON: {
        "description": "Any JSON value RFC 8785 can canonicalize: integers within "
        "±(2^53 - 1), at any depth.",
        **_json_value(
            CANONICAL_JSON, {}, {"minimum": -MAX_SAFE_INTEGER, "maximum": MAX_SAFE_INTEGER}
        ),
    },
    STORABLE_JSON: {
        "description": "Any JSON value Postgres stores as it is (no NUL in any text, keys "
        "included) whose keys name no secret (no key holding authorization, token, "
        "secret, password, … in any case).",
        **_json_value(STORABLE_JSON, {"pattern": STORABLE_TEXT_PATTERN}, {}),
    },
}
DEFINITIONS[STORABLE_JSON]["anyOf"][-1]["propertyNames"] = {
    "pattern": STORABLE_TEXT_PATTERN,
    "not": {"pattern": SECRET_KEY_PATTERN},
}

# In a model, where a value is one of these: pydantic writes the marker, ``model_schema``
# turns it into the reference (pydantic follows every ``$ref`` it writes as one of its own).
_MARKER = "x-moat-json"


def marker(name: str) -> JsonDict:
    return {_MARKER: name}


CanonicalAny = Annotated[Any, WithJsonSchema(marker(CANONICAL_JSON))]


def _resolved(node: Any) -> Any:
    if isinstance(node, dict):
        if _MARKER in node:
            rest = {k: v for k, v in node.items() if k != _MARKER}
            return {"$ref": DEFS + node[_MARKER], **rest}
        return {k: _resolved(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolved(v) for v in node]
    return node


def with_defs(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with markers made references, and the definitions of this module it
    references in its ``$defs``."""
    schema = _resolved(schema)
    text = json.dumps(schema)
    used = {name: d for name, d in DEFINITIONS.items() if f'"{DEFS}{name}"' in text}
    if not used:
        return dict(schema)
    return {**schema, "$defs": {**schema.get("$defs", {}), **used}}


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A model's JSON Schema (as validated: its input), with this module's definitions."""
    return with_defs(model.model_json_schema())
