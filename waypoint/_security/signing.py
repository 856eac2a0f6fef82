"""Signed decisions: a reviewer's Ed25519 key signs what they decided; the worker verifies it.

Without signatures, "who decided" is what the sender wrote: `reviewer` is a payload field and
`identity` is whatever the sending Temporal client calls itself (`Client.identity`); Temporal
records that string in history unchecked, and temporalio 1.35 shows a workflow nothing else
about a signal's or update's sender (`workflow.UpdateInfo` holds only the update's id and name).
An agent with `signed_decisions=True` accepts a verb (any of `waypoint.protocol.verbs.VERBS`) only
when signed with the private key of the reviewer it names, checked against the public keys the
worker holds (`WAYPOINT_DECISION_KEYS`), never against anything in the payload. A signature
binds the run, the kind of decision, the step, the arguments hash, the verdict, the reviewer,
the decision id and the signing time; the decision id makes it count once.

The models and `message` are pure and live in `waypoint.protocol.signatures` (workflow code
imports them); key handling here imports `cryptography` inside its functions.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel

from waypoint._security import keyspecs
from waypoint.errors import DecisionKeyError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

from waypoint.protocol.signatures import (
    DecisionCheck,
    DecisionVerdict,
    Signature,
    fields,
    message,
)

KEY_BYTES = 32
P = TypeVar("P", bound=BaseModel)

# --- keys (cryptography imported here, never in workflow code) --------------------------------


def new_key() -> tuple[str, str]:
    """A fresh key pair as base64: (private, for the reviewer; public, for the workers)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes_raw()
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return base64.b64encode(private).decode(), base64.b64encode(public).decode()


def _raw(encoded: str, where: str) -> bytes:
    try:
        raw = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise DecisionKeyError(f"{where} is not valid base64") from None
    if len(raw) != KEY_BYTES:
        raise DecisionKeyError(f"{where} is {len(raw)} bytes; an Ed25519 key is {KEY_BYTES}")
    return raw


def load_private_key(spec: str) -> Ed25519PrivateKey:
    """A reviewer's signing key: base64 of its 32 bytes, or `@file` holding that.

    Raises:
        DecisionKeyError: It is unreadable or not a 32-byte base64 key (never echoed).
    """
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    what = "WAYPOINT_DECISION_KEY"
    text, source = keyspecs.spec_text(spec, what, f"{what} file", DecisionKeyError)
    return Ed25519PrivateKey.from_private_bytes(_raw(text, source))


def load_public_keys(spec: str) -> dict[str, Ed25519PublicKey]:
    """Reviewers' public keys: `reviewer:BASE64,...` or `@file` with one entry a line.

    Raises:
        DecisionKeyError: The spec is empty, unreadable, or an entry is malformed or repeated.
    """
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    what = "WAYPOINT_DECISION_KEYS"
    entries = keyspecs.entries(
        spec,
        source=what,
        file_source=f"{what} file",
        name="reviewer",
        form="reviewer:base64publickey",
        error=DecisionKeyError,
        names_hold_colons=True,
    )
    return {e.name: Ed25519PublicKey.from_public_bytes(_raw(e.encoded, e.where)) for e in entries}


def sign(
    key: Ed25519PrivateKey,
    run: str,
    chain: str,
    kind: str,
    payload: P,
    signed_at: datetime | None = None,
) -> P:
    """The payload signed for `run` (workflow id) of `chain` (`waypoint.client.verbs.chain_id`).

    `signed_at` defaults to now; tests pass an old time to see it refused.
    """
    at = (signed_at or datetime.now(UTC)).isoformat()
    value = key.sign(message(run, chain, kind, fields(payload), at))
    signature = Signature(signed_at=at, value=base64.b64encode(value).decode())
    return payload.model_copy(update={"signature": signature})


FUTURE_SKEW_SECONDS = 300.0
"""A signer's clock may run this far ahead of the worker's."""


def verify(keys: Mapping[str, Ed25519PublicKey], run: str, check: DecisionCheck) -> DecisionVerdict:
    """Whether the reviewer the decision names signed exactly it, for this run, recently."""
    from cryptography.exceptions import InvalidSignature

    reviewer = str(check.fields.get("reviewer", check.fields.get("sender", "")))  # an answer's
    signer = signer_of(reviewer, keys)
    key = keys.get(signer)
    if key is None:
        return DecisionVerdict(
            valid=False,
            reason=f"no public key for reviewer {signer!r} on the worker: add "
            f"'{signer}:PUBLICKEY' to its WAYPOINT_DECISION_KEYS (see `waypoint decision-key`)",
        )
    signed_at = check.signature.signed_at
    try:
        value = base64.b64decode(check.signature.value, validate=True)
        key.verify(value, message(run, check.chain, check.kind, check.fields, signed_at))
    except (binascii.Error, ValueError, InvalidSignature):
        return DecisionVerdict(
            valid=False,
            reason=f"the signature does not verify with the public key of reviewer {reviewer!r} "
            f"for this {check.kind} of this run: sign with that reviewer's "
            "WAYPOINT_DECISION_KEY and send the decision unaltered (a decision signed for "
            "another run under the same id never verifies here)",
        )
    return _fresh(signed_at, check)


VIA = " via "
"""`alice via console`: a person a signer (the console) signed in, vouched for by its key."""


def signer_of(reviewer: str, keys: Mapping[str, object]) -> str:
    """Whose key must have signed a decision naming `reviewer`.

    The reviewer's own, or for `alice via console` (and no key of that exact name) the key of
    `console`: it vouches for the person it signed in, and the ledger records both names, so a
    key can speak for others only under its own name.
    """
    if reviewer in keys or VIA not in reviewer:
        return reviewer
    return reviewer.rpartition(VIA)[2]


def _fresh(signed_at: str, check: DecisionCheck) -> DecisionVerdict:
    """Refuse a signature older than the agent allows, or from the signer's future."""
    try:
        when = datetime.fromisoformat(signed_at)
    except ValueError:
        return DecisionVerdict(valid=False, reason=f"signed_at {signed_at!r} is not a time")
    if when.tzinfo is None:
        return DecisionVerdict(valid=False, reason=f"signed_at {signed_at!r} has no time zone")
    age = (datetime.now(UTC) - when).total_seconds()
    if age < -FUTURE_SKEW_SECONDS:
        return DecisionVerdict(
            valid=False,
            reason=f"the {check.kind} was signed {-age:.0f}s in the future of this worker's "
            "clock: check the signer's clock, then sign again",
        )
    if check.max_age_seconds is not None and age > check.max_age_seconds:
        return DecisionVerdict(
            valid=False,
            reason=f"the {check.kind} was signed {age:.0f}s ago, longer than this agent accepts "
            f"({check.max_age_seconds:.0f}s, Agent.decision_max_age): sign it again",
        )
    return DecisionVerdict(valid=True)
