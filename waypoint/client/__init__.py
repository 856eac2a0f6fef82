"""Talking to runs from outside: start, look, decide, read events (any Temporal client)."""
