"""The transcript store: each message stored once, so a model step sends only what is new.

Messages form a chain: a node's key is `sha256(previous key + canonical JSON of the message)`,
the same hash the workflow keeps as `transcript_hash`. A model step names the chain head it
extends and carries only the messages after it, so history and payload store grow by the new
messages each turn, not by the whole conversation. A worker that lacks a node (a fresh machine
without the shared folder or bucket) answers `TranscriptMissing` and the workflow resends in
full.

Keys arrive in workflow payloads (`ModelRequest.prefix_hash`), so they are untrusted: a key that
is not 64 hex digits, an entry that is not a regular file, and a node whose content does not
hash to its key are all treated as missing, and the workflow resends. Nodes go through
`waypoint.stores.blobs` (atomic writes, 0600 files); with encryption keys they are sealed and
their file names are keyed hashes of the chain key.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio.exceptions import ApplicationError

from waypoint.protocol import Message
from waypoint.protocol.hashing import canonical_json, sha256_hex
from waypoint.protocol.vocabulary import TRANSCRIPT_MISSING
from waypoint.stores.blobs import Backend, BlobStore, StoreRefusal, is_digest

if TYPE_CHECKING:
    from waypoint.stores.sealing import Sealer


logger = logging.getLogger(__name__)


def _node(prev: str, body: str) -> bytes:
    return json.dumps({"prev": prev, "message": body}).encode()


def _chain_key(data: bytes) -> str:
    """The key a node's content claims: sha256(prev + message)."""
    node = json.loads(data)
    return sha256_hex(str(node["prev"]) + str(node["message"]))


class TranscriptStore:
    """Chain nodes in a folder or bucket shared by the workers, or in this process's memory."""

    def __init__(
        self,
        root: Path | Backend | None = None,
        cached_chains: int = 256,
        sealer: Sealer | None = None,
    ) -> None:
        self.blobs = BlobStore(root, sealer) if root is not None else None
        self._memory: dict[str, bytes] = {}
        # Recent chains decoded, by head: a model step usually extends the one before it.
        self._chains: OrderedDict[str, list[Message]] = OrderedDict()
        self._cached_chains = cached_chains
        self._lock = threading.Lock()  # model steps load and extend from worker threads

    def _remember(self, head: str, chain: list[Message]) -> None:
        with self._lock:
            self._chains[head] = chain
            self._chains.move_to_end(head)
            while len(self._chains) > self._cached_chains:
                self._chains.popitem(last=False)

    def _cached(self, head: str, count: int) -> list[Message] | None:
        with self._lock:
            chain = self._chains.get(head)
            if chain is None or len(chain) != count:
                return None
            self._chains.move_to_end(head)
            return list(chain)

    def _put(self, key: str, data: bytes) -> None:
        if self.blobs is None:
            self._memory[key] = data
        else:
            self.blobs.put(key, data, _chain_key)

    def _get(self, key: str) -> bytes | None:
        """The node stored under `key`, verified; None if absent, refused or altered."""
        if not is_digest(key):
            return None
        if self.blobs is None:
            return self._memory.get(key)
        for name in self.blobs.names(key):
            try:
                data = self.blobs.get(name, _chain_key)
            except (StoreRefusal, ValueError, KeyError) as err:  # ValueError: not JSON
                logger.warning("transcript node %s treated as missing: %s", key[:12], err)
                return None
            if data is not None:
                return data
        return None

    def names(self, head: str, count: int | None = None) -> list[str]:
        """File names of the chain ending at `head` that are in the store (for housekeeping)."""
        found: list[str] = []
        key = head
        while key and (count is None or len(found) < count):
            data = self._get(key)
            if data is None or self.blobs is None:
                break
            found.extend(self.blobs.names(key))
            key = json.loads(data)["prev"]
        return found

    def extend(
        self, head: str, messages: list[Message], prefix: list[Message] | None = None
    ) -> str:
        """Store the messages after `head` (whose chain is `prefix`, if known); the new head."""
        for message in messages:
            body = canonical_json(message)
            key = sha256_hex(head + body)
            self._put(key, _node(head, body))
            head = key
        if prefix is not None:
            self._remember(head, prefix + messages)
        return head

    def load(self, head: str, count: int) -> list[Message]:
        """The `count` messages ending at `head`, oldest first."""
        cached = self._cached(head, count)
        if cached is not None:
            return cached
        messages: list[Message] = []
        key = head
        for _ in range(count):
            data = self._get(key)
            if data is None:
                raise ApplicationError(
                    f"transcript node {key[:12]} is not in this worker's store",
                    type=TRANSCRIPT_MISSING,
                    non_retryable=True,
                )
            node = json.loads(data)
            messages.append(Message.model_validate_json(node["message"]))
            key = node["prev"]
        messages.reverse()
        if count:
            self._remember(head, messages)
        return list(messages)
