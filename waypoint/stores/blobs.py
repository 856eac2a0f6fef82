"""One path for every stored byte: confined names, safe reads, verified content, atomic writes.

A blob lives at `root/ab/abcdef...`, named by a 64-hex digest (or its keyed hash when a `Sealer`
is set). Names come from workflow payloads and storage references, which any client with
namespace access can forge, so a name that is not 64 hex digits is refused before it touches the
file system, and only regular files directly under the root's two-letter folders are opened
(lstat, then `O_NOFOLLOW | O_NONBLOCK`: a symlink, FIFO or device is never opened). Every read is
checked against the name: what comes back is the content the name promises, or an error.
Writes go to a unique temporary file that is fsynced, renamed into place and the folder fsynced,
so concurrent writers of one blob all succeed and a reader never sees half a blob.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from waypoint.stores.sealing import Sealer

_DIGEST = re.compile(r"[0-9a-f]{64}")
TEMP_PREFIX = ".tmp-"
SEAL_MAGIC = b"WPS1"
"""How a sealed blob starts; no serialized payload (0x0a...) or transcript node (`{`) does."""
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class StoreRefusal(ValueError):
    """A name or entry the store will not use: not a digest, not a regular file, or not verified."""


def is_digest(value: object) -> bool:
    """True for exactly 64 lowercase hex digits, the only names a store accepts."""
    return isinstance(value, str) and _DIGEST.fullmatch(value) is not None


@dataclass(frozen=True)
class Entry:
    """One file in a store, as housekeeping sees it."""

    name: str
    path: Path
    mtime: float
    size: int
    temporary: bool = False


class BlobStore:
    """Blobs under `root`, sealed with `sealer` when encryption keys are configured."""

    def __init__(self, root: Path, sealer: Sealer | None = None) -> None:
        self.root = Path(os.path.realpath(root))
        self.sealer = sealer

    def name(self, digest: str) -> str:
        """The file name new content with this digest is written under."""
        return self.sealer.name(digest) if self.sealer else digest

    def names(self, digest: str) -> list[str]:
        """Every file name content with this digest may be stored under (one per key)."""
        return self.sealer.names(digest) if self.sealer else [digest]

    def path(self, name: str) -> Path:
        """Where the blob `name` lives.

        Raises:
            StoreRefusal: `name` is not 64 hex digits.
        """
        if not is_digest(name):
            raise StoreRefusal(f"store names are 64 hex digits; refused {name[:80]!r}")
        return self.root / name[:2] / name

    def get(self, name: str, digest_of: Callable[[bytes], str]) -> bytes | None:
        """The verified plaintext of blob `name`, or None when there is none.

        `digest_of` computes the digest the content claims (sha256 of a payload, a transcript
        node's chain hash); the blob is accepted only if that digest names this file.

        Raises:
            StoreRefusal: The name is not a digest, the entry is not a regular file, or the
                content does not match its name (altered on disk, or sealed with a lost key).
        """
        raw = self._read(name)
        if raw is None:
            return None
        return self._verify(name, raw, digest_of)

    def put(self, digest: str, plain: bytes, digest_of: Callable[[bytes], str]) -> str:
        """Store `plain` (whose digest is `digest`) unless a verified copy exists; its name."""
        name = self.name(digest)
        with contextlib.suppress(StoreRefusal):
            if self.get(name, digest_of) is not None:
                return name
        data = self.sealer.seal(name, plain) if self.sealer else plain
        self._write(self.path(name), data)
        return name

    def entries(self, temp_grace: float = 3600.0) -> Iterator[Entry]:
        """Every blob, and temporary files older than `temp_grace` seconds (a crashed writer's)."""
        if not self.root.is_dir():
            return
        now = time.time()
        for folder in self.root.iterdir():
            if folder.is_symlink() or not folder.is_dir():
                continue
            for path in folder.iterdir():
                st = path.lstat()
                if not stat.S_ISREG(st.st_mode):
                    continue
                if path.name.startswith(TEMP_PREFIX):
                    if now - st.st_mtime > temp_grace:
                        yield Entry(path.name, path, st.st_mtime, st.st_size, temporary=True)
                elif is_digest(path.name) and folder.name == path.name[:2]:
                    yield Entry(path.name, path, st.st_mtime, st.st_size)

    def _verify(self, name: str, raw: bytes, digest_of: Callable[[bytes], str]) -> bytes:
        if raw.startswith(SEAL_MAGIC):
            if self.sealer is None:
                raise StoreRefusal(f"blob {name[:12]} is sealed and this process has no keys")
            try:
                key_id, plain = self.sealer.open(name, raw)
            except ValueError as err:
                raise StoreRefusal(str(err)) from None
            expected = self.sealer.name(digest_of(plain), key_id)
        else:
            plain, expected = raw, digest_of(raw)
        if not hmac.compare_digest(expected, name):
            raise StoreRefusal(f"blob {name[:12]} does not match its name: altered on disk")
        return plain

    def _read(self, name: str) -> bytes | None:
        path = self.path(name)
        try:
            if not stat.S_ISDIR(os.lstat(path.parent).st_mode):
                raise StoreRefusal(f"{path.parent} is not a plain folder; refused {name[:12]}")
            if not stat.S_ISREG(os.lstat(path).st_mode):
                raise StoreRefusal(f"blob {name[:12]} is not a regular file; not opened")
            fd = os.open(path, _READ_FLAGS)
        except FileNotFoundError:
            return None
        except OSError as err:  # ELOOP: replaced by a symlink between lstat and open
            reason = f"blob {name[:12]} cannot be opened safely: {err.strerror}"
            raise StoreRefusal(reason) from None
        with os.fdopen(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise StoreRefusal(f"blob {name[:12]} is not a regular file; not read")
            return file.read()

    def _write(self, path: Path, data: bytes) -> None:
        # A fresh checkout has no `.waypoint` yet; the root itself is still made 0700 below.
        os.makedirs(self.root.parent, exist_ok=True)
        for folder in (self.root, path.parent):
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder, 0o700)
        fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=path.parent)  # mode 0600
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        folder_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(folder_fd)
        finally:
            os.close(folder_fd)
