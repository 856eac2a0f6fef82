"""Payload encryption: the codec, key parsing, a real run's raw history, and the codec server."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from http.client import HTTPMessage
from pathlib import Path

import pytest
from google.protobuf import json_format
from starlette.applications import Starlette
from starlette.routing import Mount
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.api.history.v1 import History
from temporalio.client import Client, WorkflowFailureError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.codec_workflows import (
    SECRET_FAILURE,
    SECRET_RESULT,
    CanaryWorkflow,
    TaskFailingWorkflow,
    fail_with_secret,
    reveal_secret,
)
from tests.test_browser import CHROMIUM, CHROMIUM_FLAGS, require_browser
from waypoint._operations.codec_server import (
    MAX_BODY_BYTES,
    CodecServer,
    CodecTokenError,
    codec_asgi_app,
    read_token_file,
    serve_codec,
)
from waypoint._operations.dev_server import free_port, start_dev_server
from waypoint._security.codec import (
    EncryptionCodec,
    EncryptionKeyError,
    PayloadDecryptionError,
    encrypted_converter,
    load_keys,
)
from waypoint._security.refused import StorePayloadConverter
from waypoint._security.scrub import EncodedScrubbingFailureConverter
from waypoint.client.views import last_task_failure
from waypoint.errors import StoredPayloadError
from waypoint.protocol.plaintext import MARK

KEY_A = bytes(range(32))
KEY_B = bytes(range(100, 132))
TOKEN = "test-token-9f2c"
UI_ORIGIN = "http://localhost:8233"
TEMPORAL = Path(sys.executable).parent / "temporal"


def b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def plain(value: str) -> Payload:
    return pydantic_data_converter.payload_converter.to_payloads([value])[0]


# (a) the codec and its keys


async def test_round_trip_encrypts_whole_payload_and_restores_it() -> None:
    codec = EncryptionCodec({"a": KEY_A}, "a")
    original = plain(SECRET_RESULT)
    [encrypted] = await codec.encode([original])
    assert encrypted.metadata["encoding"] == b"binary/encrypted"
    assert encrypted.metadata["encryption-key-id"] == b"a"
    assert SECRET_RESULT.encode() not in encrypted.SerializeToString()
    assert b"json/plain" not in encrypted.SerializeToString()
    assert await codec.decode([encrypted]) == [original]
    [again] = await codec.encode([original])
    assert again.data[:12] != encrypted.data[:12], "each payload gets a fresh nonce"


async def test_unencrypted_payloads_pass_through_decode() -> None:
    codec = EncryptionCodec({"a": KEY_A}, "a")
    original = plain("not secret")
    (decoded,) = await codec.decode([original])
    assert decoded.data == original.data  # marked, in memory only, as found unencrypted
    assert {**decoded.metadata} == {**original.metadata, MARK: b"1"}


async def test_rotation_decodes_old_key_and_encodes_with_new_active_key() -> None:
    old = EncryptionCodec({"a": KEY_A}, "a")
    [under_a] = await old.encode([plain(SECRET_RESULT)])
    rotated = EncryptionCodec({"b": KEY_B, "a": KEY_A}, "b")
    assert await rotated.decode([under_a]) == [plain(SECRET_RESULT)]
    [under_b] = await rotated.encode([plain(SECRET_RESULT)])
    assert under_b.metadata["encryption-key-id"] == b"b"
    with pytest.raises(EncryptionKeyError, match="key id 'b'"):
        old.decrypt(under_b)


async def test_unknown_key_id_error_names_the_id() -> None:
    [encrypted] = await EncryptionCodec({"retired-2024": KEY_A}, "retired-2024").encode(
        [plain("x")]
    )
    with pytest.raises(EncryptionKeyError, match="'retired-2024'"):
        EncryptionCodec({"b": KEY_B}, "b").decrypt(encrypted)


async def test_wrong_key_under_same_id_or_altered_data_fails_authentication() -> None:
    [encrypted] = await EncryptionCodec({"a": KEY_A}, "a").encode([plain("x")])
    with pytest.raises(PayloadDecryptionError, match="failed authentication"):
        EncryptionCodec({"a": KEY_B}, "a").decrypt(encrypted)
    tampered = Payload()
    tampered.CopyFrom(encrypted)
    tampered.data = encrypted.data[:-1] + bytes([encrypted.data[-1] ^ 1])
    with pytest.raises(PayloadDecryptionError):
        EncryptionCodec({"a": KEY_A}, "a").decrypt(tampered)


async def test_decode_turns_an_undecryptable_payload_into_a_refusal_not_an_error() -> None:
    """A raise in `decode` would fail every workflow task of the run that received it."""
    [unknown] = await EncryptionCodec({"retired": KEY_A}, "retired").encode([plain("x")])
    [forged] = await EncryptionCodec({"b": KEY_A}, "b").encode([plain("x")])
    converter = StorePayloadConverter()
    decoded = await EncryptionCodec({"b": KEY_B}, "b").decode([unknown, forged, plain("ok")])
    with pytest.raises(StoredPayloadError, match="key id 'retired'.*does not have"):
        converter.from_payload(decoded[0], str)
    with pytest.raises(StoredPayloadError, match="failed authentication"):
        converter.from_payload(decoded[1], str)
    assert converter.from_payload(decoded[2], str) == "ok"


def test_codec_refuses_short_keys_and_a_missing_active_id() -> None:
    with pytest.raises(EncryptionKeyError, match="16 bytes"):
        EncryptionCodec({"a": KEY_A[:16]}, "a")
    with pytest.raises(EncryptionKeyError, match="'z'"):
        EncryptionCodec({"a": KEY_A}, "z")


def test_load_keys_from_a_string_first_is_active() -> None:
    keys, active = load_keys(f"new:{b64(KEY_B)}, old:{b64(KEY_A)}")
    assert keys == {"new": KEY_B, "old": KEY_A}
    assert active == "new"


def test_load_keys_accepts_url_safe_base64() -> None:
    key = b"\xfb\xff" * 16
    assert load_keys("k:" + base64.urlsafe_b64encode(key).decode()) == ({"k": key}, "k")


def test_load_keys_from_a_file_one_per_line(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text(f"# rotated 2026-05\nb:{b64(KEY_B)}\n\na:{b64(KEY_A)}\n")
    assert load_keys(f"@{path}") == ({"b": KEY_B, "a": KEY_A}, "b")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (f"a:{b64(KEY_A[:31])}", "entry 1 \\(key id 'a'\\) decodes to 31 bytes; it must be 32"),
        (f"a:{b64(KEY_A)},b:{b64(KEY_A + b'x')}", "entry 2 \\(key id 'b'\\) decodes to 33"),
        ("a:not*base64!", "key id 'a'\\) is not valid base64"),
        (f"a:{b64(KEY_A)[:-2]}", "is not valid base64"),
        (b64(KEY_A), "not of the form id:base64key"),
        (f"a:{b64(KEY_A)},a:{b64(KEY_B)}", "repeats a key id"),
        (" , ", "has no keys"),
    ],
)
def test_load_keys_errors_say_what_is_wrong_without_the_key(spec: str, message: str) -> None:
    with pytest.raises(EncryptionKeyError, match=message) as caught:
        load_keys(spec)
    secret_part = spec.partition(":")[2].split(",")[-1]
    assert not secret_part or secret_part not in str(caught.value)
    assert caught.value.__cause__ is None


def test_load_keys_file_errors_name_the_file_not_the_key(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text(f"a:{b64(KEY_A[:20])}\n")
    with pytest.raises(EncryptionKeyError, match=f"key file {path}, entry 1") as caught:
        load_keys(f"@{path}")
    assert b64(KEY_A[:20]) not in str(caught.value)
    with pytest.raises(EncryptionKeyError, match="cannot read key file"):
        load_keys(f"@{tmp_path / 'missing'}")


def test_encrypted_converter_keeps_base_and_encodes_failure_attributes() -> None:
    codec = EncryptionCodec({"a": KEY_A}, "a")
    converter = encrypted_converter(pydantic_data_converter, codec)
    assert converter.payload_codec is codec
    assert converter.payload_converter_class is pydantic_data_converter.payload_converter_class
    assert isinstance(converter.failure_converter, EncodedScrubbingFailureConverter)
    assert converter.external_storage is pydantic_data_converter.external_storage
    with pytest.raises(ValueError, match="already has a payload codec"):
        encrypted_converter(converter, codec)


# (b) a real run on the dev server


async def run_canary(client: Client, fail: bool) -> tuple[str, str | BaseException]:
    """Run the canary workflow on its own worker; its id and its result or failure."""
    task_queue = f"codec-{uuid.uuid4().hex[:8]}"
    workflow_id = f"codec-canary-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[CanaryWorkflow],
        activities=[reveal_secret, fail_with_secret],
    ):
        try:
            return workflow_id, await client.execute_workflow(
                CanaryWorkflow.run, fail, id=workflow_id, task_queue=task_queue
            )
        except WorkflowFailureError as err:
            return workflow_id, err


async def raw_history(client: Client, workflow_id: str) -> tuple[str, bytes]:
    """The history as JSON and as serialized protobuf, exactly as the server stores it."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return history.to_json(), History(events=history.events).SerializeToString()


