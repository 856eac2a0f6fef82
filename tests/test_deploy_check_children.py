"""`waypoint deploy check` sees the fleet a worker sees: sub-agents of the build's agents.

A worker hosts every agent a sub-agent tool runs (`waypoint._agent.with_children`), so a build
named by its top-level agents runs an open child fine; the check must say so, not report it as
an agent the build lacks (issue 29.3).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.conftest import running_worker, wait_for_state, wait_for_visibility
from tests.subagent_agents import build_agents
from tests.test_deploy_check import OPEN, on_queue
from tests.test_subagents import wait_for_child
from tests.test_versioning import waypoint_cli
from waypoint._operations.deploy_check import check_deploy
from waypoint.client import runs


async def test_a_parent_waiting_on_an_open_child_passes_on_an_unchanged_build(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "pay.db"
    buyer, checker = build_agents(db, child_approval=True)
    async with running_worker(client, [buyer, checker], task_queue):
        parent = await runs.start_run(client, "buyer", "buy", task_queue=task_queue)
        child = f"{parent.id}--t1.tool.1.check_supplier"
        await wait_for_child(client, child, "awaiting_approval")
        await wait_for_state(client, parent.id, "running")
    scope = on_queue(task_queue, "buyer", "checker")
    await wait_for_visibility(client, scope + OPEN, 2)

    report = await check_deploy(client, [buyer], query=scope)  # the build, as `--app` names it
    by_agent = {r.agent: r for r in report.runs}
    assert sorted(by_agent) == ["buyer", "checker"], report.runs
    assert by_agent["checker"].run_id == child and by_agent["checker"].open
    assert [(r.replay, r.change, r.differences) for r in report.runs] == [("ok", "none", [])] * 2
    assert report.ok and not any(r.fails for r in report.runs)

    monkeypatch.setenv("WAYPOINT_SUB_DB", str(db))  # what `tests.subagent_agents:agents` reads
    args = ["--app", "tests.subagent_agents:agents", "--query", scope]
    code, said = await waypoint_cli(client, "deploy", "check", *args, "--json")
    assert code == 0, said
    checked = json.loads(said[said.index("{\n") :])  # after any replayer log line
    assert checked["ok"] is True
    assert {r["agent"]: r["change"] for r in checked["runs"]} == {
        "buyer": "none",
        "checker": "none",
    }
    code, said = await waypoint_cli(client, "deploy", "check", *args)
    assert code == 0 and "has no agent in this build" not in said, said
    assert "ok: no open run breaks" in said, said
