"""Forms made from a JSON schema: an answer's (a client-answered tool's output) and a start's.

Each top-level property becomes one labelled input (text, a number, a choice, a checkbox, or
JSON for what a form field cannot hold), and what comes back is read into the value the schema
describes, or refused with a message per field. The run (or the client) checks the value
against the schema again: a form is a convenience, never the check.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

PREFIX = "a."
"""Form field names are the schema's, prefixed: nothing clashes with `csrf` or `step_id`."""


class FormError(ValueError):
    """What in a form does not read as its schema says, one line per field."""


@dataclass(frozen=True)
class Field:
    """One input of a form."""

    name: str
    label: str
    help: str
    widget: Literal["text", "textarea", "number", "checkbox", "select", "json"]
    required: bool
    options: tuple[str, ...] = ()
    step: str = ""
    """For a number: `1` for integers, `any` otherwise."""
    default: str = ""

    @property
    def input_name(self) -> str:
        """The form field's name."""
        return PREFIX + self.name


def _resolved(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    """A property's schema with a local `$ref` followed and an optional (`| None`) unwrapped."""
    ref = schema.get("$ref", "")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        schema = {**root.get("$defs", {}).get(ref.split("/")[-1], {}), **schema}
    options = [s for s in schema.get("anyOf", []) if s.get("type") != "null"]
    if len(options) == 1:
        schema = {**schema, **_resolved(options[0], root)}
    return schema


def fields(schema: Mapping[str, Any] | None) -> list[Field]:
    """The inputs of a form for `schema`: one per property, or one JSON input for the whole."""
    if not schema or schema.get("type") != "object" or not schema.get("properties"):
        help_ = "a JSON value that fits the schema shown"
        return [Field("", "Answer (JSON)", help_, "json", True)]
    required = set(schema.get("required", []))
    made = []
    for name, raw in schema["properties"].items():
        prop = _resolved(raw, schema)
        kind, enum = (
            prop.get("type"),
            prop.get("enum") or ([prop["const"]] if "const" in prop else None),
        )
        default = prop.get("default")
        shown = "" if default is None else str(default)
        common = {
            "name": name,
            "label": str(prop.get("title") or name.replace("_", " ").capitalize()),
            "help": str(prop.get("description", "")),
            "required": name in required,
            "default": shown.lower() if kind == "boolean" else shown,
        }
        if enum and all(isinstance(v, str) for v in enum):
            made.append(Field(widget="select", options=tuple(enum), **common))
        elif kind == "boolean":
            made.append(Field(widget="checkbox", **{**common, "required": False}))
        elif kind in ("integer", "number"):
            made.append(Field(widget="number", step="1" if kind == "integer" else "any", **common))
        elif kind == "string":
            long = prop.get("format") == "multiline" or int(prop.get("maxLength", 0)) > 500
            made.append(Field(widget="textarea" if long else "text", **common))
        else:
            made.append(Field(widget="json", **{**common, "help": common["help"] or "JSON"}))
    return made


def parse(schema: Mapping[str, Any] | None, form: Mapping[str, str]) -> Any:
    """The value a submitted form holds for `schema`.

    A blank optional input is left out; a blank required one, a number that is not one, or
    JSON that does not read is refused.

    Raises:
        FormError: One line per input that does not read.
    """
    value: dict[str, Any] = {}
    problems: list[str] = []
    for field in fields(schema):
        given = form.get(field.input_name, "")
        if field.widget == "checkbox":
            value[field.name] = given in ("on", "true", "1")
            continue
        if not given.strip():
            if field.required:
                problems.append(f"{field.label}: required")
            continue
        try:
            value[field.name] = _read(field, given)
        except ValueError as err:
            problems.append(f"{field.label}: {err}")
    if problems:
        raise FormError("; ".join(problems))
    return value.get("", value) if list(value) == [""] else value


def _read(field: Field, given: str) -> Any:
    if field.widget == "number":
        try:
            number = float(given)
        except ValueError:
            raise ValueError(f"{given[:40]!r} is not a number") from None
        if field.step == "1":
            if not number.is_integer():
                raise ValueError(f"{given[:40]!r} is not a whole number")
            return int(number)
        return number
    if field.widget == "json":
        try:
            return json.loads(given)
        except json.JSONDecodeError as err:
            raise ValueError(f"not JSON ({err.msg} at character {err.pos})") from None
    if field.widget == "select" and given not in field.options:
        raise ValueError(f"choose one of {', '.join(field.options)}")
    return given
