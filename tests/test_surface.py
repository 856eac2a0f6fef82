"""`import waypoint` is what a program writes; old paths warn once; the plugin is a whole worker."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.worker import Worker

import waypoint
from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import wait_for_state
from waypoint import errors
from waypoint._plugin import STICKY_TIMEOUT

SDK_STICKY = {"sticky_queue_schedule_to_start_timeout": timedelta(seconds=10)}


def test_every_error_a_client_call_can_raise_is_exported() -> None:
    raised = {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value) and issubclass(value, errors.WaypointError)
    }
    assert len(raised) == 27
    assert raised <= set(waypoint.__all__)
    assert all(getattr(waypoint, name) is getattr(errors, name) for name in raised)


def test_the_exports_are_listed_once_and_each_resolves() -> None:
    names = waypoint.__all__
    assert len(names) == len(set(names)) and {"Agent", "connect", "runs", "WaypointPlugin"} <= {
        *names
    }
    assert {"reply", "text", "ScriptedModel", "Bounds", "HistoryBudget"}.isdisjoint(names)
    for name in names:
        assert getattr(waypoint, name) is not None, name
    assert waypoint.runs.start_run is not None  # the client's operations on runs


def test_importing_waypoint_imports_nothing_of_its_own() -> None:
    """The sandbox re-imports the package per run: its import stays as cheap as it was."""
    code = (
        "import sys, waypoint; "
        "print(sorted(m for m in sys.modules if m.startswith(('waypoint.', 'temporalio'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


OLD_PATHS = {
    "from waypoint import reply": "waypoint.reply is now waypoint.testing.reply",
    "from waypoint import ScriptedModel": "waypoint.ScriptedModel is now waypoint.testing",
    "from waypoint import Bounds": "waypoint.Bounds is now waypoint.SizeLimits",
    "from waypoint import HistoryBudget": "waypoint.HistoryBudget is now waypoint.HistoryLimits",
    "from waypoint.protocol import HistoryBudget": "waypoint.protocol.HistoryBudget is now",
    "from waypoint.scripted import reply, tool_use": "waypoint.scripted moved",
    "from waypoint.agent import Agent": "waypoint.agent is internal now",
    "from waypoint.tools import Tool, ToolContext, tool": "waypoint.tools is internal now",
    "from waypoint.client_tools import ClientTool": "waypoint.client_tools is internal now",
    "from waypoint.content import document": "waypoint.content is internal now",
    "from waypoint.worker import build_worker": "waypoint.worker is internal now",
    "from waypoint.plugin import WaypointPlugin": "waypoint.plugin is internal now",
}


FRESH_EACH = """
import json, os, sys, tempfile, traceback, warnings
import pydantic, temporalio.client, temporalio.worker  # the heavy part of an import, once

answers = []
for statement in sys.argv[1:]:
    with tempfile.TemporaryFile("w+") as stderr:
        pid = os.fork()
        if pid == 0:  # a child that has imported nothing of Waypoint's, as a fresh program
            os.dup2(stderr.fileno(), 2)
            try:
                warnings.simplefilter("always")
                exec(statement + "; " + statement)
            except BaseException:
                traceback.print_exc()
                sys.stderr.flush()
                os._exit(1)
            sys.stderr.flush()
            os._exit(0)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        stderr.seek(0)
        answers.append((code, stderr.read()))
print(json.dumps(answers))
"""
"""Each statement in a process of its own that has imported nothing of Waypoint's: forked from
one that imported the SDK and pydantic once (a second of CPU a statement, otherwise)."""


def test_an_old_path_keeps_working_and_warns_once() -> None:
    # Twice, under "always": a second use of the old path does not warn again.
    statements = list(OLD_PATHS)
    done = subprocess.run(
        [sys.executable, "-c", FRESH_EACH, *statements], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout)
    assert len(answers) == len(OLD_PATHS)
    for (statement, warning), (code, stderr) in zip(OLD_PATHS.items(), answers, strict=True):
        assert code == 0, (statement, stderr)
        assert stderr.count("DeprecationWarning") == 1, (statement, stderr)
        assert warning in stderr, (statement, stderr)


def test_the_old_size_limits_keyword_warns_and_still_applies() -> None:
    with pytest.warns(DeprecationWarning, match=r"Agent\(bounds=...\) is now Agent\(size_"):
        agent = waypoint.Agent("a", "m", "s", bounds=waypoint.SizeLimits(max_depth=3))
    assert agent.size_limits == waypoint.SizeLimits(max_depth=3)
    assert agent.spec("scripted").bounds == agent.size_limits


async def test_a_plain_temporal_worker_with_the_plugin_runs_a_run_through_an_approval(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """`Worker(client, plugins=[WaypointPlugin(...)])` is a whole worker: the run's queue too."""
    payments = Payments(tmp_path / "payments.db")
    agent = build_agent(payments, PAY_SCRIPT, approval=True)
    plugin = waypoint.WaypointPlugin([agent])
    worker = Worker(client, task_queue=task_queue, plugins=[plugin])
    tuned = worker.config(active_config=True)  # Waypoint's timings, where none was given
    assert tuned.get("sticky_queue_schedule_to_start_timeout") == STICKY_TIMEOUT
    given = Worker(client, task_queue=f"{task_queue}-given", plugins=[plugin], **SDK_STICKY)
    assert (
        given.config(active_config=True).get("sticky_queue_schedule_to_start_timeout")
        == (SDK_STICKY["sticky_queue_schedule_to_start_timeout"])
    )
    async with worker:
        handle = await waypoint.runs.start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        (pending,) = (
            await wait_for_state(client, handle.id, "awaiting_approval")
        ).pending_approvals
        assert payments.count() == 0
        await waypoint.runs.approve(client, handle.id, pending.step_id, reviewer="ada")
        result = await handle.result()
    assert (result.state, result.output, payments.count()) == ("done", "Paid ada 5.", 1)
    (sibling,) = plugin._siblings  # the agent's own queue, polled beside the shared one
    assert sibling.task_queue == f"{task_queue}@payer" and sibling.is_shutdown


async def test_the_plugin_gives_a_client_the_pydantic_converter_and_keeps_its_own(
    client: Client,
) -> None:
    plain = Client(client.service_client, namespace=client.namespace)
    assert plain.data_converter is DataConverter.default
    given = Client(client.service_client, plugins=[waypoint.WaypointPlugin()])
    assert given.data_converter is not DataConverter.default
    assert given.data_converter.payload_converter_class.__name__ == "PydanticPayloadConverter"
    mine = client.data_converter
    kept = Client(client.service_client, plugins=[waypoint.WaypointPlugin()], data_converter=mine)
    assert kept.data_converter is mine
