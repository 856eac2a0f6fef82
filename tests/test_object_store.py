"""Both stores in S3-compatible object storage, against a real moto server the tests start.

The bucket gets the folder's rules: confined names, verified reads, sealing. The fleet variant
shares nothing but Temporal and the bucket: every worker starts with an empty local folder.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from temporalio.api.common.v1 import Payload
from temporalio.api.sdk.v1 import ExternalStorageReference
from temporalio.client import Client
from temporalio.converter import JSONProtoPayloadConverter
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from bench.fleet_drill import drill
from bench.object_store import BUCKET, S3Server, fleet_client, fleet_store
from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import running_worker
from tests.test_fleet import QUICK
from waypoint.client import runs
from waypoint.errors import StoreConfigError, StoredPayloadError, StoreUnavailableError
from waypoint.protocol import AgentState, ApprovalDecision, Message, RunResult, TextBlock
from waypoint.settings import Settings, converter_from_settings, payload_store, transcript_store
from waypoint.stores.blobs import BlobStore, StoreRefusal
from waypoint.stores.gc import gc
from waypoint.stores.payloads import data_converter
from waypoint.stores.s3 import Bucket
from waypoint.stores.transcripts import TRANSCRIPT_MISSING, TranscriptStore

CANARY = "DE89370400440532013000"  # an IBAN: must never reach the bucket in plaintext
KEYS = f"k1:{base64.b64encode(bytes(range(32))).decode()}"


# One worker runs this module under `--dist loadgroup`: its moto server starts once, not per worker.
pytestmark = pytest.mark.xdist_group("test_object_store")


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with S3Server(tmp_path_factory.mktemp("moto") / "moto.log") as server:
        server.create_bucket(BUCKET)
        yield server


def objects(s3: S3Server, prefix: str) -> dict[str, bytes]:
    client = s3.client()
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return {o["Key"]: client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() for o in listed}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def reference(claim_data: dict[str, str]) -> Payload:
    """A storage reference exactly as temporalio 1.35's ExternalStorage writes one."""
    ref = ExternalStorageReference(driver_name="waypoint-cas", claim_data=claim_data)
    payload = JSONProtoPayloadConverter().to_payload(ref)
    assert payload is not None
    return payload


def test_store_url_puts_both_stores_under_the_prefix_and_bad_urls_are_refused(
    s3: S3Server,
) -> None:
    settings = Settings(store_url="s3://waypoint/team-a/", store_region="us-east-1")
    payloads = payload_store(settings)
    assert isinstance(payloads, Bucket)
    assert payloads.where() == "s3://waypoint/team-a/payloads"
    blobs = transcript_store(settings).blobs
    assert blobs is not None and blobs.where() == "s3://waypoint/team-a/transcripts"
    for url in ("waypoint/x", "s3:///no-bucket", "file:///tmp/x"):
        with pytest.raises(StoreConfigError, match="s3://bucket/prefix"):
            payload_store(Settings(store_url=url))