@pytest.fixture
async def encrypted_client(env: WorkflowEnvironment) -> Client:
    codec = EncryptionCodec({"a": KEY_A}, "a")
    return await Client.connect(
        env.client.service_client.config.target_host,
        data_converter=encrypted_converter(pydantic_data_converter, codec),
    )


async def test_canaries_are_absent_from_raw_history_when_encryption_is_on(
    env: WorkflowEnvironment, encrypted_client: Client
) -> None:
    ok_id, result = await run_canary(encrypted_client, fail=False)
    failed_id, failure = await run_canary(encrypted_client, fail=True)

    assert result == SECRET_RESULT
    assert isinstance(failure, WorkflowFailureError)
    assert isinstance(failure.cause, ActivityError)
    assert isinstance(failure.cause.cause, ApplicationError)
    assert SECRET_FAILURE in failure.cause.cause.message

    for workflow_id in (ok_id, failed_id):
        as_json, as_bytes = await raw_history(env.client, workflow_id)
        for canary in (SECRET_RESULT, SECRET_FAILURE):
            assert canary not in as_json
            assert canary.encode() not in as_bytes
        assert b64(b"binary/encrypted") in as_json
    # Without the key, the plain client cannot read the result either.
    with pytest.raises(Exception, match="binary/encrypted"):
        await env.client.get_workflow_handle(ok_id).result()


