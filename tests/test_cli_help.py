"""Help reads cleanly: no type placeholders like `<int>` or `<bool>` in any command's options."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from waypoint._cli import app

COMMANDS = sorted(c.name or c.callback.__name__ for c in app.registered_commands if c.callback)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_has_no_placeholder_noise(command: str) -> None:
    shown = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "100"})
    assert shown.exit_code == 0, shown.output
    assert not re.findall(r"<[a-z][\w\[\], ]*>", shown.output), shown.output
