"""`waypoint console`: people decide and watch runs in a browser; applications use its API.

Rooms: `people` (users file, tokens, OIDC roles), `sessions` (cookies, CSRF, throttling),
`access` (who asks, may they), `problems` (RFC 9457 refusals), `data` (what Temporal says),
`api`, `events` (SSE), `pages`, `signin`, `review` (notices' one-time links), `app` (the ASGI
app), `serve` (uvicorn).
"""

from pathlib import Path

DEFAULT_PORT = 8234
USERS_FILE = Path(".waypoint/console-users.toml")
"""Imported by the CLI with nothing else of the console's: `app` loads authlib, cryptography."""
