"""Housekeeping: delete stored blobs no open run references, once older than a retention period.

Policy (what `collect_garbage` keeps):
- every blob written or reused less than `older_than` ago, whoever wrote it (a `put` that
  finds the blob already there renews its age, and gc checks the age again as it deletes):
  covers blobs written or reused for a step whose result is not in history yet, and closed
  runs whose history may still be read (set `older_than` to at least the namespace retention
  to keep `waypoint result` working on them);
- every payload blob an open run's history references (its `ExternalStorageReference`s are
  read from the history itself, so a run parked for weeks keeps its inputs);
- every transcript node on the chain of an open run (found through its `state` query). A node
  lost anyway (a run no worker could answer for) only costs that run one full resend.
Open runs are those `ExecutionStatus = 'Running'` lists. `waypoint gc` calls `collect_garbage`
with the stores `waypoint.settings` names.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.api.common.v1 import Payload
from temporalio.api.sdk.v1 import ExternalStorageReference
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError

from waypoint.protocol import AgentState
from waypoint.stores.blobs import Backend, BlobStore, is_digest

if TYPE_CHECKING:
    from google.protobuf.message import Message as ProtoMessage

    from waypoint.stores.transcripts import TranscriptStore

OPEN_RUNS = "ExecutionStatus = 'Running'"
QUERY_TIMEOUT = timedelta(seconds=10)
_REFERENCE_TYPE = ExternalStorageReference.DESCRIPTOR.full_name.encode()
_PAYLOAD_TYPE = Payload.DESCRIPTOR.full_name

logger = logging.getLogger(__name__)


@dataclass
class GcResult:
    """What one pass over one store did."""

    kept: int = 0
    deleted: int = 0
    freed_bytes: int = 0
    kept_bytes: int = 0


def gc(store_root: Path | BlobStore, referenced: set[str], older_than: timedelta) -> GcResult:
    """Delete blobs in a store (folder or `BlobStore`) not in `referenced`, older than `older_than`.

    Temporary files a crashed writer left behind go too once older than the same period.
    """
    result = GcResult()
    cutoff = time.time() - older_than.total_seconds()
    store = store_root if isinstance(store_root, BlobStore) else BlobStore(store_root)
    for entry in list(store.entries(temp_grace=older_than.total_seconds())):
        doomed = entry.temporary or (entry.name not in referenced and entry.mtime < cutoff)
        if doomed and store.delete(entry, cutoff):
            result.deleted += 1
            result.freed_bytes += entry.size
        elif not entry.temporary:  # a temporary file is never counted as kept
            result.kept += 1
            result.kept_bytes += entry.size
    return result


def payload_references(message: ProtoMessage, found: set[str] | None = None) -> set[str]:
    """Every payload-store name an `ExternalStorageReference` inside `message` claims."""
    found = set() if found is None else found
    if message.DESCRIPTOR.full_name == _PAYLOAD_TYPE:
        payload: Any = message
        if payload.metadata.get("messageType") == _REFERENCE_TYPE:
            try:
                name = json.loads(payload.data).get("claimData", {}).get("sha256")
            except (ValueError, AttributeError):
                name = None
            if isinstance(name, str) and is_digest(name):
                found.add(name)
        return found
    for descriptor, value in message.ListFields():
        if descriptor.message_type is None:
            continue
        if descriptor.message_type.GetOptions().map_entry:
            values: Iterable[Any] = value.values()
            if descriptor.message_type.fields_by_name["value"].message_type is None:
                continue
        elif hasattr(value, "ListFields"):
            values = [value]
        else:
            values = value
        for item in values:
            payload_references(item, found)
    return found


@dataclass
class References:
    """What open runs still need."""

    payloads: set[str] = field(default_factory=set)
    transcripts: set[str] = field(default_factory=set)
    runs: int = 0


async def open_run_references(
    client: Client, transcripts: TranscriptStore | None = None, query: str = OPEN_RUNS
) -> References:
    """Payload names in open runs' histories, and transcript names on their chains."""
    refs = References()
    async for run in client.list_workflows(query):
        refs.runs += 1
        handle = client.get_workflow_handle(run.id, run_id=run.run_id)
        async for event in handle.fetch_history_events():
            payload_references(event, refs.payloads)
        if transcripts is None or run.workflow_type != "AgentWorkflow":
            continue
        try:
            state = await handle.query("state", result_type=AgentState, rpc_timeout=QUERY_TIMEOUT)
        except (RPCError, WorkflowQueryFailedError) as err:
            # No worker up: the run resends its transcript later if its nodes are gone.
            logger.warning("run %s did not answer its state query: %s", run.id, err)
            continue
        refs.transcripts.update(transcripts.names(state.stored_hash))
    return refs


async def collect_garbage(
    client: Client,
    payload_store: Path | Backend | None,
    transcripts: TranscriptStore | None,
    older_than: timedelta,
    query: str = OPEN_RUNS,
) -> dict[str, GcResult]:
    """One housekeeping pass over both stores (see the module docstring for the policy).

    Args:
        client: Connected with the data converter the worker uses (same payload store, keys).
        payload_store: Folder or bucket of the payload store, or None if payloads stay inline.
        transcripts: The transcript store (with the worker's keys), or None.
        older_than: Retention: nothing younger is deleted.
        query: The visibility query listing the runs whose references are kept; narrow it
            only when the stores serve nothing else (tests use one per task queue).

    Returns:
        The result per store, keyed "payloads" and "transcripts".
    """
    refs = await open_run_references(client, transcripts, query)
    results: dict[str, GcResult] = {}
    if payload_store is not None:
        results["payloads"] = gc(BlobStore(payload_store), refs.payloads, older_than)
    if transcripts is not None and transcripts.blobs is not None:
        results["transcripts"] = gc(transcripts.blobs, refs.transcripts, older_than)
    return results
