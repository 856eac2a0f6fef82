"""Opt-in payload encryption, so Temporal's history and the Web UI hold only ciphertext.

`EncryptionCodec` encrypts every payload with AES-256-GCM before it leaves the process (workflow
and activity inputs and results, signals, queries, heartbeat details, and what goes to external
storage); `encrypted_converter` also moves failure messages and stack traces into an encrypted
payload. Not encrypted, because the server must read them: workflow and activity ids and types,
task queues, timestamps and search attributes (`WaypointAgent`, `WaypointStatus`, ...).

Keys come from `load_keys`: ``id1:BASE64,id2:BASE64`` or ``@/path/to/file`` with the same
entries, one per line. The first is the active key; the others only decrypt. To rotate, put the
new key first and keep the old ones for as long as any history (retention included) or stored
blob encrypted with them may be read: a run that started before the rotation replays its history
through the old key. Make a key with ``python -c "import base64, os;
print(base64.b64encode(os.urandom(32)).decode())"``.

The wire format matches Temporal's encryption samples: metadata ``encoding: binary/encrypted``
and ``encryption-key-id: <id>``, data = 12-byte nonce + ciphertext of the serialized payload.

The codec server lets the Web UI and the `temporal` CLI decrypt for display, following the codec
server protocol (Payloads as proto3 JSON; the final path segment picks ``/encode`` or
``/decode``, so ``/{namespace}/decode`` works too; the UI sends ``X-Namespace``)::

    server = serve_codec(codec, token, "127.0.0.1", 8081)
    server.serve_forever()  # from another thread: server.shutdown(); then server.server_close()

Every POST needs the token, as ``Authorization: Bearer <token>`` or as a path segment before the
endpoint. The CLI sends the header:
``temporal workflow show -w RUN --codec-endpoint http://127.0.0.1:8081 --codec-auth "Bearer
TOKEN"``. The Web UI cannot: it sends ``Authorization`` only with its "pass access token"
setting over HTTPS, and then it carries the UI login's own OIDC access token. So point the UI
at an endpoint with the token in its path: ``temporal server start-dev --ui-codec-endpoint
http://127.0.0.1:8081/TOKEN`` (the UI posts to ``<endpoint>/decode``). Anyone who can open that
UI can then decrypt through it, which is what the UI is for; keep both on loopback or behind
your own authentication. The UI's origin (``http://localhost:8233`` and ``http://127.0.0.1:8233``
for the dev server) must be in ``allowed_origins``: the browser sends a CORS preflight first.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hmac
import json
import logging
import os
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadCodec,
)

from waypoint.errors import WaypointError

ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
KEY_BYTES = 32
NONCE_BYTES = 12
DEV_UI_ORIGINS = ("http://localhost:8233", "http://127.0.0.1:8233")
MAX_BODY_BYTES = 64 * 1024 * 1024
"""Largest request the codec server reads; Temporal caps a payload at a few MiB."""

logger = logging.getLogger(__name__)


class EncryptionKeyError(WaypointError, ValueError):
    """Key material is malformed, or a payload names a key this process does not have."""


class PayloadDecryptionError(WaypointError):
    """An encrypted payload failed authentication: the wrong key for its id, or altered data."""


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over whole serialized payloads, with key ids so keys can rotate."""

    def __init__(self, keys: Mapping[str, bytes], active_key_id: str) -> None:
        for key_id, key in keys.items():
            if not key_id:
                raise EncryptionKeyError("an encryption key has an empty key id")
            if len(key) != KEY_BYTES:
                raise EncryptionKeyError(
                    f"encryption key {key_id!r} is {len(key)} bytes; AES-256 needs {KEY_BYTES}"
                )
        if active_key_id not in keys:
            raise EncryptionKeyError(
                f"active key id {active_key_id!r} is not among the keys ({', '.join(keys)})"
            )
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keys.items()}
        self.active_key_id = active_key_id

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Encrypt each payload with the active key."""
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Decrypt each encrypted payload with the key it names; pass others through."""
        return [self.decrypt(p) for p in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        """One payload, encrypted with the active key under a fresh random nonce."""
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[self.active_key_id].encrypt(nonce, payload.SerializeToString(), None)
        return Payload(
            metadata={"encoding": ENCODING, KEY_ID_METADATA: self.active_key_id.encode()},
            data=nonce + sealed,
        )

    def decrypt(self, payload: Payload) -> Payload:
        """One payload decrypted, or returned unchanged if it is not encrypted."""
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        key_id = payload.metadata.get(KEY_ID_METADATA, b"").decode(errors="replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise EncryptionKeyError(
                f"payload was encrypted with key id {key_id!r}, which this process does not "
                f"have (it has {', '.join(self._ciphers)}); add that key to the key spec"
            )
        nonce, sealed = payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:]
        try:
            plain = cipher.decrypt(nonce, sealed, None)
        except (InvalidTag, ValueError):
            raise PayloadDecryptionError(
                f"payload encrypted with key id {key_id!r} failed authentication: the key "
                "under that id is not the one it was encrypted with, or the payload was altered"
            ) from None
        return Payload.FromString(plain)


