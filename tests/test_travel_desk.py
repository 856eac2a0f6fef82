"""The travel desk's shapes (issue 53): per-tool options for a run or a worker, a script that
reacts to a refresh and to a rejection, and the kill test on a result that holds a downstream's
ids (compared by fields), on a rejection path, on a plain-`def` tool that sleeps and on a
downstream that does not deduplicate (a real SQLite counter).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.testing import WorkflowEnvironment

from examples import fare_desk
from tests import travel_app
from tests.conftest import running_worker, the_pending_approval
from tests.test_harness import harness_dir, worker_env  # noqa: F401 - a fixture
from waypoint._agent import Agent
from waypoint._providers.scripted import ScriptedModel
from waypoint.client import runs
from waypoint.errors import ToolDefinitionError
from waypoint.protocol import ModelRequest, ModelResponse, PendingApproval
from waypoint.testing import KillPoint, KillReport, run_kill_test
from waypoint.testing.verdict import result_difference

FIELDS = ["route", "fare_cents", "status"]
"""What must match run to run: not the hold's and the charge's ids, which are new each run."""
FRESH = timedelta(milliseconds=1)


@pytest.fixture
def travel_dir(harness_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:  # noqa: F811
    """The travel app's folder (`$TRAVEL_DIR`), for its workers and for counting here."""
    monkeypatch.setenv("TRAVEL_DIR", str(harness_dir))
    return harness_dir


def fare_moves_after(folder: Path, turn: int, agents: list[Agent]) -> ScriptedModel:
    """The scripts, with the fare going up to 13000 while the model writes turn `turn`."""

    def moved(request: ModelRequest) -> ModelResponse:
        entry = travel.script[turn - 1]  # type: ignore[index]
        response = entry(request) if callable(entry) else entry
        (folder / "fares").write_text("13000")
        return response

    travel, booker = agents
    script = list(travel.script or [])
    script[turn - 1] = moved
    return ScriptedModel({"travel": script, "booker": list(booker.script or [])})


async def test_a_runs_tool_options_refresh_a_read_and_the_script_books_at_the_new_fare(
    client: Client, task_queue: str, travel_dir: Path
) -> None:
    agents = travel_app.agents()
    # Per worker, without touching the module: the booker (a sub-agent) stands in as well.
    hosted = [agents[0], agents[1].with_tool_options({"hold_seat": {"timeout": 20}})]
    scripted = fare_moves_after(travel_dir, 2, agents)
    async with running_worker(
        client, hosted, task_queue, scripted=scripted, max_cached_workflows=0
    ):
        handle = await runs.start_run(
            client,
            "travel",
            "LIS-BER",
            task_queue=task_queue,
            tool_options={"fares": {"fresh_for": FRESH}},
        )
        pending = await the_pending_approval(client, handle.id)
        await runs.approve(client, handle.id, pending.step_id, reviewer="manager")
        result = await handle.result()
        refused = await runs.start_run(
            client, "travel", "x", task_queue=task_queue, tool_options={"flights": {"timeout": 5}}
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await refused.result()
    trip = result.output_as(travel_app.Trip)
    assert (trip.status, trip.fare_cents) == ("charged", 13000), trip
    lines = {r.step_id: r for r in result.ledger}
    changed = [r.step_id for r in result.ledger if r.summary.startswith("refreshed, CHANGED")]
    assert changed == ["t1.tool.1.fares.fresh2"], result.ledger  # read again before the booking
    assert lines["t2.tool.1.book"].status == "error"  # not run: the fare it relied on changed
    assert "the run's tool options: fares" in lines["t0.spec"].summary
    assert lines["t3.tool.1.book"].status == "completed"
    assert travel_app.count_effects(lines["t4.tool.1.charge_card"].effect_key or "") == 1
    cause = str(failed.value.cause)
    assert "no such tool" in cause and "'flights'" in cause, cause


async def test_the_docs_fare_desk_reacts_to_a_refresh_and_to_a_rejection(client: Client) -> None:
    """docs/testing.md's worked example (`examples/fare_desk.py`, the page shows it verbatim)."""
    bought, rejected = await fare_desk.both(client)  # it asserts both outcomes itself
    assert "T-13000" in bought and "over budget" in rejected


def test_tool_options_are_checked_as_the_tools_own() -> None:
    travel, _ = travel_app.agents()
    with pytest.raises(ToolDefinitionError, match="fresh_for is for a `read` tool"):
        travel.with_tool_options({"charge_card": {"fresh_for": 5}})
    with pytest.raises(ToolDefinitionError, match="no such tool"):
        travel.with_tool_options({"flights": {"timeout": 5}})
    faster = travel.with_tool_options({"fares": {"fresh_for": 2, "timeout": 3}})
    spec = {t.name: t for t in faster.spec("scripted").tools}
    assert (spec["fares"].fresh_for, spec["fares"].timeout) == (
        timedelta(seconds=2),
        timedelta(seconds=3),
    )
    assert {t.name: t for t in travel.spec("scripted").tools}["fares"].timeout is None


async def kill_test(
    env: WorkflowEnvironment, folder: Path, task_queue: str, *points: KillPoint, **more: Any
) -> KillReport:
    """The travel desk's kill test, compared by `FIELDS`, its workers on `folder`."""
    return await run_kill_test(
        env.client,
        app="tests.travel_app:agents",
        agent="travel",
        task="LIS-BER",
        task_queue=task_queue,
        workdir=folder / "killtest",
        kill_points=list(points),
        count_effects=travel_app.count_effects,
        env={**worker_env(env, folder), "TRAVEL_DIR": str(folder)},
        compare=FIELDS,
        **more,
    )


def during_the_policy_sleep(folder: Path) -> KillPoint:
    """Kill while the plain-`def` policy lookup sleeps in its thread."""
    return KillPoint.at_file(
        "during the policy's sleep", folder / "in-policy", folder / "arm-policy"
    )


async def test_a_trip_holding_downstream_ids_passes_a_kill_test_compared_by_fields(
    env: WorkflowEnvironment, travel_dir: Path, task_queue: str
) -> None:
    sleeping = during_the_policy_sleep(travel_dir)
    report = await kill_test(env, travel_dir, task_queue, sleeping, KillPoint.awaiting_approval())
    assert report.ok, report.summary()
    assert report.kills[0].in_flight == {"t1.tool.2.policy"}, report.summary()
    counted = {"t2.tool.1.book > t1.tool.1.hold_seat": 1, "t3.tool.1.charge_card": 1}
    assert report.effect_counts == counted == report.reference_effect_counts, report.summary()
    whole = result_difference(report.reference, report.result, None, "kills")
    assert whole.startswith("result differs in field output.hold_id: 'H-2' vs 'H-1'"), whole


async def test_a_rejected_charge_is_kill_tested_and_counted_zero(
    env: WorkflowEnvironment, travel_dir: Path, task_queue: str
) -> None:
    def manager(pending: PendingApproval) -> bool:
        return pending.arguments["cents"] < 10000  # the fare is 12000: rejected

    waits = KillPoint.awaiting_approval()
    report = await kill_test(env, travel_dir, task_queue, waits, approvals=manager)
    assert report.ok, report.summary()
    assert report.result.output_as(travel_app.Trip).status == "rejected"
    assert report.effect_counts["t3.tool.1.charge_card"] == 0, report.summary()
    charge = next(r for r in report.result.ledger if r.step_id == "t3.tool.1.charge_card")
    assert charge.status == "rejected" and (charge.decided_by or "").startswith("kill-test")
