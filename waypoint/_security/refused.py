"""What a refused storage reference decodes to: a clear error where the value is used, no hang.

A driver cannot raise from `retrieve` without harming the run: in a workflow activation a plain
error fails the workflow task on every retry (the bad signal stays in history, so the run is
stuck for good) and a non-retryable `ApplicationError` fails the whole run (temporalio 1.35,
`worker/_workflow.py`). So the driver answers a refused or unverifiable reference with this
marker payload instead, and the payload converter raises `StoredPayloadError` where the value is
decoded: a signal carrying it is dropped (logged) and the run keeps waiting, an update is
rejected, a client sees the error, and an activity result carrying it fails the workflow task
(retried, so a blob restored to the shared folder lets the run go on).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import CompositePayloadConverter, EncodingPayloadConverter

from waypoint._security import plaintext
from waypoint.errors import StoredPayloadError

REFUSED_ENCODING = "binary/waypoint-refused-reference"


def refused_payload(reason: str) -> Payload:
    """The marker payload standing in for a reference the store refused."""
    return Payload(metadata={"encoding": REFUSED_ENCODING.encode()}, data=reason.encode())


class RefusedPayloadConverter(EncodingPayloadConverter):
    """Never encodes; decoding a refused reference raises `StoredPayloadError` with the reason."""

    @property
    def encoding(self) -> str:
        """See base class."""
        return REFUSED_ENCODING

    def to_payload(self, value: Any) -> Payload | None:
        """See base class: values are never encoded this way."""
        return None

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        """See base class: always raises."""
        raise StoredPayloadError(payload.data.decode(errors="replace"))


@functools.cache
def _converters() -> tuple[EncodingPayloadConverter, ...]:
    return (RefusedPayloadConverter(), *PydanticPayloadConverter().converters.values())


class StorePayloadConverter(CompositePayloadConverter):
    """The pydantic payload converter that also explains refused storage references.

    Built from one shared set of converters: with external storage, Temporal makes a new data
    converter, and so a new payload converter, for almost every payload it stores or reads
    (`dataclasses.replace` in `DataConverter.with_context` and `_with_store_context`). A fresh
    pydantic converter would also start with an empty cache of type adapters, rebuilt on
    every activity result; shared, they are built once per process.
    """

    def __init__(self) -> None:
        super().__init__(*_converters())

    def from_payloads(
        self, payloads: Sequence[Payload], type_hints: list[type] | None = None
    ) -> list[Any]:
        """See base class; a person's message from an unencrypted payload is tagged so."""
        values = super().from_payloads(payloads, type_hints)
        return [plaintext.tag(v, p) for v, p in zip(values, payloads, strict=True)]
