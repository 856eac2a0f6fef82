"""How a run tells a message that reached an encrypting worker unencrypted.

Plain reads of what the codec and the payload converter left behind
(`waypoint._security.plaintext`), for workflow code.
"""

from __future__ import annotations

from typing import Any

MARK = "waypoint-plaintext"
"""Metadata the codec adds, in memory only, to a payload it found unencrypted."""
SEALED = "waypoint-sealed"
"""Metadata the payload store adds, in memory only, to a payload it read back from a sealed
blob: encrypted on its way, though the codec sees it in the clear."""
REFUSED = (
    "unencrypted payload refused: this run accepts decisions only from clients holding its "
    "encryption keys (WAYPOINT_ENCRYPTION_KEYS; WAYPOINT_REFUSE_PLAINTEXT=0 on the worker "
    "accepts them in new runs)"
)


def marked(payload: Any) -> bool:
    """Whether the codec found `payload` (a `temporalio.api.common.v1.Payload`) unencrypted."""
    return payload.metadata.get(MARK) == b"1"


def arrived_plain(value: object) -> bool:
    """Whether a person's message was decoded from an unencrypted payload."""
    return bool(getattr(value, "_plaintext", False))