async def test_a_failing_workflow_task_is_decoded_for_the_operator(
    env: WorkflowEnvironment, encrypted_client: Client
) -> None:
    """History says only "Encoded failure"; `waypoint status` says what went wrong."""
    task_queue = f"codec-{uuid.uuid4().hex[:8]}"
    async with Worker(encrypted_client, task_queue=task_queue, workflows=[TaskFailingWorkflow]):
        handle = await encrypted_client.start_workflow(
            TaskFailingWorkflow.run, id=f"codec-task-{uuid.uuid4().hex[:8]}", task_queue=task_queue
        )
        shown = None
        while shown is None:
            shown = await last_task_failure(encrypted_client, handle.id)
        await handle.terminate()
    assert SECRET_FAILURE in shown and "bug in workflow code" in shown
    keyless = await last_task_failure(env.client, handle.id)
    assert keyless is not None and "Encoded failure" in keyless and SECRET_FAILURE not in keyless
    as_json, _ = await raw_history(env.client, handle.id)
    assert SECRET_FAILURE not in as_json


async def test_the_same_canaries_are_in_raw_history_without_encryption(
    env: WorkflowEnvironment,
) -> None:
    """The control: the check above would see the canaries if they were there."""
    ok_id, _ = await run_canary(env.client, fail=False)
    failed_id, _ = await run_canary(env.client, fail=True)
    assert SECRET_RESULT.encode() in (await raw_history(env.client, ok_id))[1]
    assert SECRET_FAILURE in (await raw_history(env.client, failed_id))[0]


