"""Check a client's answer against its tool's JSON schema, with no I/O, so workflow code may.

An Update validator cannot call an activity, so an answer to a client-answered tool is checked in
the workflow itself. `jsonschema` does the checking (Draft 2020-12, what pydantic emits); it
resolves only the schema's own `$ref`s and never fetches one, and `format` is not asserted.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

MAX_PROBLEMS = 5
"""Enough to fix an answer by; a refusal message stays short."""


def problems(schema: dict[str, Any], value: Any) -> list[str]:
    """What is wrong with `value` under `schema`, as `path: problem` lines; empty if it fits."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as err:
        return [f"(schema): the tool's output schema is invalid: {err.message}"]
    errors = sorted(
        Draft202012Validator(schema).iter_errors(value), key=lambda e: list(map(str, e.path))
    )
    return [f"{_where(e.absolute_path)}: {e.message}" for e in errors[:MAX_PROBLEMS]]


def _where(path: Any) -> str:
    return ".".join(str(p) for p in path) or "(answer)"
