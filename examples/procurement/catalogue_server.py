"""The catalogue's MCP server: `python -m examples.procurement.catalogue_server DB` (stdio).

It seeds the SQLite catalogue at DB if it is new and offers two read tools; the agent classifies
both as `read` (`agent.py`), so their results are recorded once and never re-read on resume.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from examples.procurement.catalogue import Catalogue


def build(db: Path) -> MCPServer:
    """The server over the catalogue file `db`."""
    catalogue = Catalogue(db)
    server = MCPServer("catalogue")

    @server.tool()
    def search_catalogue(query: str) -> dict[str, Any]:
        """Search the supplier catalogue: items whose name or supplier holds every word."""
        items = catalogue.search(query)
        found = [{k: i[k] for k in ("sku", "name", "supplier")} for i in items]
        return {"query": query, "items": found}

    @server.tool()
    def get_item(sku: str) -> dict[str, Any]:
        """One catalogue item by SKU: supplier, its country, unit price in EUR, lead time."""
        item = catalogue.get(sku)
        if item is None:
            raise ToolError(f"no item with SKU {sku!r}; search_catalogue lists them")
        return item

    return server


if __name__ == "__main__":
    build(Path(sys.argv[1])).run("stdio")