def load_keys(spec: str) -> tuple[dict[str, bytes], str]:
    """Parse ``id:base64key`` entries (or ``@file`` holding them) into keys and the active id.

    Entries are separated by commas or newlines; the first is the active key. Blank lines and
    lines starting with ``#`` in a file are skipped. Error messages never include key material.

    Raises:
        EncryptionKeyError: The spec or file is empty or unreadable, or an entry is malformed,
            repeated, not base64 or not 32 bytes long.
    """
    source = "key spec"
    if spec.startswith("@"):
        path = Path(spec[1:]).expanduser()
        source = f"key file {path}"
        try:
            spec = path.read_text()
        except OSError as err:
            raise EncryptionKeyError(f"cannot read {source}: {err.strerror}") from None
    entries = [
        entry.strip()
        for line in spec.splitlines()
        if not line.lstrip().startswith("#")
        for entry in line.split(",")
        if entry.strip()
    ]
    if not entries:
        raise EncryptionKeyError(f"{source} has no keys; expected id:base64key[,id:base64key]")
    keys: dict[str, bytes] = {}
    for number, entry in enumerate(entries, start=1):
        key_id, sep, encoded = (part.strip() for part in entry.partition(":"))
        where = f"{source}, entry {number}" + (f" (key id {key_id!r})" if sep else "")
        if not sep or not key_id or not encoded:
            raise EncryptionKeyError(f"{where} is not of the form id:base64key")
        if key_id in keys:
            raise EncryptionKeyError(f"{where} repeats a key id")
        try:
            # Accept the URL-safe alphabet too: both are common ways to print 32 random bytes.
            key = base64.b64decode(encoded.replace("-", "+").replace("_", "/"), validate=True)
        except (binascii.Error, ValueError):
            raise EncryptionKeyError(f"{where} is not valid base64") from None
        if len(key) != KEY_BYTES:
            raise EncryptionKeyError(
                f"{where} decodes to {len(key)} bytes; it must be {KEY_BYTES} bytes (AES-256)"
            )
        keys[key_id] = key
    return keys, next(iter(keys))


