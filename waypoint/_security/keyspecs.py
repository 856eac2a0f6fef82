"""Key specs: `name:BASE64` entries, separated by commas or newlines, inline or in `@file`.

The one parser of both key lists the library reads: payload encryption keys named by key id
(`waypoint._security.codec.load_keys`) and reviewers' public keys named by reviewer
(`waypoint._security.signing.load_public_keys`). Decoding each key is the caller's part. Standard
library only, so it loads without `cryptography`. Messages say where an entry stands, never its key.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple


class Entry(NamedTuple):
    """One entry of a key spec: its name, its key as written, and where it stands."""

    name: str
    encoded: str
    where: str
    """For messages: `key spec, entry 2 (key id 'old')`."""


def spec_text(spec: str, source: str, file_source: str, error: type[Exception]) -> tuple[str, str]:
    """The spec's text (read from the file when it is `@path`) and where it came from.

    Raises:
        error: The file cannot be read.
    """
    if not spec.startswith("@"):
        return spec, source
    path = Path(spec[1:]).expanduser()
    try:
        return path.read_text(), f"{file_source} {path}"
    except OSError as err:
        raise error(f"cannot read {file_source} {path}: {err.strerror}") from None


def entries(
    spec: str,
    *,
    source: str,
    file_source: str,
    name: str,
    form: str,
    error: type[Exception],
    names_hold_colons: bool = False,
) -> list[Entry]:
    """The spec's entries in order, each name once; blank lines and `#` lines are skipped.

    Args:
        spec: The entries, or `@path` of a file holding them.
        source: What messages call an inline spec (`key spec`).
        file_source: What they call a file, before its path (`key file`).
        name: What an entry's name is (`key id`, `reviewer`).
        form: An entry's form, for messages (`id:base64key`).
        error: The exception to raise.
        names_hold_colons: Split at the last colon, so a name may hold one (`team:ada`). Only
            for public keys: split there, a mistyped secret key could be echoed as a name.

    Raises:
        error: The spec is empty or unreadable, or an entry is malformed or repeats a name.
    """
    text, source = spec_text(spec, source, file_source, error)
    written = [
        entry.strip()
        for line in text.splitlines()
        if not line.lstrip().startswith("#")
        for entry in line.split(",")
        if entry.strip()
    ]
    if not written:
        raise error(f"{source} has no keys; expected {form}[,{form}]")
    found: dict[str, Entry] = {}
    for number, entry in enumerate(written, start=1):
        split = entry.rpartition if names_hold_colons else entry.partition
        key_name, sep, encoded = (part.strip() for part in split(":"))
        where = f"{source}, entry {number}" + (f" ({name} {key_name!r})" if sep else "")
        if not sep or not key_name or not encoded:
            raise error(f"{where} is not of the form {form}")
        if key_name in found:
            raise error(f"{where} repeats a {name}")
        found[key_name] = Entry(key_name, encoded, where)
    return list(found.values())
