"""`verify_decision`: check a reviewer's signature against the public keys this worker holds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from temporalio import activity

from waypoint._security.signing import verify
from waypoint.protocol.signatures import DecisionCheck, DecisionVerdict

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


class DecisionActivities:
    """Holds the reviewers' public keys (`WAYPOINT_DECISION_KEYS`); payloads never carry keys."""

    def __init__(self, keys: Mapping[str, Ed25519PublicKey]) -> None:
        self.keys = dict(keys)

    @activity.defn(name="waypoint.verify_decision")
    async def verify_decision(self, check: DecisionCheck) -> DecisionVerdict:
        """Whether the reviewer the decision names signed it, for the run asking (Temporal's id)."""
        run = activity.info().workflow_id
        assert run is not None  # only workflows ask
        return verify(self.keys, run, check)