def encrypted_converter(base: DataConverter, codec: EncryptionCodec) -> DataConverter:
    """`base` with `codec` and encoded failure attributes; its external storage is kept.

    Failure messages and stack traces otherwise sit in history as plain text, so the failure
    converter moves them into a payload the codec encrypts.

    Raises:
        ValueError: `base` already has a payload codec, which this would silently drop.
    """
    if base.payload_codec is not None:
        raise ValueError("the base data converter already has a payload codec")
    return dataclasses.replace(
        base,
        payload_codec=codec,
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


def codec_app(
    codec: EncryptionCodec, token: str, allowed_origins: Sequence[str] = DEV_UI_ORIGINS
) -> type[BaseHTTPRequestHandler]:
    """A request handler class serving the codec server protocol for `codec`, behind `token`."""
    if not token:
        raise ValueError("the codec server needs a non-empty token")
    expected_header = f"Bearer {token}".encode()
    token_bytes = token.encode()
    origins = frozenset(origin.rstrip("/") for origin in allowed_origins)

    class CodecHandler(BaseHTTPRequestHandler):
        """Answers POST .../encode and .../decode, and the browser's CORS preflight."""

        server_version = "waypoint-codec"
        sys_version = ""
        timeout = 30

        def do_OPTIONS(self) -> None:
            """Answer the CORS preflight the UI sends before each POST."""
            if self._refused_origin() or self._route() is None:
                return
            self.send_response(204)
            self._cors_headers(preflight=True)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            """Decrypt or encrypt the posted payloads, once the token checks out."""
            if self._refused_origin():
                return
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                return self._reply(411, {"message": "a numeric Content-Length is required"})
            if not 0 <= length <= MAX_BODY_BYTES:
                return self._reply(413, {"message": f"body over {MAX_BODY_BYTES} bytes"})
            # Read before any refusal: closing on an unread body resets the connection.
            body = self.rfile.read(length)
            segments = self._route()
            if segments is None:
                return
            if not self._authorized(segments[:-1]):
                return self._reply(401, {"message": "missing or wrong codec server token"})
            try:
                request = json_format.Parse(body, Payloads(), ignore_unknown_fields=True)
            except (json_format.ParseError, UnicodeDecodeError) as err:
                return self._reply(400, {"message": f"body is not Payloads JSON: {err}"})
            convert = codec.encrypt if segments[-1] == "encode" else codec.decrypt
            try:
                result = Payloads(payloads=[convert(p) for p in request.payloads])
            except (EncryptionKeyError, PayloadDecryptionError) as err:
                return self._reply(400, {"message": str(err)})
            self._reply(200, json_format.MessageToDict(result))

        def _route(self) -> list[str] | None:
            """The path's segments if it ends in encode or decode; otherwise answer 404."""
            path = urlsplit(self.path).path
            segments = [unquote(s) for s in path.split("/") if s]
            if segments and segments[-1] in ("encode", "decode"):
                return segments
            self._reply(404, {"message": "not found; POST to .../encode or .../decode"})
            return None

        def _authorized(self, prefix: Sequence[str]) -> bool:
            header = self.headers.get("Authorization", "").encode()
            if hmac.compare_digest(header, expected_header):
                return True
            return any(hmac.compare_digest(s.encode(), token_bytes) for s in prefix)

        def _refused_origin(self) -> bool:
            """Answer 403 to a browser on an origin that is not allowed."""
            origin = self.headers.get("Origin")
            if origin is None or origin in origins:
                return False
            self._reply(403, {"message": f"origin {origin} is not allowed"})
            return True

        def _cors_headers(self, preflight: bool = False) -> None:
            origin = self.headers.get("Origin")
            if origin is None or origin not in origins:
                return
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Access-Control-Allow-Credentials", "true")
            self.send_header("Vary", "Origin")
            if preflight:
                self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")
                self.send_header(
                    "Access-Control-Allow-Headers",
                    "Authorization, Authorization-Extras, Content-Type, X-Namespace",
                )
                self.send_header("Access-Control-Max-Age", "600")
                # Chrome asks this when a public page (e.g. Temporal Cloud's UI) calls loopback.
                if self.headers.get("Access-Control-Request-Private-Network") == "true":
                    self.send_header("Access-Control-Allow-Private-Network", "true")

        def _reply(self, status: int, body: dict[str, object]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self._cors_headers()
            if status == 401:
                self.send_header("WWW-Authenticate", 'Bearer realm="waypoint-codec"')
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            """Log without the path, which may hold the token."""
            logger.debug("codec server %s %s", self.command, code)

        def log_message(self, format: str, *args: object) -> None:
            """Send http.server's own messages to logging instead of stderr."""
            logger.warning("codec server: " + format, *args)

    return CodecHandler


def serve_codec(
    codec: EncryptionCodec,
    token: str,
    host: str = "127.0.0.1",
    port: int = 8081,
    allowed_origins: Sequence[str] = DEV_UI_ORIGINS,
) -> ThreadingHTTPServer:
    """A bound codec server, not yet serving: call `serve_forever()`; port 0 picks a free one."""
    return ThreadingHTTPServer((host, port), codec_app(codec, token, allowed_origins))
