"""Check a client's answer against a JSON schema, in pure Python the workflow may run.

An Update validator cannot call an activity, so an answer to a client-answered tool is checked
in the workflow itself: no I/O, no imports beyond the standard library, deterministic. It covers
what pydantic's `model_json_schema` emits (types, properties, required, extra properties,
items, enums, consts, `anyOf`/`oneOf`/`allOf`, local `$ref`s, string, number and array bounds);
keywords it does not know (`format`, `title`, `default`, ...) are accepted, never guessed at.
"""

from __future__ import annotations

import re
from typing import Any

MAX_PROBLEMS = 5
"""Enough to fix an answer by; a refusal message stays short."""

_TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


def problems(schema: dict[str, Any], value: Any) -> list[str]:
    """What is wrong with `value` under `schema`, as `path: problem` lines; empty if it fits."""
    found: list[str] = []
    _check(schema, value, "(answer)", schema, found)
    return found[:MAX_PROBLEMS]


def _is(kind: str, value: Any) -> bool:
    if isinstance(value, bool):  # an int subclass in Python, never a number in JSON
        return kind == "boolean"
    if kind == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if kind == "number":
        return isinstance(value, int | float)
    expected = _TYPES.get(kind)
    return expected is None or isinstance(value, expected)


def _resolve(ref: str, root: dict[str, Any]) -> dict[str, Any] | None:
    if not ref.startswith("#/"):
        return None
    node: Any = root
    for part in ref[2:].split("/"):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, dict) else None


def _fits(schema: dict[str, Any], value: Any, root: dict[str, Any]) -> bool:
    found: list[str] = []
    _check(schema, value, "", root, found)
    return not found


def _check(
    schema: dict[str, Any], value: Any, path: str, root: dict[str, Any], found: list[str]
) -> None:
    if "$ref" in schema:
        target = _resolve(str(schema["$ref"]), root)
        if target is None:
            found.append(f"{path}: the schema's $ref {schema['$ref']!r} cannot be followed")
            return
        _check(target, value, path, root, found)
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_is(str(k), value) for k in kinds):
            found.append(f"{path}: expected {' or '.join(map(str, kinds))}, got {_name(value)}")
            return
    if "const" in schema and value != schema["const"]:
        found.append(f"{path}: must be {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{path}: must be one of {', '.join(map(repr, schema['enum']))}")
    for key in ("anyOf", "oneOf"):
        if key in schema and not any(_fits(s, value, root) for s in schema[key]):
            found.append(f"{path}: fits none of the allowed shapes")
    for sub in schema.get("allOf", []):
        _check(sub, value, path, root, found)
    if isinstance(value, dict):
        _object(schema, value, path, root, found)
    elif isinstance(value, list):
        _array(schema, value, path, root, found)
    elif isinstance(value, str):
        _string(schema, value, path, found)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _number(schema, value, path, found)


def _object(
    schema: dict[str, Any], value: dict[str, Any], path: str, root: dict[str, Any], found: list[str]
) -> None:
    properties: dict[str, Any] = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in value:
            found.append(f"{_at(path, name)}: missing")
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            _check(properties[name], item, _at(path, name), root, found)
        elif extra is False:
            found.append(f"{_at(path, name)}: not allowed")
        elif isinstance(extra, dict):
            _check(extra, item, _at(path, name), root, found)


def _array(
    schema: dict[str, Any], value: list[Any], path: str, root: dict[str, Any], found: list[str]
) -> None:
    if "minItems" in schema and len(value) < schema["minItems"]:
        found.append(f"{path}: needs at least {schema['minItems']} items")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        found.append(f"{path}: allows at most {schema['maxItems']} items")
    prefix: list[Any] = schema.get("prefixItems", [])
    for i, item in enumerate(value):
        sub = prefix[i] if i < len(prefix) else schema.get("items")
        if isinstance(sub, dict):
            _check(sub, item, f"{path}[{i}]", root, found)


def _string(schema: dict[str, Any], value: str, path: str, found: list[str]) -> None:
    if "minLength" in schema and len(value) < schema["minLength"]:
        found.append(f"{path}: needs at least {schema['minLength']} characters")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        found.append(f"{path}: allows at most {schema['maxLength']} characters")
    if "pattern" in schema and re.search(str(schema["pattern"]), value) is None:
        found.append(f"{path}: does not match {schema['pattern']!r}")


def _number(schema: dict[str, Any], value: float, path: str, found: list[str]) -> None:
    bounds = (
        ("minimum", lambda b: value >= b, ">="),
        ("maximum", lambda b: value <= b, "<="),
        ("exclusiveMinimum", lambda b: value > b, ">"),
        ("exclusiveMaximum", lambda b: value < b, "<"),
    )
    for key, ok, sign in bounds:
        if key in schema and not ok(schema[key]):
            found.append(f"{path}: must be {sign} {schema[key]}")
    step = schema.get("multipleOf")
    if step and (value / step) % 1:
        found.append(f"{path}: must be a multiple of {step}")


def _at(path: str, name: str) -> str:
    return name if path in ("", "(answer)") else f"{path}.{name}"


def _name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {dict: "object", list: "array", str: "string", int: "integer", float: "number"}.get(
        type(value), type(value).__name__
    )
