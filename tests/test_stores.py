"""The stores: confined names, verified reads, atomic writes, sealing, housekeeping."""

from __future__ import annotations

import asyncio
import base64
import errno
import hashlib
import json
import logging
import multiprocessing
import os
import stat
import time
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import ExternalStorageReference
from temporalio.client import Client
from temporalio.common import RawValue
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import JSONProtoPayloadConverter
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import running_worker, wait_for_state, wait_for_visibility
from tests.support.clients import store_client
from tests.support.payer import open_payer
from waypoint._activities.model import ModelActivities
from waypoint.client import runs
from waypoint.errors import StoredPayloadError
from waypoint.protocol import (
    AgentState,
    ApprovalDecision,
    Message,
    ModelRequest,
    ModelResponse,
    TextBlock,
)
from waypoint.protocol.queues import agent_queue
from waypoint.stores.blobs import TEMP_PREFIX, BlobStore, Folder
from waypoint.stores.gc import collect_garbage
from waypoint.stores.payloads import ContentAddressedFileDriver, data_converter
from waypoint.stores.sealing import Sealer
from waypoint.stores.transcripts import TRANSCRIPT_MISSING, TranscriptStore

CANARY = "DE89370400440532013000"  # an IBAN: must never reach the disk in plaintext
KEY_OLD, KEY_NEW = bytes(range(32)), bytes(range(32, 64))
KEYS = f"new:{base64.b64encode(KEY_NEW).decode()},old:{base64.b64encode(KEY_OLD).decode()}"


def files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def message(text: str) -> Message:
    return Message(role="user", content=[TextBlock(text=text)])


# --- 1. references are confined; 2. reads are verified ------------------------------------


def reference(claim: str) -> Payload:
    """A storage reference exactly as temporalio 1.35's ExternalStorage writes one."""
    ref = ExternalStorageReference(driver_name="waypoint-cas", claim_data={"sha256": claim})
    payload = JSONProtoPayloadConverter().to_payload(ref)
    assert payload is not None
    return payload


