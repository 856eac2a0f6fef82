"""Large payloads live outside history: a content-addressed store behind Temporal's ExternalStorage.

Payloads at or above the threshold are written once under their sha256 and history keeps a small
reference, so a 3 MiB tool result neither fails Temporal's 2 MiB payload limit nor bloats the
history; the same content (a transcript message resent every turn, the same `state` query
answered twice) is stored once. A folder suits one machine; on a cluster use a shared folder or
a bucket (`WAYPOINT_STORE=s3://bucket/prefix`, `waypoint.stores.s3`), and give the worker and the
CLI the same one. The reference names only the content, never the folder or bucket.

References arrive from anyone with namespace access, so a claim is used only as a 64-hex name
under the store root, and a blob is returned only if its content matches the name
(`waypoint.stores.blobs`). A reference that fails either check decodes to a clear
`StoredPayloadError` where its value is used (`waypoint._security.refused`), never to a file read
outside the store or a hung worker.

With encryption keys, payloads below the threshold are encrypted by the payload codec as before;
larger ones reach the store in plaintext and the store seals them (AES-256-GCM, same keys) under
a keyed name. Sealing in the store rather than in the codec keeps content addressing working:
the codec's random nonce would make every copy of a payload a new blob.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    ExternalStorage,
    PayloadCodec,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from waypoint._security.refused import StorePayloadConverter, refused_payload
from waypoint._security.scrub import ScrubbingFailureConverter
from waypoint.protocol.plaintext import SEALED
from waypoint.stores.blobs import Backend, BlobStore, StoreRefusal

if TYPE_CHECKING:
    from waypoint.stores.sealing import Sealer

DEFAULT_THRESHOLD = 128 * 1024
CLAIM_KEY = "sha256"
"""The claim's only field: the blob's name (its sha256, or a keyed hash of it when sealed)."""

logger = logging.getLogger(__name__)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ContentAddressedDriver(StorageDriver):
    """Stores each payload once, in a folder or bucket, named by the sha256 of its bytes."""

    def __init__(self, root: Path | Backend, sealer: Sealer | None = None) -> None:
        self.blobs = BlobStore(root, sealer)
        self.sealed = sealer is not None

    def name(self) -> str:
        """Stable across versions: it is recorded in every reference."""
        return "waypoint-cas"

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        """Write the payloads that are not stored yet."""

        def put(payload: Payload) -> str:
            data = payload.SerializeToString()
            return self.blobs.put(_sha256(data), data, _sha256)

        names = await asyncio.to_thread(lambda: [put(p) for p in payloads])
        return [StorageDriverClaim(claim_data={CLAIM_KEY: n}) for n in names]

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        """Read payloads back by name; a refused claim yields a payload that fails to decode."""
        return await asyncio.to_thread(lambda: [self._read(c) for c in claims])

    def _read(self, claim: StorageDriverClaim) -> Payload:
        name = claim.claim_data.get(CLAIM_KEY, "")
        try:
            data = self.blobs.get(name, _sha256)
            if data is None:
                where = self.blobs.where()
                raise StoreRefusal(f"blob {name[:12]} is not in the payload store {where}")
            payload = Payload.FromString(data)
            if self.sealed:  # encrypted at rest and on its way: not a plaintext message
                payload.metadata[SEALED] = b"1"
            return payload
        except (StoreRefusal, ValueError) as err:  # ValueError: not a serialized payload
            reason = f"storage reference refused: {err}"
        logger.warning("%s", reason)
        return refused_payload(reason)

    def stored_bytes(self) -> int:
        """Total size of the store, for benchmarks and housekeeping."""
        return sum(e.size for e in self.blobs.entries())


ContentAddressedFileDriver = ContentAddressedDriver
"""Its name before the store could be a bucket."""


class _SmallPayloadCodec(PayloadCodec):
    """Encrypts payloads below the threshold; larger ones go to the store, which seals them."""

    def __init__(self, codec: PayloadCodec, threshold: int) -> None:
        self.codec = codec
        self.threshold = threshold

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Encrypt the small payloads, pass the ones the store will take."""
        return [
            p if p.ByteSize() >= self.threshold else (await self.codec.encode([p]))[0]
            for p in payloads
        ]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Decrypt whatever is encrypted, whichever way it travelled."""
        return await self.codec.decode(payloads)


def data_converter(
    store: Path | Backend | None,
    threshold: int = DEFAULT_THRESHOLD,
    encryption_keys: str | None = None,
) -> DataConverter:
    """The pydantic data converter, with large payloads in `store` when one is given.

    Args:
        store: Folder or bucket of the payload store; None keeps every payload inline.
        threshold: Payloads of at least this many bytes go to the store.
        encryption_keys: A `WAYPOINT_ENCRYPTION_KEYS` spec: encrypt every payload, inline by
            the codec and stored ones by the store.
    """
    # Every failure's text is scrubbed of credentials and request bodies
    # (`waypoint._security.scrub`).
    converter = dataclasses.replace(
        pydantic_data_converter, failure_converter_class=ScrubbingFailureConverter
    )
    sealer = None
    if store is not None:
        if encryption_keys:
            from waypoint.stores.sealing import sealer_from_spec

            sealer = sealer_from_spec(encryption_keys)
        storage = ExternalStorage(
            drivers=[ContentAddressedDriver(store, sealer)], payload_size_threshold=threshold
        )
        converter = dataclasses.replace(
            converter, payload_converter_class=StorePayloadConverter, external_storage=storage
        )
    if not encryption_keys:
        return converter
    # The codec turns a payload it cannot decrypt into a refusal marker that this converter reads.
    converter = dataclasses.replace(converter, payload_converter_class=StorePayloadConverter)
    from waypoint._security.codec import EncryptionCodec, encrypted_converter, load_keys

    codec = EncryptionCodec(*load_keys(encryption_keys))
    converter = encrypted_converter(converter, codec)
    if sealer is None:
        return converter
    return dataclasses.replace(converter, payload_codec=_SmallPayloadCodec(codec, threshold))
