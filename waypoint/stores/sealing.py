"""Encryption at rest for the stores, with the payload codec's keys (`WAYPOINT_ENCRYPTION_KEYS`).

A sealed blob is ``WPS1 | len(key id) | key id | 12-byte nonce | AES-256-GCM ciphertext``; the
blob's file name is the additional data, so a blob moved to another name fails authentication.
File names are keyed: ``HMAC-SHA256(name key, content digest)``, where the name key is derived
from the key material, so nobody without the key can confirm a guess about the content by
hashing it. The first key seals and names; every key still opens and finds what it sealed.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping

from waypoint.errors import EncryptionKeyError

NONCE_BYTES = 12
_NAME_LABEL = b"waypoint store names v1"


SEAL_MAGIC = b"WPS1"
"""How a sealed blob starts; no serialized payload (0x0a...) or transcript node (`{`) does."""


class SealError(ValueError):
    """A sealed blob does not open: unknown key id, altered bytes, or moved to another name."""


class Sealer:
    """Seals and opens blobs, and names them with keyed hashes."""

    def __init__(self, keys: Mapping[str, bytes], active_key_id: str) -> None:
        if active_key_id not in keys:
            raise EncryptionKeyError(f"active key id {active_key_id!r} is not among the keys")
        # Imported here, not at the top: `blobs` imports this module, and the workflow sandbox
        # (which re-imports what a worker's modules import) must never load `cryptography`.
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.active_key_id = active_key_id
        # Active first: lookups by name try the newest key before the ones kept for reading.
        order = [active_key_id, *(k for k in keys if k != active_key_id)]
        self._ciphers = {k: AESGCM(keys[k]) for k in order}
        self._name_keys = {
            k: hmac.new(keys[k], _NAME_LABEL, hashlib.sha256).digest() for k in order
        }

    def name(self, digest: str, key_id: str | None = None) -> str:
        """The file name for content with this sha256 digest, under one key (default: active)."""
        key = self._name_keys[key_id or self.active_key_id]
        return hmac.new(key, digest.encode(), hashlib.sha256).hexdigest()

    def names(self, digest: str) -> list[str]:
        """The digest's file name under every key, the active key's first."""
        return [self.name(digest, k) for k in self._name_keys]

    def seal(self, name: str, plain: bytes) -> bytes:
        """Encrypt `plain` with the active key, bound to the file `name`."""
        kid = self.active_key_id.encode()
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[self.active_key_id].encrypt(nonce, plain, name.encode())
        return SEAL_MAGIC + bytes([len(kid)]) + kid + nonce + sealed

    def open(self, name: str, blob: bytes) -> tuple[str, bytes]:
        """The key id and plaintext of a sealed blob read from the file `name`.

        Raises:
            SealError: The key id is unknown, or the blob was altered or renamed.
        """
        size = blob[len(SEAL_MAGIC)] if len(blob) > len(SEAL_MAGIC) else 0
        start = len(SEAL_MAGIC) + 1
        key_id = blob[start : start + size].decode(errors="replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise SealError(f"blob {name[:12]} is sealed with key id {key_id!r}, not configured")
        nonce = blob[start + size : start + size + NONCE_BYTES]
        from cryptography.exceptions import InvalidTag

        try:
            return key_id, cipher.decrypt(nonce, blob[start + size + NONCE_BYTES :], name.encode())
        except (InvalidTag, ValueError):
            raise SealError(f"blob {name[:12]} fails authentication: altered or renamed") from None


def sealer_from_spec(spec: str | None) -> Sealer | None:
    """The sealer for a `WAYPOINT_ENCRYPTION_KEYS` spec (`waypoint._security.codec.load_keys`)."""
    if not spec:
        return None
    from waypoint._security.codec import load_keys

    keys, active = load_keys(spec)
    return Sealer(keys, active)
