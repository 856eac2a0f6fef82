"""The supplier's documents shipped with the demo, served by name and never by path."""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).parent / "data"
DOCUMENTS_DIR = DATA_DIR / "documents"
SANCTIONS_FILE = DATA_DIR / "sanctions.csv"


def document_names(folder: Path = DOCUMENTS_DIR) -> list[str]:
    """The names of the documents in `folder`, sorted so the listing is the same on every host."""
    return sorted(p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))


def read_document(name: str, folder: Path = DOCUMENTS_DIR) -> str:
    """The text of one listed document; anything else, paths above all, is refused.

    Raises:
        ValueError: `name` is not a document in `folder`; the message lists the ones that are.
    """
    names = document_names(folder)
    if name not in names:
        available = ", ".join(names)
        if "/" in name or "\\" in name or ".." in name:
            raise ValueError(
                f"refused document name {name!r}: give a plain name as list_documents returns "
                f"it, not a path. Available: {available}"
            )
        raise ValueError(f"no document named {name!r}. Available: {available}")
    return (folder / name).read_text(encoding="utf-8")
