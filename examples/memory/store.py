"""Claude's memory files in an object store, each change applied once under its effect key.

A file's bytes are a blob in a `waypoint.stores.blobs.BlobStore` (over a `Folder`, or a
`waypoint.stores.s3.Bucket`), so they get the store's confined names, verified reads and, with a
`Sealer`, ciphertext at rest. A blob is named by its digest only, so which path holds which blob
is kept in a small sqlite index beside it: `files` (path -> blob, size) and `applied` (effect key
-> the answer given). A change reads the index, writes its new blob, moves the paths and records
its key in one `BEGIN IMMEDIATE` transaction, so it happens once: a retry, or a worker killed
after the commit running the call again, finds its key and gives the same answer without
touching a file; a worker killed before the commit leaves at most a blob no path names.

Why sqlite and not an index blob per change: the newest index would still need one mutable name,
and a `Backend` has none (nor a compare-and-swap to move it safely); sqlite keeps that name and
the keys in one transaction. The index is a local file, so workers that share no disk need these
two tables in a shared database, even with the blobs in a bucket.

Paths are confined to `/memories`: any other, `..` out of it included, is an error result the
model reads. A directory is the prefix of a file's path, so it exists while a file is in it.
Deleting forgets a path; its blob stays in the store (another path may hold the same bytes) until
a sweep of blobs no path names, which this example leaves out. Answers are worded as the local
memory tool in Anthropic's Python SDK (`anthropic.lib.tools`) words them, the shapes its docs
describe; a directory's size in a listing is what its files hold.
"""

from __future__ import annotations

import hashlib
import posixpath
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeAlias

from pydantic import BaseModel

from waypoint.stores.blobs import BlobStore

ROOT = "/memories"
MAX_LINES = 999_999
WIDTH = len(str(MAX_LINES))
"""Line numbers are right-aligned to this width, then a tab, as Anthropic's tools print them."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, blob TEXT NOT NULL, size INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS applied (
    effect_key TEXT PRIMARY KEY, result TEXT NOT NULL, error INTEGER NOT NULL
);
"""

_Tree: TypeAlias = "dict[str, _Tree | int]"
"""A directory listing: a name is a file (its size) or a directory."""

NEEDS = {
    "view": ("path",),
    "create": ("path", "file_text"),
    "str_replace": ("path", "old_str", "new_str"),
    "insert": ("path", "insert_line", "insert_text"),
    "delete": ("path",),
    "rename": ("old_path", "new_path"),
}


class MemoryCommand(BaseModel):
    """One call of Claude's memory tool (`memory_20250818`): a command and the fields it uses."""

    command: Literal["view", "create", "str_replace", "insert", "delete", "rename"]
    path: str | None = None
    view_range: list[int] | None = None
    """`[first, last]` lines of a file to view, 1-based; `last` -1 is the end."""
    file_text: str | None = None
    old_str: str | None = None
    new_str: str | None = None
    insert_line: int | None = None
    """Insert after this line; 0 is before the first."""
    insert_text: str | None = None
    old_path: str | None = None
    new_path: str | None = None


@dataclass(frozen=True)
class Outcome:
    """What the model reads back, and whether it is an error result."""

    text: str
    error: bool = False


class Refused(Exception):
    """A command the memory does not carry out; its message is the model's error result."""


class MemoryStoreError(Exception):
    """The index names a blob the store no longer holds: an operator's problem, not the model's."""


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def confined(path: str) -> str:
    """`path` normalised, if it is `/memories` or under it.

    Raises:
        Refused: It is outside `/memories`, or leaves it through `..`.
    """
    if any(ord(c) < 32 for c in path):
        raise Refused(f"Path {path!r} has a control character")
    if path != ROOT and not path.startswith(ROOT + "/"):
        raise Refused(f"Path must start with /memories, got: {path}")
    normal = posixpath.normpath(path)
    if normal != ROOT and not normal.startswith(ROOT + "/"):
        raise Refused(f"Path {path} would escape /memories directory")
    return normal


def _parents(path: str) -> Iterator[str]:
    """The directories between `/memories` and `path`, outermost first."""
    parts = path[len(ROOT) + 1 :].split("/")
    for i in range(1, len(parts)):
        yield "/".join([ROOT, *parts[:i]])