async def test_a_run_keeps_both_stores_sealed_in_the_bucket_and_a_fresh_worker_reads_them(
    env: WorkflowEnvironment,
    s3: S3Server,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("WAYPOINT_STORE", f"s3://{BUCKET}/sealed")
    monkeypatch.setenv("WAYPOINT_PAYLOAD_THRESHOLD", "512")
    monkeypatch.setenv("WAYPOINT_ENCRYPTION_KEYS", KEYS)
    monkeypatch.chdir(tmp_path)  # the folder defaults would land here: they must stay empty
    settings = Settings.from_env()
    client = await Client.connect(
        env.client.service_client.config.target_host,
        namespace=env.client.namespace,
        data_converter=converter_from_settings(settings),
    )
    payments = Payments(tmp_path / "payments.db")
    agent = build_agent(payments, PAY_SCRIPT)
    async with running_worker(client, [agent], task_queue, transcripts=transcript_store(settings)):
        handle = await runs.start_run(
            client, "payer", f"pay ada 5 from {CANARY}", task_queue=task_queue
        )
        await handle.result()
        state = await handle.query("state", result_type=AgentState)
    stored = objects(s3, "sealed/")
    payloads = [k for k in stored if k.startswith("sealed/payloads/")]
    nodes = [k for k in stored if k.startswith("sealed/transcripts/")]
    print(f"\nbucket: {len(payloads)} payload objects, {len(nodes)} transcript nodes")
    assert payloads and nodes and len(payloads) + len(nodes) == len(stored)
    assert all(data.startswith(b"WPS1") for data in stored.values())  # sealed, every one
    assert not [k for k, data in stored.items() if CANARY.encode() in data]
    assert not list(tmp_path.rglob(".waypoint"))  # nothing on the local disk
    # A fresh client (a CLI on another machine, no cache) reads the run's result from the bucket.
    fresh = await Client.connect(
        env.client.service_client.config.target_host,
        namespace=env.client.namespace,
        data_converter=converter_from_settings(Settings.from_env()),
    )
    result = await fresh.get_workflow_handle(handle.id, result_type=RunResult).result()
    assert result.output == "Paid ada 5." and payments.count() == 1
    # A fresh worker's transcript store finds the whole chain the run left.
    chain = transcript_store(Settings.from_env()).load(state.stored_hash, state.stored_len)
    assert state.stored_len > 1 and CANARY in chain[0].model_dump_json()


async def test_forged_claims_and_altered_objects_are_refused(s3: S3Server) -> None:
    store = Bucket(BUCKET, "forged/payloads", client=s3.client())
    converter = data_converter(store, threshold=0)
    decision = ApprovalDecision(step_id="t2.tool.1.pay", reviewer="ada")
    (stored,) = await converter.encode([decision])
    name = json.loads(stored.data)["claimData"]["sha256"]
    assert await converter.decode([stored], [ApprovalDecision]) == [decision]
    # Another prefix's object, by key: a claim is a digest under this store, nothing else.
    node = TranscriptStore(Bucket(BUCKET, "forged/transcripts", client=s3.client()))
    head = node.extend("", [Message(role="user", content=[TextBlock(text="secret")])])
    forged: list[dict[str, Any]] = [
        {"sha256": f"forged/transcripts/{head[:2]}/{head}"},  # a key outside the prefix
        {"sha256": f"../transcripts/{head[:2]}/{head}"},  # traversal
        {"sha256": head},  # a digest, but not of this store
        {"bucket": BUCKET, "key": f"forged/payloads/{name[:2]}/{name}"},  # contrib-driver style
        {"sha256": name.upper()},
    ]
    for claim in forged:
        with pytest.raises(StoredPayloadError, match="storage reference refused"):
            await converter.decode([reference(claim)], [ApprovalDecision])
    key = f"forged/payloads/{name[:2]}/{name}"
    client = s3.client()
    data = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    client.put_object(Bucket=BUCKET, Key=key, Body=data.replace(b"ada", b"eve"))
    with pytest.raises(StoredPayloadError, match=f"{name[:12]} does not match its name"):
        await converter.decode([stored], [ApprovalDecision])


def test_transcript_nodes_in_the_bucket_are_verified(s3: S3Server) -> None:
    bucket = Bucket(BUCKET, "nodes/transcripts", client=s3.client())
    messages = [Message(role="user", content=[TextBlock(text=t)]) for t in ("one", "two")]
    head = TranscriptStore(bucket).extend("", messages)
    fresh = TranscriptStore(Bucket(BUCKET, "nodes/transcripts", client=s3.client()))
    assert fresh.load(head, 2) == messages  # another worker, nothing cached
    key = bucket.key(head)
    client = s3.client()
    node = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    client.put_object(Bucket=BUCKET, Key=key, Body=node.replace(b"two", b"TWO"))
    with pytest.raises(ApplicationError) as err:
        TranscriptStore(bucket).load(head, 2)
    assert err.value.type == TRANSCRIPT_MISSING  # the workflow resends; nothing forged is used


def test_gc_deletes_unreferenced_objects_and_keeps_referenced_ones(s3: S3Server) -> None:
    blobs = BlobStore(Bucket(BUCKET, "gc/payloads", client=s3.client()))
    kept, dropped = (blobs.put(sha256(d), d, sha256) for d in (b"kept", b"dropped"))
    result = gc(blobs, {kept}, older_than=timedelta(0))
    assert (result.kept, result.deleted) == (1, 1)
    assert blobs.get(kept, sha256) == b"kept" and blobs.get(dropped, sha256) is None
    assert gc(blobs, {kept}, older_than=timedelta(hours=1)).deleted == 0


def test_gc_keeps_an_object_reused_after_gc_listed_it(s3: S3Server) -> None:
    """A reuse renews `LastModified`; gc reads it again just before it deletes."""
    bucket = Bucket(BUCKET, "gc-reuse/payloads", client=s3.client())
    blobs = BlobStore(bucket)
    name = blobs.put(sha256(b"shared"), b"shared", sha256)
    (listed,) = blobs.entries()
    next_second = int(listed.mtime) + 2
    while time.time() < next_second:  # S3 keeps whole seconds: let the clock pass one
        time.sleep(0.05)
    blobs.put(sha256(b"shared"), b"shared", sha256)
    assert not blobs.delete(listed, cutoff=listed.mtime + 1)
    assert gc(blobs, set(), older_than=timedelta(seconds=1)).deleted == 0
    assert blobs.get(name, sha256) == b"shared"


@pytest.mark.slow
async def test_a_fleet_sharing_only_a_bucket_resends_no_transcript_and_duplicates_no_effect(
    env: WorkflowEnvironment, tmp_path: Path
) -> None:
    address = env.client.service_client.config.target_host
    with fleet_store(tmp_path) as (server, store_env):
        client = await fleet_client(server, address, env.client.namespace)
        report = await drill(
            client,
            address,
            tmp_path,
            runs=8,
            workers=2,
            kill_every=1.0,
            max_kills=3,
            options=QUICK,
            task_timeout=timedelta(seconds=2),
            timeout=180,
            store_env=store_env,
        )
        stored = objects(server, "fleet/")
    print(report.summary())
    print(f"bucket objects: {len(stored)}")
    assert report.kills >= 1
    assert report.completed == 8 and not report.different, report.summary()
    assert report.effects == 16 and report.duplicated == 0 and report.missing == 0
    assert report.model_steps >= 8 * 4 and report.resends == 0, report.summary()
    assert report.moved >= 1  # runs moved to workers with an empty folder and found everything
    assert report.local_files == 0  # every worker's own folder stayed empty
    assert any(k.startswith("fleet/payloads/") for k in stored)
    assert any(k.startswith("fleet/transcripts/") for k in stored)
    assert report.ok, report.summary()


def stubbed_bucket() -> tuple[Bucket, Stubber]:
    client = boto3.client(
        "s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
    )
    return Bucket(BUCKET, "denied", client=client), Stubber(client)


def test_without_list_permission_a_missing_blob_is_written_not_an_error() -> None:
    """S3 answers 403 for a missing key when the credentials lack s3:ListBucket."""
    bucket, stub = stubbed_bucket()
    stub.add_client_error("get_object", "AccessDenied", http_status_code=403)
    stub.add_response("put_object", {})
    stub.add_client_error("get_object", "AccessDenied", http_status_code=403)
    with stub:
        blobs = BlobStore(bucket)
        assert blobs.put(sha256(b"new"), b"new", sha256) == sha256(b"new")
        with pytest.raises(StoreRefusal, match="access denied.*s3:ListBucket"):
            blobs.get(sha256(b"new"), sha256)
    stub.assert_no_pending_responses()


def test_throttling_and_denied_writes_say_what_to_do() -> None:
    bucket, stub = stubbed_bucket()
    stub.add_client_error("get_object", "SlowDown", http_status_code=503)
    stub.add_client_error("get_object", "AccessDenied", http_status_code=403)
    stub.add_client_error("put_object", "AccessDenied", http_status_code=403)
    with stub:
        blobs = BlobStore(bucket)
        with pytest.raises(StoreUnavailableError, match="SlowDown.*throttling"):
            blobs.get(sha256(b"x"), sha256)
        with pytest.raises(StoreUnavailableError, match="writing.*AccessDenied.*s3:PutObject"):
            blobs.put(sha256(b"x"), b"x", sha256)
    # The bucket a worker builds retries throttling itself, with backoff, before any of this.
    retries = Bucket(BUCKET, region="us-east-1").client.meta.config.retries
    assert (retries["mode"], retries["total_max_attempts"]) == ("adaptive", 10)
