"""Test your agents offline, and prove them: the scripted model and the kill test.

The scripted model plays an agent's script, one reply per turn, labelled `scripted` in the
ledger so nobody mistakes it for Claude: `reply(text(...), tool_use(...))` is one reply, and an
entry may be a function of the `ModelRequest` (`last_tool_results`, `text_of`) returning a
`ModelResponse`, to react to what tools returned.

`run_kill_test` runs your agent once uninterrupted, then again while SIGKILLing its worker at
the points you choose, and reports whether the result (as you compare it) and the ledger match,
whether every effect happened exactly once (your `count_effects(effect_key)` asks the
downstream system), and which steps ran again: only work that was in flight at a kill may.
`latest_result`, `result_json`, `read_again`, `notes` and `task_as` read a `ModelRequest`
in a script entry.
"""

from __future__ import annotations

from waypoint._providers.scripted import ScriptedModel
from waypoint._providers.scripts import (
    Script,
    final_answer,
    last_tool_results,
    reply,
    text,
    tool_use,
    web_search,
)
from waypoint.protocol import ModelRequest, ModelResponse, text_of
from waypoint.testing.driving import Approvals, KillTestError
from waypoint.testing.kill_points import KillPoint, KillTestExample
from waypoint.testing.kill_test import run_kill_test
from waypoint.testing.model_requests import (
    latest_result,
    notes,
    read_again,
    result_json,
    task_as,
)
from waypoint.testing.report import KILL_TEST_OPTIONS, Kill, KillReport
from waypoint.testing.verdict import Compare
from waypoint.testing.worker_process import WorkerProcess, completed_steps

__all__ = [
    "KILL_TEST_OPTIONS",
    "Approvals",
    "Compare",
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
    "latest_result",
    "notes",
    "read_again",
    "reply",
    "result_json",
    "run_kill_test",
    "task_as",
    "text",
    "text_of",
    "tool_use",
    "web_search",
]
