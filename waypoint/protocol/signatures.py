"""Signed decisions, the part workflow code reads: the signature, the check, the signed bytes.

Key handling (`waypoint._security.signing`) imports `cryptography`; nothing here does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from waypoint.protocol.base import _unset
from waypoint.protocol.hashing import canonical_json

UNSIGNED_FIELDS = {"identity", "signature"}
"""Left out of what is signed: the client's self-given name, and the signature itself."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Signature(_Frozen):
    """A reviewer's signature over a decision (see `message`)."""

    signed_at: str
    """When it was signed, on the signer's clock (ISO 8601); part of what is signed."""
    value: str
    """The Ed25519 signature, base64."""


Signed = Annotated[Signature | None, Field(exclude_if=_unset)]
"""A sent verb's signature by its reviewer (`waypoint._security.signing`); required by
`signed_decisions` agents."""
DecisionId = Annotated[str, Field(exclude_if=_unset)]
"""Made by a verb's sender: a second arrival of the same id is a no-op, recorded as a duplicate
(an Update whose answer was lost, sent again as a signal)."""


class DecisionCheck(_Frozen):
    """What the `verify_decision` activity checks: the fields as signed, and the signature."""

    kind: str
    fields: dict[str, Any]
    signature: Signature
    chain: str = ""
    """The run's first execution run id (the same across continue-as-new, new for a rerun of
    the workflow id): a decision signed for one run cannot be replayed onto another."""
    max_age_seconds: float | None = None
    """A signature older than this (`Agent.decision_max_age`) is refused."""


class DecisionVerdict(_Frozen):
    """Whether the signature holds, and if not, why."""

    valid: bool
    reason: str = ""


def fields(payload: BaseModel) -> dict[str, Any]:
    """The decision's fields that are signed."""
    return payload.model_dump(mode="json", exclude=UNSIGNED_FIELDS)


def message(run: str, chain: str, kind: str, signed: Mapping[str, Any], signed_at: str) -> bytes:
    """The bytes a reviewer signs: the run and its chain, the kind of decision, its fields, when.

    The chain (the first execution run id) keeps a signature from verifying on a rerun.
    """
    body = {"waypoint": "decision/2", "run": run, "chain": chain, "kind": kind}
    return canonical_json({**body, "fields": dict(signed), "signed_at": signed_at}).encode()
