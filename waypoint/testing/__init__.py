"""Test your agents offline, and prove them: the scripted model and the kill test.

The scripted model plays an agent's script, one reply per turn, labelled `scripted` in the
ledger so nobody mistakes it for Claude: `reply(text(...), tool_use(...))` is one reply, and an
entry may be a function of the `ModelRequest` (`last_tool_results`, `text_of`) returning a
`ModelResponse`, to react to what tools returned.

`run_kill_test` runs your agent once uninterrupted, then again while SIGKILLing its worker at
the points you choose, and reports whether the result and the ledger match, whether every
effect happened exactly once (your `count_effects(effect_key)` asks the downstream system), and
which steps ran again: only work that was in flight at a kill may.
"""

from __future__ import annotations

from waypoint.protocol import ModelRequest, ModelResponse, text_of
from waypoint.providers.scripted import ScriptedModel
from waypoint.providers.scripts import (
    Script,
    final_answer,
    last_tool_results,
    reply,
    text,
    tool_use,
    web_search,
)
from waypoint.testing.driving import KillTestError
from waypoint.testing.kill_points import KillPoint, KillTestExample
from waypoint.testing.kill_test import KILL_TEST_OPTIONS, Kill, KillReport, run_kill_test
from waypoint.testing.worker_process import WorkerProcess, completed_steps

__all__ = [
    "KILL_TEST_OPTIONS",
    "Kill",
    "KillPoint",
    "KillReport",
    "KillTestError",
    "KillTestExample",
    "ModelRequest",
    "ModelResponse",
    "Script",
    "ScriptedModel",
    "WorkerProcess",
    "completed_steps",
    "final_answer",
    "last_tool_results",
    "reply",
    "run_kill_test",
    "text",
    "text_of",
    "tool_use",
    "web_search",
]
