"""Canonical JSON and sha256: pure helpers the workflow uses for step input hashes."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel


def canonical_json(value: Any) -> str:
    """Serialize with sorted keys and no whitespace so equal inputs hash equally."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def keyed_sha256_hex(salt: str, value: Any) -> str:
    """`sha256_hex` with a secret salt, so a hash in history cannot confirm a guessed input.

    An empty salt (runs started before salting) gives the plain hash.
    """
    if not salt:
        return sha256_hex(value)
    text = value if isinstance(value, str) else canonical_json(value)
    return hashlib.sha256(f"{salt}\x00{text}".encode()).hexdigest()


def sha256_hex(value: Any) -> str:
    """The sha256 of a value's canonical JSON (strings are hashed as they are)."""
    text = value if isinstance(value, str) else canonical_json(value)
    return hashlib.sha256(text.encode()).hexdigest()