def _size(n: int) -> str:
    """A size as the memory tool prints it: `0B`, `512B`, `1.5K`, `2M`."""
    unit = min((max(n, 1).bit_length() - 1) // 10, 3)
    value = n / 1024**unit
    shown = str(int(value)) if value == int(value) else f"{value:.1f}"
    return shown + "BKMG"[unit]


def _numbered(lines: list[str], first: int) -> str:
    return "\n".join(f"{str(n).rjust(WIDTH)}\t{line}" for n, line in enumerate(lines, first))


class MemoryStore:
    """The `/memories` tree: file bytes in `blobs`, paths and applied effect keys in `index`."""

    def __init__(self, blobs: BlobStore, index: Path) -> None:
        self.blobs = blobs
        self.index = index
        index.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as db:
            db.executescript(SCHEMA)

    def where(self) -> str:
        """The blobs' folder or bucket and the index file, for messages."""
        return f"{self.blobs.where()} (index {self.index})"

    def run(self, command: MemoryCommand, effect_key: str | None) -> Outcome:
        """Carry out one command; a change happens at most once per `effect_key`.

        Raises:
            MemoryStoreError: A file's blob is gone from the store.
            waypoint.errors.StoreUnavailableError: The bucket kept failing; a retry under the
                same effect key is safe.
        """
        try:
            missing = [f for f in NEEDS[command.command] if getattr(command, f) is None]
            if missing:
                raise Refused(f"The {command.command} command needs {', '.join(missing)}")
            if command.command == "view":
                with closing(self._connect()) as db:
                    return Outcome(self._view(db, confined(command.path or ""), command))
            for path in (command.path, command.old_path, command.new_path):
                if path is not None:
                    confined(path)
            return self._once(command, effect_key)
        except Refused as err:
            return Outcome(str(err), error=True)

    def read(self, path: str) -> str | None:
        """The text of the file at `path`, None if there is none.

        Raises:
            Refused: `path` is outside `/memories`.
        """
        path = confined(path)
        with closing(self._connect()) as db:
            return self._text(db, path) if self._file(db, path) else None

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.index, timeout=30, isolation_level=None)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One writer at a time: calls of one reply may run at once and edit the same file."""
        with closing(self._connect()) as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _once(self, command: MemoryCommand, effect_key: str | None) -> Outcome:
        with self._transaction() as db:
            if effect_key is not None:
                row = db.execute(
                    "SELECT result, error FROM applied WHERE effect_key = ?", (effect_key,)
                ).fetchone()
                if row is not None:
                    return Outcome(row[0], bool(row[1]))
            try:
                outcome = Outcome(self._change(db, command))
            except Refused as err:
                outcome = Outcome(str(err), error=True)
            if effect_key is not None:
                db.execute(
                    "INSERT INTO applied VALUES (?, ?, ?)",
                    (effect_key, outcome.text, int(outcome.error)),
                )
            return outcome

    def _change(self, db: sqlite3.Connection, c: MemoryCommand) -> str:
        path = confined((c.old_path if c.command == "rename" else c.path) or "")
        match c.command:
            case "create":
                return self._create(db, path, c.file_text or "")
            case "str_replace":
                return self._str_replace(db, path, c.old_str or "", c.new_str or "")
            case "insert":
                return self._insert(db, path, c.insert_line or 0, c.insert_text or "")
            case "delete":
                return self._delete(db, path)
            case _:
                return self._rename(db, path, confined(c.new_path or ""))

    def _file(self, db: sqlite3.Connection, path: str) -> tuple[str, int] | None:
        return db.execute("SELECT blob, size FROM files WHERE path = ?", (path,)).fetchone()

    def _under(self, db: sqlite3.Connection, path: str) -> list[tuple[str, int]]:
        """Every file below directory `path`: (path, size), by path."""
        prefix = path + "/"
        return db.execute(
            "SELECT path, size FROM files WHERE substr(path, 1, ?) = ? ORDER BY path",
            (len(prefix), prefix),
        ).fetchall()

    def _is_dir(self, db: sqlite3.Connection, path: str) -> bool:
        return path == ROOT or bool(self._under(db, path))

    def _text(self, db: sqlite3.Connection, path: str) -> str:
        found = self._file(db, path)
        if found is None:
            if self._is_dir(db, path):
                raise Refused(f"The path {path} is not a file.")
            raise Refused(f"The path {path} does not exist. Please provide a valid path.")
        data = self.blobs.get(found[0], _digest)
        if data is None:
            raise MemoryStoreError(
                f"{path} names blob {found[0][:12]}, which {self.where()} no longer holds"
            )
        return data.decode()

    def _write(self, db: sqlite3.Connection, path: str, text: str) -> None:
        data = text.encode()
        name = self.blobs.put(_digest(data), data, _digest)
        db.execute("INSERT OR REPLACE INTO files VALUES (?, ?, ?)", (path, name, len(data)))

    def _no_file_above(self, db: sqlite3.Connection, path: str) -> None:
        for parent in _parents(path):
            if self._file(db, parent):
                raise Refused(f"The path {parent} is a file, not a directory")

    def _view(self, db: sqlite3.Connection, path: str, c: MemoryCommand) -> str:
        if self._file(db, path):
            lines = self._text(db, path).split("\n")
            if len(lines) > MAX_LINES:
                raise Refused(f"File {path} exceeds maximum line limit of 999,999 lines.")
            first = 1
            if c.view_range and len(c.view_range) == 2:
                first = max(1, c.view_range[0])
                end = len(lines) if c.view_range[1] == -1 else c.view_range[1]
                lines = lines[first - 1 : end]
            return f"Here's the content of {path} with line numbers:\n" + _numbered(lines, first)
        if not self._is_dir(db, path):
            raise Refused(f"The path {path} does not exist. Please provide a valid path.")
        files = self._under(db, path)
        rows = [f"{_size(sum(size for _, size in files))}\t{path}"]
        for rel, size in _listing(files, len(path) + 1):
            rows.append(f"{_size(size)}\t{path}/{rel}")
        header = (
            f"Here're the files and directories up to 2 levels deep in {path}, "
            "excluding hidden items:"
        )
        return header + "\n" + "\n".join(rows)

    def _create(self, db: sqlite3.Connection, path: str, text: str) -> str:
        if self._is_dir(db, path):
            raise Refused(f"The path {path} is a directory; give the path of a file")
        if self._file(db, path):
            raise Refused(f"File {path} already exists")
        self._no_file_above(db, path)
        self._write(db, path, text)
        return f"File created successfully at: {path}"

    def _str_replace(self, db: sqlite3.Connection, path: str, old: str, new: str) -> str:
        content = self._text(db, path)
        count = content.count(old) if old else 0
        if count == 0:
            raise Refused(
                f"No replacement was performed, old_str `{old}` did not appear verbatim in {path}."
            )
        if count > 1:
            at, lines = content.find(old), []
            while at != -1:
                lines.append(content[:at].count("\n") + 1)
                at = content.find(old, at + 1)
            raise Refused(
                f"No replacement was performed. Multiple occurrences of old_str `{old}` in lines: "
                f"{', '.join(map(str, lines))}. Please ensure it is unique"
            )
        changed = content[: content.find(old)].count("\n")
        content = content.replace(old, new)
        self._write(db, path, content)
        lines = content.split("\n")
        first = max(0, changed - 2)
        snippet = _numbered(lines[first : min(len(lines), changed + 3)], first + 1)
        return (
            "The memory file has been edited. Here is the snippet showing the change "
            "(with line numbers):\n" + snippet
        )

    def _insert(self, db: sqlite3.Connection, path: str, line: int, text: str) -> str:
        lines = self._text(db, path).split("\n")
        if lines[-1] == "":
            lines.pop()
        if not 0 <= line <= len(lines):
            raise Refused(
                f"Invalid `insert_line` parameter: {line}. "
                f"It should be within the range [0, {len(lines)}]."
            )
        lines.insert(line, text.rstrip("\n"))
        self._write(db, path, "\n".join(lines) + "\n")
        return f"The file {path} has been edited."

    def _delete(self, db: sqlite3.Connection, path: str) -> str:
        if path == ROOT:
            raise Refused("Cannot delete the /memories directory itself")
        if self._file(db, path):
            db.execute("DELETE FROM files WHERE path = ?", (path,))
        elif under := self._under(db, path):
            db.executemany("DELETE FROM files WHERE path = ?", [(p,) for p, _ in under])
        else:
            raise Refused(f"The path {path} does not exist")
        return f"Successfully deleted {path}"

    def _rename(self, db: sqlite3.Connection, old: str, new: str) -> str:
        if old == ROOT:
            raise Refused("Cannot rename the /memories directory itself")
        if self._file(db, new) or self._is_dir(db, new):
            raise Refused(f"The destination {new} already exists")
        if new.startswith(old + "/"):
            raise Refused(f"Cannot move {old} into itself ({new})")
        self._no_file_above(db, new)
        moves = [(old, new)] if self._file(db, old) else []
        moves = moves or [(p, new + p[len(old) :]) for p, _ in self._under(db, old)]
        if not moves:
            raise Refused(f"The path {old} does not exist")
        db.executemany("UPDATE files SET path = ? WHERE path = ?", [(b, a) for a, b in moves])
        return f"Successfully renamed {old} to {new}"


def _listing(files: list[tuple[str, int]], cut: int) -> Iterator[tuple[str, int]]:
    """Files and directories two levels deep, hidden ones left out, each level by name."""
    tree: _Tree = {}
    for path, size in files:
        *folders, leaf = path[cut:].split("/")
        node = tree
        for folder in folders:
            child = node.setdefault(folder, {})
            assert isinstance(child, dict)  # a file above a file is refused when it is made
            node = child
        node[leaf] = size
    yield from _walk(tree, "", 1)


def _walk(node: _Tree, prefix: str, depth: int) -> Iterator[tuple[str, int]]:
    for name in sorted(node):
        if name.startswith("."):
            continue
        child = node[name]
        if isinstance(child, int):
            yield f"{prefix}{name}", child
            continue
        yield f"{prefix}{name}/", _total(child)
        if depth < 2:
            yield from _walk(child, f"{prefix}{name}/", depth + 1)


def _total(node: _Tree) -> int:
    return sum(v if isinstance(v, int) else _total(v) for v in node.values())
