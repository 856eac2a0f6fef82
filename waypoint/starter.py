"""Compatibility: console scripts installed before the CLI became `waypoint.cli` import this."""

from waypoint.cli import app, main

__all__ = ["app", "main"]
