"""A TOML file people edit, checked whole against a schema, refused with a one-line error.

The console's users file and the notifications file are read this way: the whole file must
parse and fit its pydantic model before any of it is used, and an error says
`file:line: where: what`, naming the line that holds the entry at fault (never its value,
which may be a secret).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


def validated(model: type[M], text: str, path: Path, error: Callable[[str], Exception]) -> M:
    """`text` parsed and checked against `model`; else `error(message)` is raised.

    Raises:
        Exception: What `error` makes of the first problem: `file:line: where: what`.
    """
    try:
        return model.model_validate(tomllib.loads(text))
    except tomllib.TOMLDecodeError as err:  # its message names the line
        raise error(f"{path}: {err}") from None
    except ValidationError as err:
        first, *more = err.errors(include_input=False)
        where = _where(first)
        shown = ".".join(str(part) for part in where) or "the file"
        also = f" (and {len(more)} more)" if more else ""
        raise error(f"{path}:{line_of(text, where)}: {shown}: {first['msg']}{also}") from None


def read_text(path: Path, what: str, error: Callable[[str], Exception]) -> str | None:
    """The file's text; None when there is no file (nothing configured yet).

    Raises:
        Exception: What `error` makes of why it does not read, naming `what` it is.
    """
    if not path.exists():
        return None
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise error(f"cannot read {what} {path}: {err}") from None


def _where(error: Mapping[str, Any]) -> tuple[str | int, ...]:
    """A pydantic error's location, less the `[key]` steps pydantic adds for a dict's keys."""
    return tuple(part for part in error.get("loc", ()) if part != "[key]")


def line_of(text: str, where: tuple[str | int, ...]) -> int:
    """The line of `text` that best holds the entry at `where` (1 when none does).

    Each line that reads as TOML alone (a table header, `key = value`) names a path; the line
    whose path shares most of `where` wins, the first of equals. A step of `where` no line
    names (a tagged union's tag, `channels.cfo.email.tls`) may be skipped.
    """
    skips = [where[:i] + where[i + 1 :] for i in range(1, len(where))]
    best, best_line = 0, 1
    table: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            parsed = tomllib.loads(line)
        except tomllib.TOMLDecodeError:
            continue
        if not parsed:
            continue
        path = _first_path(parsed)
        if line.lstrip().startswith("["):
            table = path
        else:
            path = table + path
        shared = max([_shared(path, where), *(_shared(path, w) for w in skips)])
        if shared > best:
            best, best_line = shared, number
    return best_line


def _shared(path: tuple[str, ...], where: tuple[str | int, ...]) -> int:
    count = 0
    for have, want in zip(path, where, strict=False):
        if have != want:
            break
        count += 1
    return count


def _first_path(value: Any) -> tuple[str, ...]:
    path: list[str] = []
    while isinstance(value, dict) and value:
        key = next(iter(value))
        path.append(key)
        value = value[key]
    return tuple(path)
