"""The README's agent: pays invoices from a small SQLite bank, offline with a script.

`waypoint worker --app examples.payments:agents` serves it; `python -m examples.payments.run`
runs it end to end against a running server.
"""

from examples.payments.agent import agents

__all__ = ["agents"]
