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

The codec server that lets the Web UI decrypt for display is in `waypoint._operations.codec_server`.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import logging
import os
from collections.abc import Mapping, Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter, PayloadCodec

from waypoint._security import keyspecs, plaintext
from waypoint._security.refused import REFUSED_ENCODING, refused_payload
from waypoint._security.scrub import EncodedScrubbingFailureConverter
from waypoint.errors import EncryptionKeyError, PayloadDecryptionError

ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
logger = logging.getLogger(__name__)
KEY_BYTES = 32
NONCE_BYTES = 12


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
        """Decrypt each encrypted payload with the key it names; pass others through.

        One this process cannot decrypt becomes a refusal marker instead of an error: a raise
        here fails the whole workflow activation on every retry, so a single forged signal (any
        client with namespace access can send one) would wedge the run for good. The marker
        fails where its value is decoded (`waypoint._security.refused`): the signal is recorded as
        ignored, an update is rejected with the reason, an activity result fails its task
        (retried until the key is added).
        """
        return [self._decrypt_or_refuse(p) for p in payloads]

    def _decrypt_or_refuse(self, payload: Payload) -> Payload:
        encoding = payload.metadata.get("encoding")
        if encoding == REFUSED_ENCODING.encode():  # the store's own refusal: it says why
            return payload
        if encoding != ENCODING:
            # a run may refuse what it asks (`waypoint._security.plaintext`)
            return plaintext.mark(payload)
        try:
            return self.decrypt(payload)
        except (EncryptionKeyError, PayloadDecryptionError) as err:
            logger.warning("undecryptable payload refused: %s", err)
            return refused_payload(f"encrypted payload refused: {err}")

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
    keys: dict[str, bytes] = {}
    for key_id, encoded, where in keyspecs.entries(
        spec,
        source="key spec",
        file_source="key file",
        name="key id",
        form="id:base64key",
        error=EncryptionKeyError,
    ):
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
    converter moves them (scrubbed, `waypoint._security.scrub`) into a payload the codec encrypts.

    Raises:
        ValueError: `base` already has a payload codec, which this would silently drop.
    """
    if base.payload_codec is not None:
        raise ValueError("the base data converter already has a payload codec")
    return dataclasses.replace(
        base,
        payload_codec=codec,
        failure_converter_class=EncodedScrubbingFailureConverter,
    )
