"""Which payloads reached an encrypting process unencrypted, so a run can refuse what they ask.

With keys set, every client Waypoint builds encrypts what it sends; a signal or update that
arrives in plain text came from a client without the keys: anyone with namespace access
(`temporal workflow signal`). The codec marks such a payload when it decodes it (`mark`, in
memory only: history keeps the bytes sent), the payload converter tags a person's message
decoded from one (`tag`), and a run whose spec says `refuse_plaintext` refuses it, recorded
(`waypoint.protocol.plaintext`). Marking happens on replay too, from the same bytes, so the
refusal replays.
"""

from __future__ import annotations

from typing import Any

from temporalio.api.common.v1 import Payload

from waypoint.protocol.plaintext import MARK, SEALED, marked


def mark(payload: Payload) -> Payload:
    """A copy of `payload` that says it arrived unencrypted.

    One the store read back from a sealed blob is returned as it is: it travelled encrypted.
    """
    if payload.metadata.get(SEALED) == b"1":
        return payload
    copy = Payload()
    copy.CopyFrom(payload)
    copy.metadata[MARK] = b"1"
    return copy


def tag(value: Any, payload: Payload) -> Any:
    """`value`, remembering it came from a marked payload if it is a person's message."""
    if marked(payload) and hasattr(value, "_plaintext"):
        value._plaintext = True
    return value
