"""Large payloads live outside history: a content-addressed store behind Temporal's ExternalStorage.

Payloads at or above the threshold are written once under their sha256 and history keeps a small
reference, so a 3 MiB tool result neither fails Temporal's 2 MiB payload limit nor bloats the
history; the same content (a transcript message resent every turn) is stored once. The local
filesystem driver suits one machine; on a cluster use a shared driver such as the contrib S3
driver (`temporalio.contrib.aws`), and give the worker and the CLI the same one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

DEFAULT_THRESHOLD = 128 * 1024


class ContentAddressedFileDriver(StorageDriver):
    """Stores each payload once, at `root/ab/abcdef...` named by the sha256 of its bytes."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def name(self) -> str:
        """Stable across versions: it is recorded in every reference."""
        return "waypoint-cas"

    def _path(self, digest: str) -> Path:
        return self.root / digest[:2] / digest

    def _write(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        path = self._path(digest)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)  # atomic: readers never see half a payload
        return digest

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        """Write the payloads that are not stored yet."""
        digests = await asyncio.to_thread(
            lambda: [self._write(p.SerializeToString()) for p in payloads]
        )
        return [StorageDriverClaim(claim_data={"sha256": d}) for d in digests]

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        """Read payloads back by digest."""

        def read(claim: StorageDriverClaim) -> Payload:
            payload = Payload()
            payload.ParseFromString(self._path(claim.claim_data["sha256"]).read_bytes())
            return payload

        return await asyncio.to_thread(lambda: [read(c) for c in claims])

    def stored_bytes(self) -> int:
        """Total size of the store, for benchmarks and housekeeping."""
        if not self.root.exists():
            return 0
        return sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file())


def data_converter(store: Path | None, threshold: int = DEFAULT_THRESHOLD) -> DataConverter:
    """The pydantic data converter, with large payloads in `store` when one is given."""
    if store is None:
        return pydantic_data_converter
    storage = ExternalStorage(
        drivers=[ContentAddressedFileDriver(store)], payload_size_threshold=threshold
    )
    return dataclasses.replace(pydantic_data_converter, external_storage=storage)