async def test_forged_storage_references_are_refused_and_the_run_keeps_waiting(
    env: WorkflowEnvironment, task_queue: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, outside = tmp_path / "store", tmp_path / "outside"
    outside.mkdir()
    client = await store_client(env, store)
    plain = await Client.connect(  # any client with namespace access: no store, no codec
        env.client.service_client.config.target_host, namespace=env.client.namespace
    )
    db = tmp_path / "payments.db"
    async with open_payer(client, task_queue, db, approval=True, until="awaiting_approval") as run:
        handle, pending = run.handle, run.pending
        # The bait: a valid `reject` decision, stored as a payload blob would be. Were any
        # forged reference below resolved to it, the payment would be rejected.
        decision = ApprovalDecision(
            step_id=pending.step_id, reviewer="mallory", arguments_hash=pending.arguments_hash
        )
        bait = pydantic_data_converter.payload_converter.to_payloads([decision])[0]
        bait_bytes = bait.SerializeToString()
        (outside / "bait").write_bytes(bait_bytes)
        os.mkfifo(outside / "fifo")
        digest = sha256(bait_bytes)
        (store / digest[:2]).mkdir(parents=True, exist_ok=True)
        link = sha256(b"link")
        (store / link[:2]).mkdir(exist_ok=True)
        (store / link[:2] / link).symlink_to(outside / "bait")
        fifo = sha256(b"fifo")
        (store / fifo[:2]).mkdir(exist_ok=True)
        os.mkfifo(store / fifo[:2] / fifo)
        altered = sha256(b"altered")  # a blob whose content is not what its name says
        (store / altered[:2]).mkdir(exist_ok=True)
        (store / altered[:2] / altered).write_bytes(bait_bytes)
        claims = [
            str(outside / "bait"),  # absolute path outside the store
            f"../../{outside.name}/bait",  # traversal
            str(outside / "fifo"),  # a FIFO outside: opening it would hang the worker
            link,  # a digest name that is a symlink out of the store
            fifo,  # a digest name that is a FIFO
            altered,  # a digest name whose content does not match
            "0" * 64,  # a digest nothing is stored under
            digest.upper(),  # not lowercase hex
        ]
        for claim in claims:
            await plain.get_workflow_handle(handle.id).signal("reject", RawValue(reference(claim)))
        status = await runs.status(client, handle.id)
        assert status.state == "awaiting_approval"
        refused = [i.reason for i in status.ignored_signals]
        assert len(refused) == len(claims)
        assert all("storage reference refused" in reason for reason in refused)
        await runs.approve(client, handle.id, pending.step_id, reviewer="grace")
        result = await asyncio.wait_for(handle.result(), 30)
    assert result.output == "Paid ada 5."
    assert run.payments.count() == 1
    events = [e async for e in handle.fetch_history_events()]
    signals = [
        e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    ]
    assert len(signals) == len(claims)  # the approval itself went as an Update
    failed = EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    assert not [e for e in events if e.event_type == failed]
    refused = [r for r in caplog.records if "storage reference refused" in r.getMessage()]
    assert len(refused) >= len(claims)
    assert not [r for r in refused if "mallory" in r.getMessage()]


async def test_altered_blob_is_refused_with_an_error_naming_the_digest(tmp_path: Path) -> None:
    converter = data_converter(tmp_path, threshold=0)
    decision = ApprovalDecision(step_id="t2.tool.1.pay", reviewer="ada")
    (stored,) = await converter.encode([decision])
    name = json.loads(stored.data)["claimData"]["sha256"]
    assert await converter.decode([stored], [ApprovalDecision]) == [decision]
    path = tmp_path / name[:2] / name
    path.write_bytes(path.read_bytes().replace(b"ada", b"eve"))
    with pytest.raises(StoredPayloadError, match=f"{name[:12]} does not match its name"):
        await converter.decode([stored], [ApprovalDecision])


def test_transcript_keys_are_confined_and_nodes_verified(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path)
    head = store.extend("", [message("one"), message("two")])
    assert [m.content[0].text for m in TranscriptStore(tmp_path).load(head, 2)] == ["one", "two"]  # type: ignore[union-attr]
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir(exist_ok=True)
    os.mkfifo(outside / "fifo")
    node = tmp_path / head[:2] / head
    for key in [str(node), f"../{head[:2]}/{head}", str(outside / "fifo"), head.upper(), ""]:
        with pytest.raises(ApplicationError) as caught:
            TranscriptStore(tmp_path).load(key, 1)
        assert caught.value.type == TRANSCRIPT_MISSING
    original = node.read_bytes()
    for replace in (
        lambda: node.write_bytes(original.replace(b"two", b"TWO")),  # edited on disk
        lambda: node.symlink_to(outside / "node"),  # a symlink out of the store
        lambda: os.mkfifo(node),  # a FIFO: opening it would hang
    ):
        node.unlink()
        (outside / "node").write_bytes(original)
        replace()
        with pytest.raises(ApplicationError) as caught:
            TranscriptStore(tmp_path).load(head, 2)
        assert caught.value.type == TRANSCRIPT_MISSING
    node.unlink()
    TranscriptStore(tmp_path).extend("", [message("one"), message("two")])  # the resend heals
    assert len(TranscriptStore(tmp_path).load(head, 2)) == 2


# --- 3. writes ------------------------------------------------------------------------------

BLOB = hashlib.sha256(b"blob").digest() * 32768  # 1 MiB, the same in every process


def _writer(root: str, rounds: int) -> int:
    """Delete and rewrite one blob `rounds` times; how many writes this process made."""
    store, digest, wrote = BlobStore(Path(root)), sha256(BLOB), 0
    for _ in range(rounds):
        path = store.path(digest)
        if path.exists():
            path.unlink(missing_ok=True)
        store.put(digest, BLOB, sha256)
        wrote += 1
    return wrote


def test_concurrent_writers_of_one_digest_all_succeed_and_readers_never_see_half(
    tmp_path: Path,
) -> None:
    ctx = multiprocessing.get_context("spawn")  # no fork of a process holding Temporal threads
    store, digest = BlobStore(tmp_path), sha256(BLOB)
    reads = missing = 0
    with ctx.Pool(4) as pool:
        pending = pool.starmap_async(_writer, [(str(tmp_path), 150)] * 4)
        while not pending.ready():
            data = store.get(digest, sha256)  # raises StoreRefusal on a partial blob
            if data is None:
                missing += 1
            else:
                assert data == BLOB
                reads += 1
        writes = pending.get(timeout=120)
    print(f"\nconcurrency: writes per process {writes}, verified reads {reads}, absent {missing}")
    assert writes == [150] * 4 and reads > 0
    assert not [p for p in files(tmp_path) if p.name.startswith(TEMP_PREFIX)]


def _disk_full(root: str, after: int) -> None:
    """Write with a disk that fills after `after` bytes; the store must leave no temp file."""
    real_write, written = os.write, [0]

    def write(fd: int, data: bytes) -> int:
        if written[0] >= after:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        chunk = bytes(data)[: max(1, after - written[0])]
        written[0] += len(chunk)
        return real_write(fd, chunk)

    os.write = write
    try:
        BlobStore(Path(root)).put(sha256(BLOB), BLOB, sha256)
    except OSError as err:
        assert err.errno == errno.ENOSPC
    else:
        raise AssertionError("the write did not fail")


@pytest.mark.parametrize("after", [0, 4096])
def test_disk_full_leaves_no_temp_files(tmp_path: Path, after: int) -> None:
    process = multiprocessing.get_context("spawn").Process(
        target=_disk_full, args=(str(tmp_path), after)
    )
    process.start()
    process.join(60)
    assert process.exitcode == 0
    assert files(tmp_path) == []


# --- 4. encryption at rest ------------------------------------------------------------------


async def run_with_canary(env: WorkflowEnvironment, task_queue: str, root: Path, keys: str | None):
    sealer = Sealer({"new": KEY_NEW, "old": KEY_OLD}, "new") if keys else None
    client = await store_client(env, root / "payloads", keys=keys)
    root.mkdir()
    payments = Payments(root.parent / f"{root.name}-payments.db")
    agent = build_agent(payments, PAY_SCRIPT)
    transcripts = TranscriptStore(root / "transcripts", sealer=sealer)
    async with running_worker(client, [agent], task_queue, transcripts=transcripts):
        handle = await runs.start_run(
            client, "payer", f"pay ada 5 from {CANARY}", task_queue=task_queue
        )
        await handle.result()
    return transcripts


async def test_with_keys_no_stored_file_holds_the_canary_and_names_are_keyed(
    env: WorkflowEnvironment, tmp_path: Path
) -> None:
    hits = {}
    for keys in (None, KEYS):
        root = tmp_path / ("sealed" if keys else "plain")
        transcripts = await run_with_canary(env, f"tq-{root.name}", root, keys)
        stored = files(root / "payloads") + files(root / "transcripts")
        hits[keys is not None] = sum(CANARY.encode() in p.read_bytes() for p in stored)
        assert len(files(root / "payloads")) > 0 and len(files(root / "transcripts")) > 0
    print(f"\ncanary hits: without keys {hits[False]}, with keys {hits[True]}")
    assert hits[True] == 0 and hits[False] > 0
    for path in files(tmp_path / "sealed"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for folder in (tmp_path / "sealed" / "payloads", tmp_path / "sealed" / "transcripts"):
        for path in [folder, *[p for p in folder.iterdir() if p.is_dir()]]:
            assert stat.S_IMODE(path.stat().st_mode) == 0o700
    # File names are keyed: the chain key (a sha256 anyone could compute) names no file.
    first = TranscriptStore().extend("", [transcripts.load(*last_chain(transcripts))[0]])
    names = {p.name for p in files(tmp_path / "sealed" / "transcripts")}
    assert first not in names and Sealer({"new": KEY_NEW}, "new").name(first) in names


def last_chain(store: TranscriptStore) -> tuple[str, int]:
    """The most recent chain the worker stored: its head and length."""
    head, chain = next(reversed(store._chains.items()))
    return head, len(chain)


def test_rotated_keys_still_read_old_nodes_and_a_lost_key_reads_as_missing(tmp_path: Path) -> None:
    old = TranscriptStore(tmp_path, sealer=Sealer({"old": KEY_OLD}, "old"))
    head = old.extend("", [message(CANARY)])
    rotated = TranscriptStore(tmp_path, sealer=Sealer({"new": KEY_NEW, "old": KEY_OLD}, "new"))
    assert rotated.load(head, 1)[0].content[0].text == CANARY  # type: ignore[union-attr]
    with pytest.raises(ApplicationError):
        TranscriptStore(tmp_path, sealer=Sealer({"new": KEY_NEW}, "new")).load(head, 1)


def test_turning_encryption_on_keeps_plaintext_nodes_readable_and_kept(tmp_path: Path) -> None:
    """Nodes written before the keys were set are read, extended sealed, and spared by gc."""
    from waypoint.stores.gc import gc

    before = TranscriptStore(tmp_path)
    head = before.extend("", [message("one"), message("two")])
    sealed = TranscriptStore(tmp_path, sealer=Sealer({"new": KEY_NEW}, "new"))
    assert [m.content[0].text for m in sealed.load(head, 2)] == ["one", "two"]  # type: ignore[union-attr]
    newer = sealed.extend(head, [message("three")])
    reachable = set(sealed.names(newer))
    assert len(reachable) >= 3  # the sealed node and both plaintext ones
    assert gc(tmp_path, reachable, timedelta(0)).deleted == 0
    assert len(sealed.load(newer, 3)) == 3


# --- 5. housekeeping; 6. a query writes no new blobs -----------------------------------------


@pytest.mark.parametrize("keys", [None, KEYS], ids=["plain", "sealed"])
async def test_two_identical_state_queries_write_nothing_new(
    env: WorkflowEnvironment, task_queue: str, tmp_path: Path, keys: str | None
) -> None:
    store = tmp_path / "payloads"
    client = await store_client(env, store, keys=keys)
    agent = build_agent(Payments(tmp_path / "payments.db"), PAY_SCRIPT, approval=True)
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_approval")
        counts = []
        for _ in range(3):
            state = await handle.query("state", result_type=AgentState)
            counts.append(len(files(store)))
        assert len(state.model_dump_json()) > 512  # the answer itself went through the store
        await handle.terminate()
    assert counts[0] == counts[1] == counts[2]


def store_size(*roots: Path) -> tuple[int, int]:
    stored = [p for root in roots for p in files(root)]
    return len(stored), sum(p.stat().st_size for p in stored)


async def test_gc_keeps_what_open_runs_need_and_the_store_stops_growing(
    env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    payloads, root = tmp_path / "payloads", tmp_path / "transcripts"
    client = await store_client(env, payloads, keys=KEYS)
    transcripts = TranscriptStore(root, sealer=Sealer({"new": KEY_NEW, "old": KEY_OLD}, "new"))
    parked = build_agent(Payments(tmp_path / "p.db"), PAY_SCRIPT, name="parked", approval=True)
    quick = build_agent(Payments(tmp_path / "q.db"), PAY_SCRIPT, name="quick")
    figures = []
    queues = ", ".join(f"'{agent_queue(task_queue, a)}'" for a in ("parked", "quick"))
    mine = f"TaskQueue IN ({queues}) AND ExecutionStatus = 'Running'"

    async with running_worker(
        client, [parked, quick], task_queue, transcripts=transcripts, max_cached_workflows=0
    ):
        waiting = await runs.start_run(client, "parked", "pay ada 5", task_queue=task_queue)
        await wait_for_state(client, waiting.id, "awaiting_approval")
        for _ in range(5):
            for _ in range(4):
                handle = await runs.start_run(client, "quick", "pay ada 5", task_queue=task_queue)
                await handle.result()
            # Visibility lags: a closed run still listed as running keeps its blobs (rightly).
            await wait_for_visibility(client, mine, 1)
            before = store_size(payloads, root)
            result = await collect_garbage(client, payloads, transcripts, timedelta(0), mine)
            after = store_size(payloads, root)
            figures.append((before, after, result["payloads"].deleted, result["transcripts"].kept))
        # Replayed from history (no cache): every blob the parked run needs is still there.
        await runs.approve(client, waiting.id, "t2.tool.1.pay", reviewer="grace")
        assert (await asyncio.wait_for(waiting.result(), 30)).output == "Paid ada 5."
    print("\ngc rounds (files, bytes) before -> after:")
    for before, after, deleted, kept in figures:
        print(
            f"  {before} -> {after}; payload blobs deleted {deleted}, transcript nodes kept {kept}"
        )
    afters = [after for _, after, _, _ in figures]
    assert all(after == afters[0] for after in afters)  # bounded: only the open run's blobs
    assert all(before[0] > after[0] for before, after, _, _ in figures)
    assert figures[-1][3] > 0  # the parked run's chain was kept


async def test_gc_spares_young_blobs(tmp_path: Path) -> None:
    driver = ContentAddressedFileDriver(tmp_path)
    blobs = BlobStore(tmp_path)
    old, young = blobs.put(sha256(b"old"), b"old", sha256), blobs.put(sha256(b"y"), b"y", sha256)
    past = time.time() - 7200
    os.utime(blobs.path(old), (past, past))
    from waypoint.stores.gc import gc

    result = gc(tmp_path, set(), timedelta(hours=1))
    assert (result.deleted, result.kept) == (1, 1)
    assert not blobs.path(old).exists() and blobs.path(young).exists()
    assert driver.stored_bytes() == 1


def test_gc_keeps_a_blob_reused_after_it_grew_old(tmp_path: Path) -> None:
    """Run A wrote it ten days ago; run B stores the same bytes now: B's copy must survive."""
    from waypoint.stores.gc import gc

    blobs = BlobStore(tmp_path)
    name = blobs.put(sha256(b"shared"), b"shared", sha256)
    ten_days_ago = time.time() - 10 * 86400
    os.utime(blobs.path(name), (ten_days_ago, ten_days_ago))
    assert blobs.put(sha256(b"shared"), b"shared", sha256) == name  # reused, not rewritten
    result = gc(tmp_path, set(), timedelta(days=7))
    assert (result.deleted, result.kept) == (0, 1)
    assert blobs.get(name, sha256) == b"shared"


def test_gc_racing_a_reuse_never_loses_the_blob(tmp_path: Path) -> None:
    """gc listed the blob as old; a reuse lands before (or after) gc deletes it."""
    blobs = BlobStore(tmp_path)
    name = blobs.put(sha256(b"shared"), b"shared", sha256)
    ten_days_ago = time.time() - 10 * 86400
    os.utime(blobs.path(name), (ten_days_ago, ten_days_ago))
    cutoff = time.time() - 7 * 86400
    (listed,) = blobs.entries()
    assert listed.mtime < cutoff

    blobs.put(sha256(b"shared"), b"shared", sha256)  # reused between listing and delete
    assert not blobs.delete(listed, cutoff)
    assert blobs.get(name, sha256) == b"shared"
    assert [e.name for e in blobs.entries(temp_grace=0)] == [name]  # nothing left aside

    os.utime(blobs.path(name), (ten_days_ago, ten_days_ago))
    (listed,) = blobs.entries()
    assert blobs.delete(listed, cutoff)  # unused: deleted; a reuse after that writes it again
    assert blobs.put(sha256(b"shared"), b"shared", sha256) == name
    assert blobs.get(name, sha256) == b"shared"


logging.getLogger("waypoint.stores.payloads").setLevel(logging.WARNING)


def test_a_store_whose_parent_folders_do_not_exist_yet_is_created(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path / "fresh" / ".waypoint" / "transcripts")
    message = Message(role="user", content=[TextBlock(text="hello")])
    store.extend("", [message], [])
    assert len(list((tmp_path / "fresh").rglob("*"))) >= 3


class SlowFolder(Folder):
    """A folder store as slow as a distant bucket: every read and write takes 0.3 s."""

    def read(self, name: str) -> bytes | None:
        time.sleep(0.3)
        return super().read(name)

    def write(self, name: str, data: bytes) -> None:
        time.sleep(0.3)
        super().write(name, data)


class Answer:
    async def complete(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(content=[TextBlock(text="ok")], stop_reason="end_turn", model="m")


async def test_transcript_io_does_not_block_other_activities(tmp_path: Path) -> None:
    """Store calls run off the event loop, so other tools' heartbeats keep their rhythm."""
    activities = ModelActivities(
        {"scripted": Answer()}, transcripts=TranscriptStore(SlowFolder(tmp_path))
    )
    request = ModelRequest(
        step_id="t1.model",
        turn=1,
        model="m",
        provider="scripted",
        agent="a",
        system="",
        tools=[],
        messages=[message("one"), message("two"), message("three")],
        max_tokens=10,
    )
    gaps: list[float] = []

    async def ticker() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticking = asyncio.create_task(ticker())
    try:
        response = await ActivityEnvironment().run(activities.call_model, request)
    finally:
        ticking.cancel()
    assert response.content == [TextBlock(text="ok")]
    assert len(list(tmp_path.rglob("*"))) >= 3  # the nodes were written, slowly
    assert max(gaps) < 0.25  # a blocked loop would show a gap of at least one 0.3 s write