# (c) the codec server


@pytest.fixture
def codec() -> EncryptionCodec:
    return EncryptionCodec({"b": KEY_B, "a": KEY_A}, "b")


@contextmanager
def running_codec_server(
    codec: EncryptionCodec, origins: list[str], max_in_flight: int = 4, namespace: str | None = None
) -> Iterator[tuple[str, int]]:
    """The codec server on uvicorn on a port the OS picks, in a thread; stopped on exit."""
    server = serve_codec(codec, TOKEN, "127.0.0.1", 0, origins, max_in_flight, namespace=namespace)
    with server:
        yield "127.0.0.1", server.port
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", server.port), timeout=5).close()


@pytest.fixture
def codec_server(codec: EncryptionCodec) -> Iterator[tuple[str, int]]:
    with running_codec_server(codec, [UI_ORIGIN]) as address:
        yield address


def request(
    address: tuple[str, int],
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, HTTPMessage, bytes]:
    """One HTTP request on its own connection; status, headers (any case) and body."""
    connection = http.client.HTTPConnection(*address, timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


async def post(
    address: tuple[str, int], path: str, payloads: list[Payload], **headers: str
) -> tuple[int, HTTPMessage, bytes]:
    body = json_format.MessageToJson(Payloads(payloads=payloads)).encode()
    headers = {"Content-Type": "application/json", "X-Namespace": "default", **headers}
    return await asyncio.to_thread(request, address, "POST", path, body, headers)


def payloads_of(body: bytes) -> list[Payload]:
    return list(json_format.Parse(body, Payloads()).payloads)


async def encrypted_pair(codec: EncryptionCodec) -> list[Payload]:
    """One payload under the active key b and one under the older key a."""
    [under_a] = await EncryptionCodec({"a": KEY_A}, "a").encode([plain("older secret")])
    return [*(await codec.encode([plain(SECRET_RESULT)])), under_a]


async def test_codec_server_decodes_nothing_without_the_token(
    codec: EncryptionCodec, codec_server: tuple[str, int]
) -> None:
    encrypted = await encrypted_pair(codec)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        status, response_headers, body = await post(codec_server, "/decode", encrypted, **headers)
        assert status == 401
        assert response_headers["WWW-Authenticate"].startswith("Bearer")
        assert json.loads(body) == {"message": "missing or wrong codec server token"}


@pytest.mark.parametrize("path", ["/decode", "/default/decode", "/decode/"])
async def test_codec_server_decodes_with_the_token_like_the_codec(
    codec: EncryptionCodec, codec_server: tuple[str, int], path: str
) -> None:
    encrypted = await encrypted_pair(codec)
    status, _, body = await post(codec_server, path, encrypted, Authorization=f"Bearer {TOKEN}")
    assert status == 200
    assert payloads_of(body) == await codec.decode(encrypted)
    assert payloads_of(body) == [plain(SECRET_RESULT), plain("older secret")]


async def test_codec_server_accepts_the_token_as_a_path_segment_for_the_web_ui(
    codec: EncryptionCodec, codec_server: tuple[str, int]
) -> None:
    encrypted = await encrypted_pair(codec)
    status, headers, body = await post(
        codec_server, f"/{TOKEN}/decode", encrypted, Origin=UI_ORIGIN
    )
    assert status == 200
    assert headers["Access-Control-Allow-Origin"] == UI_ORIGIN
    assert payloads_of(body) == await codec.decode(encrypted)
    status, _, _ = await post(codec_server, "/not-the-token/decode", encrypted)
    assert status == 401


async def test_codec_server_encodes_with_the_active_key(
    codec: EncryptionCodec, codec_server: tuple[str, int]
) -> None:
    status, _, body = await post(
        codec_server, "/default/encode", [plain("from the UI")], Authorization=f"Bearer {TOKEN}"
    )
    assert status == 200
    [encoded] = payloads_of(body)
    assert encoded.metadata["encryption-key-id"] == b"b"
    assert await codec.decode([encoded]) == [plain("from the UI")]


async def test_codec_server_answers_the_ui_preflight_for_allowed_origins_only(
    codec_server: tuple[str, int],
) -> None:
    preflight = {
        "Origin": UI_ORIGIN,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type,x-namespace",
    }
    status, headers, _ = await asyncio.to_thread(
        request, codec_server, "OPTIONS", "/default/decode", None, preflight
    )
    assert status == 204
    assert headers["Access-Control-Allow-Origin"] == UI_ORIGIN
    assert headers["Access-Control-Allow-Methods"] == "POST, OPTIONS"
    allowed = {h.strip().lower() for h in headers["Access-Control-Allow-Headers"].split(",")}
    assert {"authorization", "content-type", "x-namespace"} <= allowed
    assert headers["Access-Control-Allow-Credentials"] == "true"

    status, headers, _ = await asyncio.to_thread(
        request, codec_server, "OPTIONS", "/decode", None, {**preflight, "Origin": "http://evil"}
    )
    assert status == 403
    assert "Access-Control-Allow-Origin" not in headers


async def test_codec_server_rejects_bad_requests_clearly(
    codec: EncryptionCodec, codec_server: tuple[str, int]
) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    for malformed in (b"{not json", b"[" * 100_000):
        status, _, body = await asyncio.to_thread(
            request, codec_server, "POST", "/decode", malformed, auth
        )
        assert status == 400 and b"not Payloads JSON" in body
    [unknown] = await EncryptionCodec({"gone": KEY_A}, "gone").encode([plain("x")])
    status, _, body = await post(codec_server, "/decode", [unknown], **auth)
    assert status == 400 and b"'gone'" in body
    # The client's payload is at fault when it does not decrypt: 400, never 500.
    [forged] = await EncryptionCodec({"b": KEY_A}, "b").encode([plain("x")])
    status, _, body = await post(codec_server, "/decode", [forged], **auth)
    assert status == 400 and b"failed authentication" in body
    status, _, body = await post(codec_server, "/history", [unknown], **auth)
    assert status == 404 and b"POST to .../encode or .../decode" in body
    status, _, body = await asyncio.to_thread(request, codec_server, "GET", "/decode", None, auth)
    assert status == 405 and "POST" in json.loads(body)["message"]


def raw_exchange(address: tuple[str, int], head: str, timeout: float = 5.0) -> tuple[str, float]:
    """Send a request head (no body) and read the status line; it and the seconds it took.

    A Host header, which HTTP/1.1 requires, is added after the request line.
    """
    line, _, rest = head.partition("\r\n")
    started = time.monotonic()
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.sendall(f"{line}\r\nHost: codec\r\n{rest}".encode())
        status = read_head(sock).split(b"\r\n", 1)[0].decode().strip()
    return status, time.monotonic() - started


def read_head(sock: socket.socket) -> bytes:
    """Read up to the end of a response's head (or of the connection)."""
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    return head


def test_codec_server_refuses_before_reading_the_body(codec_server: tuple[str, int]) -> None:
    """A declared 60 MiB body that never comes: the refusal must not wait for it."""
    promised = f"Content-Length: {60 << 20}\r\n"
    status, took = raw_exchange(codec_server, f"POST /decode HTTP/1.1\r\n{promised}\r\n")
    assert status.split()[1] == "401" and took < 2
    status, took = raw_exchange(
        codec_server, f"POST /wrong/decode HTTP/1.1\r\nOrigin: http://evil\r\n{promised}\r\n"
    )
    assert status.split()[1] == "403" and took < 2
    auth = f"Authorization: Bearer {TOKEN}\r\n"
    too_big = f"Content-Length: {MAX_BODY_BYTES + 1}\r\n"
    status, took = raw_exchange(codec_server, f"POST /decode HTTP/1.1\r\n{auth}{too_big}\r\n")
    assert status.split()[1] == "413" and took < 2
    status, _ = raw_exchange(codec_server, f"POST /decode HTTP/1.1\r\n{auth}\r\n")
    assert status.split()[1] == "411"


def chunked_body(parts: list[bytes]) -> bytes:
    """`parts` framed as a chunked body, with its last chunk."""
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"


async def test_codec_server_counts_a_chunked_body_and_refuses_it_past_the_limit(
    codec: EncryptionCodec, codec_server: tuple[str, int]
) -> None:
    """A chunked body declares no length: it is counted as it comes, and refused past the limit."""
    head = (
        f"POST /decode HTTP/1.1\r\nHost: codec\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode()
    encrypted = await encrypted_pair(codec)
    body = json_format.MessageToJson(Payloads(payloads=encrypted)).encode()

    def exchange(frames: list[bytes]) -> bytes:
        with socket.create_connection(codec_server, timeout=60) as sock:
            sock.sendall(head)
            for frame in frames:
                sock.sendall(frame)
            head_and_body = read_head(sock)
            while not head_and_body.endswith(b"}"):
                head_and_body += sock.recv(65536)
            return head_and_body

    answer = await asyncio.to_thread(exchange, [chunked_body([body[:100], body[100:]])])
    assert answer.split()[1] == b"200"
    assert payloads_of(answer.partition(b"\r\n\r\n")[2]) == await codec.decode(encrypted)

    mib = b"x" * (1 << 20)
    frame = chunked_body([mib])[: -len(b"0\r\n\r\n")]
    over = MAX_BODY_BYTES // len(mib) + 1
    answer = await asyncio.to_thread(exchange, [frame] * over + [b"0\r\n\r\n"])
    assert answer.split()[1] == b"413"
    assert f"body over {MAX_BODY_BYTES} bytes".encode() in answer


async def test_codec_server_refusal_reaches_a_client_that_sent_its_body(
    codec: EncryptionCodec, codec_server: tuple[str, int]
) -> None:
    """The unread body is discarded after the answer, so the client reads 401, not a reset."""
    big = [plain("x" * 200_000)]
    for _ in range(5):
        status, _, body = await post(codec_server, "/decode", big)
        assert status == 401 and b"token" in body


def hold_a_slot(sock: socket.socket) -> None:
    """Make `sock` an authenticated POST in the app, waiting for a body that never comes."""
    sock.sendall(
        f"POST /decode HTTP/1.1\r\nHost: codec\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Content-Length: 100\r\nExpect: 100-continue\r\n\r\n".encode()
    )
    # uvicorn sends 100 Continue when the app first asks for the body: the request is in.
    assert read_head(sock).startswith(b"HTTP/1.1 100 "), "no slot was free"


def test_codec_server_serves_at_most_max_in_flight_requests(codec: EncryptionCodec) -> None:
    with (
        running_codec_server(codec, [UI_ORIGIN], max_in_flight=2) as address,
        ExitStack() as clients,
    ):
        connect = [clients.enter_context(socket.create_connection(address, 5)) for _ in range(5)]
        # Connections that never finish their headers are not requests yet: they hold no slot.
        for sock in connect[:3]:
            sock.sendall(b"POST /decode HTTP/1.1\r\n")
        for sock in connect[3:]:
            hold_a_slot(sock)
        status, took = raw_exchange(address, "POST /decode HTTP/1.1\r\nContent-Length: 2\r\n\r\n")
        assert status.split()[1] == "503" and took < 2
        status, headers, body = request(address, "POST", "/decode", b"{}")
        assert status == 503 and headers["Retry-After"] == "1"
        assert json.loads(body) == {"message": "codec server busy; retry in a moment"}
        clients.close()
        deadline = time.monotonic() + 10
        while True:
            status, _ = raw_exchange(address, "POST /decode HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
            if status.split()[1] != "503" or time.monotonic() > deadline:
                break
        assert status.split()[1] == "401"


async def test_codec_app_mounted_under_a_prefix_reads_paths_relative_to_the_mount(
    codec: EncryptionCodec,
) -> None:
    """The console mounts the codec app at /codec: the prefix is neither token nor namespace."""
    parent = Starlette(
        routes=[
            Mount("/codec", app=codec_asgi_app(codec, TOKEN, [UI_ORIGIN])),
            Mount("/payments", app=codec_asgi_app(codec, TOKEN, [UI_ORIGIN], "payments")),
        ]
    )
    encrypted = await encrypted_pair(codec)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with CodecServer(parent, "127.0.0.1", 0) as server:
        address = ("127.0.0.1", server.port)
        for path, headers in (
            ("/codec/decode", auth),
            ("/codec/default/decode?preserveStorageRefs=true", auth),
            (f"/codec/{TOKEN}/decode", {"Origin": UI_ORIGIN}),
        ):
            status, _, body = await post(address, path, encrypted, **headers)
            assert status == 200, path
            assert payloads_of(body) == await codec.decode(encrypted)
        preflight = {"Origin": UI_ORIGIN, "Access-Control-Request-Method": "POST"}
        status, headers, _ = await asyncio.to_thread(
            request, address, "OPTIONS", "/codec/default/decode", None, preflight
        )
        assert status == 204 and headers["Access-Control-Allow-Origin"] == UI_ORIGIN
        status, _, body = await post(address, "/codec/history", encrypted, **auth)
        assert status == 404 and b"POST to .../encode or .../decode" in body
        status, _, _ = await post(address, "/codec/decode", encrypted)
        assert status == 401
        # Here "payments" is the mount, not a /{namespace}/ segment: the request names none.
        no_header = {"X-Namespace": ""}
        status, _, body = await post(address, "/payments/decode", encrypted, **auth, **no_header)
        assert status == 400 and b"X-Namespace: payments" in body
        status, _, _ = await post(
            address, "/payments/payments/decode", encrypted, **auth, **no_header
        )
        assert status == 200


async def test_codec_server_logs_neither_the_token_nor_the_path(
    codec: EncryptionCodec, codec_server: tuple[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    encrypted = await encrypted_pair(codec)
    status, _, body = await post(codec_server, f"/{TOKEN}/decode", encrypted)
    assert status == 200
    status, _, body = await post(codec_server, f"/{TOKEN}-not/decode", encrypted)
    assert status == 401 and TOKEN.encode() not in body
    status, _ = await asyncio.to_thread(raw_exchange, codec_server, f"POST /{TOKEN} junk\r\n\r\n")
    assert status.split()[1] == "400"  # a malformed request line, refused by uvicorn itself
    assert "codec server POST 200" in caplog.text and "codec server POST 401" in caplog.text
    assert TOKEN not in caplog.text


def test_token_file_must_be_private_to_its_owner(tmp_path: Path) -> None:
    path = tmp_path / "codec-token"
    path.write_text("s3cret\n")
    path.chmod(0o600)
    assert read_token_file(path) == "s3cret"
    path.chmod(0o644)
    with pytest.raises(CodecTokenError, match="chmod 600"):
        read_token_file(path)
    path.chmod(0o600)
    path.write_text("\n")
    with pytest.raises(CodecTokenError, match="empty"):
        read_token_file(path)
    with pytest.raises(CodecTokenError, match="cannot read"):
        read_token_file(tmp_path / "missing")


async def test_temporal_cli_shows_decrypted_history_through_the_codec_server(
    env: WorkflowEnvironment, encrypted_client: Client, codec_server: tuple[str, int]
) -> None:
    """The real CLI, a Go codec client, speaks the protocol with --codec-auth."""
    workflow_id, _ = await run_canary(encrypted_client, fail=False)
    command = [
        str(TEMPORAL),
        "workflow",
        "show",
        "--address",
        env.client.service_client.config.target_host,
        "--workflow-id",
        workflow_id,
        "--output",
        "json",
    ]
    codec_flags = [
        "--codec-endpoint",
        f"http://{codec_server[0]}:{codec_server[1]}/{{namespace}}",
        "--codec-auth",
        f"Bearer {TOKEN}",
    ]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}

    def show(flags: list[str]) -> str:
        done = subprocess.run(
            command + flags, capture_output=True, text=True, timeout=30, env=environment
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    without, with_codec = await asyncio.gather(
        asyncio.to_thread(show, []), asyncio.to_thread(show, codec_flags)
    )
    assert SECRET_RESULT not in without and b64(b"binary/encrypted") in without
    # The CLI's JSON keeps payload data base64: the decrypted JSON string "canary-SECRET-1234".
    assert b64(json.dumps(SECRET_RESULT).encode()) in with_codec


async def page_shows(
    urls_and_texts: list[tuple[str, str]], local_storage: dict[str, str] | None = None
) -> None:
    """Open each url in headless Chromium and wait until the page shows its text."""
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS
        )
        try:
            page = await browser.new_page()
            # What the UI's codec server settings save: they live in the browser only.
            items = json.dumps(local_storage or {})
            await page.add_init_script(
                f"Object.entries({items}).forEach(([k, v]) => localStorage.setItem(k, v))"
            )
            for url, text in urls_and_texts:
                await page.goto(url, timeout=30_000)
                await page.wait_for_function(
                    "(t) => document.body.innerText.includes(t)", arg=text, timeout=30_000
                )
        finally:
            await browser.close()


async def test_web_ui_decrypts_through_the_codec_server_with_no_token_in_argv(
    tmp_path: Path,
) -> None:
    """The real Web UI on the server `waypoint server` starts, the token set in the browser only.

    The UI sends a CORS preflight, then POST <endpoint>/decode with the token in the path; the
    dev server's process arguments and the UI's /api/v1/settings never see the token.
    """
    ui_port = free_port()
    codec = EncryptionCodec({"a": KEY_A}, "a")
    with (
        running_codec_server(codec, [f"http://127.0.0.1:{ui_port}"]) as (host, port),
        start_dev_server(tmp_path / "state", port=free_port(), ui_port=ui_port) as dev,
    ):
        assert TOKEN.encode() not in Path(f"/proc/{dev.process.pid}/cmdline").read_bytes()
        with urllib.request.urlopen(f"{dev.ui_url}/api/v1/settings", timeout=5) as settings:
            assert TOKEN.encode() not in settings.read()
        require_browser()
        ui_client = await Client.connect(
            dev.address, data_converter=encrypted_converter(pydantic_data_converter, codec)
        )
        ok_id, _ = await run_canary(ui_client, fail=False)
        failed_id, _ = await run_canary(ui_client, fail=True)
        base = f"{dev.ui_url}/namespaces/default/workflows"
        await page_shows(
            [(f"{base}/{ok_id}", SECRET_RESULT), (f"{base}/{failed_id}", SECRET_FAILURE)],
            {
                "endpoint": json.dumps(f"http://{host}:{port}/{TOKEN}"),
                "overrideRemoteCodecConfiguration": "true",
            },
        )


async def test_a_codec_server_for_a_namespace_decodes_only_for_a_request_naming_it(
    codec: EncryptionCodec,
) -> None:
    """It decoded a POST naming no namespace for any namespace (issue 34.6)."""
    encrypted = await encrypted_pair(codec)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with running_codec_server(codec, [UI_ORIGIN], namespace="payments") as address:
        status, _, body = await post(address, "/decode", encrypted, **auth, **{"X-Namespace": ""})
        assert status == 400 and b"X-Namespace: payments" in body
        status, _, _ = await post(address, "/decode", encrypted, **auth)  # X-Namespace: default
        assert status == 403
        for path, named in (("/decode", "payments"), ("/payments/decode", "")):
            status, _, body = await post(address, path, encrypted, **auth, **{"X-Namespace": named})
            assert status == 200, path
            assert SECRET_RESULT.encode() in b"".join(p.data for p in payloads_of(body))
