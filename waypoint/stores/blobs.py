"""One path for every stored byte: confined names, safe reads, verified content, atomic writes.

`BlobStore` is that path; a `Backend` only moves bytes. A blob is named by a 64-hex digest (or
its keyed hash when a `Sealer` is set). Names come from workflow payloads and storage
references, which any client with namespace access can forge, so a name that is not 64 hex
digits is refused before any backend sees it. Every read is checked against the name: what
comes back is the content the name promises, or an error. Sealing happens here too, so both
backends hold only ciphertext when keys are set.

Backends: `Folder` (here: `root/ab/abcdef...`; only regular files directly under the root's
two-letter folders are opened, lstat then `O_NOFOLLOW | O_NONBLOCK`, so a symlink, FIFO or device
is never opened; writes go to a fsynced temporary file renamed into place, so concurrent writers
of one blob all succeed and a reader never sees half a blob) and `waypoint.stores.s3.Bucket`
(S3-compatible object storage, where a PUT is already all-or-nothing).
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
from pathlib import Path, PurePath
from typing import Protocol

from waypoint.stores.sealing import SEAL_MAGIC, Sealer

_DIGEST = re.compile(r"[0-9a-f]{64}")
TEMP_PREFIX = ".tmp-"
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class StoreRefusal(ValueError):
    """A name or entry the store will not use: not a digest, not a regular file, or not verified."""


def is_digest(value: object) -> bool:
    """True for exactly 64 lowercase hex digits, the only names a store accepts."""
    return isinstance(value, str) and _DIGEST.fullmatch(value) is not None


@dataclass(frozen=True)
class Entry:
    """One blob (or a crashed writer's temporary file) in a store, as housekeeping sees it."""

    name: str
    path: PurePath
    """Its file, or its object key in a bucket."""
    mtime: float
    size: int
    temporary: bool = False


class Backend(Protocol):
    """Where a `BlobStore` keeps bytes; it sees only names `BlobStore` has confined."""

    def read(self, name: str) -> bytes | None:
        """The raw bytes stored as `name`, None if absent; `StoreRefusal` if unsafe to read."""
        ...

    def write(self, name: str, data: bytes) -> None:
        """Store `data` as `name`, all or nothing."""
        ...

    def entries(self, temp_grace: float) -> Iterator[Entry]:
        """Every blob, and temporary files older than `temp_grace` seconds."""
        ...

    def touch(self, name: str) -> bool:
        """Make blob `name` young again (it was just reused); False if it is gone."""
        ...

    def delete(self, entry: Entry, cutoff: float) -> bool:
        """Remove one entry if it is still older than `cutoff`; False if it was kept or gone."""
        ...

    def where(self) -> str:
        """The store's location, for messages."""
        ...


class BlobStore:
    """Blobs in a folder or bucket, sealed with `sealer` when encryption keys are configured."""

    def __init__(self, root: Path | Backend, sealer: Sealer | None = None) -> None:
        self.backend: Backend = Folder(root) if isinstance(root, Path) else root
        self.sealer = sealer

    def where(self) -> str:
        """The folder or bucket location, for messages."""
        return self.backend.where()

    def name(self, digest: str) -> str:
        """The file name new content with this digest is written under."""
        return self.sealer.name(digest) if self.sealer else digest

    def names(self, digest: str) -> list[str]:
        """Every file name content with this digest may be stored under, to read it or keep it.

        One per key, then the plain digest: blobs written before encryption was turned on stay
        readable (and gc keeps the ones a run still reaches) instead of vanishing with the switch.
        """
        return [*self.sealer.names(digest), digest] if self.sealer else [digest]

    def path(self, name: str) -> Path:
        """The file of blob `name` in a folder store.

        Raises:
            StoreRefusal: `name` is not 64 hex digits.
        """
        if not isinstance(self.backend, Folder):
            raise TypeError(f"{self.where()} is not a folder")
        return self.backend.path(_confined(name))

    def get(self, name: str, digest_of: Callable[[bytes], str]) -> bytes | None:
        """The verified plaintext of blob `name`, or None when there is none.

        `digest_of` computes the digest the content claims (sha256 of a payload, a transcript
        node's chain hash); the blob is accepted only if that digest names this file.

        Raises:
            StoreRefusal: The name is not a digest, the entry is not a regular file, or the
                content does not match its name (altered on disk, or sealed with a lost key).
        """
        raw = self.backend.read(_confined(name))
        if raw is None:
            return None
        return self._verify(name, raw, digest_of)

    def put(self, digest: str, plain: bytes, digest_of: Callable[[bytes], str]) -> str:
        """Store `plain` (whose digest is `digest`) unless a verified copy exists; its name.

        A reused copy is made young again: gc judges age, and the run reusing it may not hold
        a reference in its history yet, nor close for weeks after another run wrote it.
        """
        name = self.name(digest)
        with contextlib.suppress(StoreRefusal):
            if self.get(name, digest_of) is not None and self.backend.touch(name):
                return name
        data = self.sealer.seal(name, plain) if self.sealer else plain
        self.backend.write(_confined(name), data)
        return name

    def entries(self, temp_grace: float = 3600.0) -> Iterator[Entry]:
        """Every blob, and temporary files older than `temp_grace` seconds (a crashed writer's)."""
        return self.backend.entries(temp_grace)

    def delete(self, entry: Entry, cutoff: float) -> bool:
        """Remove one entry `entries` listed unless reused since (younger than `cutoff`)."""
        return self.backend.delete(entry, cutoff)

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
            raise StoreRefusal(f"blob {name[:12]} does not match its name: altered in the store")
        return plain


def _confined(name: str) -> str:
    if not is_digest(name):
        raise StoreRefusal(f"store names are 64 hex digits; refused {name[:80]!r}")
    return name


class Folder:
    """Blobs as files under `root/ab/`, each written atomically (mode 0600)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(os.path.realpath(root))

    def where(self) -> str:
        """See `Backend`."""
        return str(self.root)

    def path(self, name: str) -> Path:
        """The file of blob `name` (a confined digest)."""
        return self.root / name[:2] / name

    def entries(self, temp_grace: float) -> Iterator[Entry]:
        """See `Backend`."""
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

    def touch(self, name: str) -> bool:
        """See `Backend`."""
        try:
            os.utime(self.path(name), follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def delete(self, entry: Entry, cutoff: float) -> bool:
        """See `Backend`: the blob is moved aside first, so a reuse racing gc is never lost.

        A `touch` before the move shows in the moved file's age and the blob is put back; one
        after it finds no file, so `put` writes the blob again.
        """
        path = Path(entry.path)
        if entry.temporary:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                return True
            return False
        aside = path.with_name(f"{TEMP_PREFIX}gc-{entry.name}")
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return False
        if os.lstat(aside).st_mtime < cutoff:
            os.unlink(aside)
            return True
        with contextlib.suppress(FileExistsError):  # written again meanwhile: same content
            os.link(aside, path)
        os.unlink(aside)
        return False

    def read(self, name: str) -> bytes | None:
        """See `Backend`."""
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

    def write(self, name: str, data: bytes) -> None:
        """See `Backend`."""
        path = self.path(name)
        if not self.root.is_dir():
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path.parent, 0o700)
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
