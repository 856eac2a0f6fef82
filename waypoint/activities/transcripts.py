"""The transcript store: each message stored once, so a model step sends only what is new.

Messages form a chain: a node's key is `sha256(previous key + canonical JSON of the message)`,
the same hash the workflow keeps as `transcript_hash`. A model step names the chain head it
extends and carries only the messages after it, so history and payload store grow by the new
messages each turn, not by the whole conversation. A worker that lacks a node (a fresh machine
without the shared folder) answers `TranscriptMissing` and the workflow resends in full.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from pathlib import Path

from temporalio.exceptions import ApplicationError

from waypoint.hashing import canonical_json, sha256_hex
from waypoint.models import Message

TRANSCRIPT_MISSING = "TranscriptMissing"


class TranscriptStore:
    """Chain nodes in a folder (shared by the workers), or in memory when no folder is given."""

    def __init__(self, root: Path | None = None, cached_chains: int = 256) -> None:
        self.root = root
        self._memory: dict[str, bytes] = {}
        # Recent chains decoded, by head: a model step usually extends the one before it.
        self._chains: OrderedDict[str, list[Message]] = OrderedDict()
        self._cached_chains = cached_chains

    def _remember(self, head: str, chain: list[Message]) -> None:
        self._chains[head] = chain
        self._chains.move_to_end(head)
        while len(self._chains) > self._cached_chains:
            self._chains.popitem(last=False)

    def _path(self, key: str) -> Path:
        assert self.root is not None
        return self.root / key[:2] / key

    def _put(self, key: str, data: bytes) -> None:
        if self.root is None:
            self._memory[key] = data
            return
        path = self._path(key)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)

    def _get(self, key: str) -> bytes | None:
        if self.root is None:
            return self._memory.get(key)
        path = self._path(key)
        return path.read_bytes() if path.exists() else None

    def extend(
        self, head: str, messages: list[Message], prefix: list[Message] | None = None
    ) -> str:
        """Store the messages after `head` (whose chain is `prefix`, if known); the new head."""
        for message in messages:
            body = canonical_json(message)
            key = sha256_hex(head + body)
            self._put(key, json.dumps({"prev": head, "message": body}).encode())
            head = key
        if prefix is not None:
            self._remember(head, prefix + messages)
        return head

    def load(self, head: str, count: int) -> list[Message]:
        """The `count` messages ending at `head`, oldest first."""
        cached = self._chains.get(head)
        if cached is not None and len(cached) == count:
            self._chains.move_to_end(head)
            return list(cached)
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
