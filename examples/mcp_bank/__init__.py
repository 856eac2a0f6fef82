"""A small bank as an MCP server, and an agent that uses it over stdio."""
