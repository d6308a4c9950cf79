"""Can a reader's JSON Schema read everything a writer's JSON Schema allows?

A small answer for the shapes pydantic and FastAPI emit (objects, arrays, scalars, enums,
nullable unions, ``$ref``), enough to tell whether the client's models still read the
gateway's answers: every field the reader declares must exist in the writer's schema, be
required there if the reader requires it, and carry values the reader accepts. Fields only
the writer has are fine: the client keeps them without reading them.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

_CONSTRAINTS = ("type", "anyOf", "oneOf", "allOf", "enum", "const", "properties", "items", "$ref")
_JSON_TYPES = {str: "string", bool: "boolean", int: "integer", float: "number"}


def _resolve(root: Schema, node: Schema) -> Schema:
    while True:
        if "$ref" in node:
            target: Any = root
            for part in node["$ref"].removeprefix("#/").split("/"):
                target = target[part]
            node = target
        elif len(node.get("allOf", ())) == 1:
            node = node["allOf"][0]
        else:
            return node


def _accepts_anything(node: Schema) -> bool:
    return not any(key in node for key in _CONSTRAINTS)


def _values(node: Schema) -> set[Any] | None:
    if "enum" in node:
        return set(node["enum"])
    if "const" in node:
        return {node["const"]}
    return None


def _types(node: Schema) -> set[str]:
    if "type" in node:
        kind = node["type"]
        return set(kind) if isinstance(kind, list) else {kind}
    values = _values(node)
    if values is not None:
        return {_JSON_TYPES.get(type(value), "null") for value in values}
    if "properties" in node:
        return {"object"}
    return set()


class Reads:
    """``Reads(reader_doc, writer_doc).problems(reader, writer, where)``: what the reader
    cannot read of what the writer may send, one line per problem, named by field path."""

    def __init__(self, reader_doc: Schema, writer_doc: Schema) -> None:
        self._reader_doc = reader_doc
        self._writer_doc = writer_doc

    def problems(self, reader: Schema, writer: Schema, where: str) -> list[str]:
        reader = _resolve(self._reader_doc, reader)
        writer = _resolve(self._writer_doc, writer)
        if _accepts_anything(reader):
            return []
        reader_null, readers = self._variants(self._reader_doc, reader)
        writer_null, writers = self._variants(self._writer_doc, writer)
        found = []
        if writer_null and not reader_null:
            found.append(f"{where}: the gateway may send null, the client does not accept it")
        for variant in writers:
            if not readers:
                found.append(f"{where}: the client reads only null")
                break
            attempts = [self._one(candidate, variant, where) for candidate in readers]
            if all(attempts):
                found += attempts[0]
        return found

    @staticmethod
    def _variants(doc: Schema, node: Schema) -> tuple[bool, list[Schema]]:
        """Whether null is allowed, and the other alternatives."""
        options = node.get("anyOf") or node.get("oneOf")
        if options is None:
            return _types(node) == {"null"}, [] if _types(node) == {"null"} else [node]
        resolved = [_resolve(doc, option) for option in options]
        others = [option for option in resolved if _types(option) != {"null"}]
        return len(others) < len(resolved), others

    def _one(self, reader: Schema, writer: Schema, where: str) -> list[str]:
        if _accepts_anything(reader):
            return []
        readable, sent = _types(reader), _types(writer)
        if not sent:
            return [f"{where}: the gateway may send any value, the client reads {sorted(readable)}"]
        unreadable = {t for t in sent if t not in readable} - (
            {"integer"} if "number" in readable else set()
        )
        if unreadable:
            return [
                f"{where}: the gateway sends {sorted(sent)}, the client reads {sorted(readable)}"
            ]
        found = []
        if "format" in reader and reader["format"] != writer.get("format"):
            found.append(
                f"{where}: the client reads format {reader['format']!r}, "
                f"the gateway sends {writer.get('format', 'no format')!r}"
            )
        known = _values(reader)
        if known is not None:
            values = _values(writer)
            if values is None:
                found.append(
                    f"{where}: the client knows only {sorted(known)}, the gateway may send any"
                )
            elif values - known:
                found.append(
                    f"{where}: the gateway may send {sorted(values - known)}, unknown to the client"
                )
        if "properties" in reader:
            fields = writer.get("properties", {})
            required = set(writer.get("required", ()))
            for name, field in reader["properties"].items():
                at = f"{where}.{name}"
                if name not in fields:
                    found.append(
                        f"{at}: the client reads it, the gateway's schema has no such field"
                    )
                    continue
                if name in reader.get("required", ()) and name not in required:
                    found.append(f"{at}: the client requires it, the gateway's schema does not")
                found += self.problems(field, fields[name], at)
        if "items" in reader:
            found += self.problems(reader["items"], writer.get("items", {}), f"{where}[]")
        additional = reader.get("additionalProperties")
        if isinstance(additional, dict):
            found += self.problems(
                additional, writer.get("additionalProperties", {}), f"{where}{{}}"
            )
        return found
