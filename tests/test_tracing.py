"""Traces: one GenAI span per model and tool step, never duplicated by replay or by a SIGKILL."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import running_worker
from tests.test_kill import barrier, demo_env
from waypoint._operations.tracing import StepTracing, read_trace_file, span_record
from waypoint._providers.scripted import ScriptedModel
from waypoint.client.runs import start_run
from waypoint.demo import DEMO_TASK
from waypoint.demo.downstream import count_emails, count_vendors
from waypoint.protocol import ModelRequest, ModelResponse, Usage
from waypoint.testing import KillPoint, run_kill_test

EXPORTER = InMemorySpanExporter()
PROVIDER = TracerProvider()
PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))
TRACING = StepTracing(PROVIDER.get_tracer("tests"))


class CachingModel(ScriptedModel):
    """The scripted model, answering as a cached Claude call would: cache reads, a cost."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        response = await super().complete(request)
        usage = Usage(
            input_tokens=10, output_tokens=20, cache_read_input_tokens=300,
            cache_creation_input_tokens=40,
        )  # fmt: skip
        return response.model_copy(
            update={"usage": usage, "cost_usd": 0.0123, "model": "claude-sonnet-4-6-20260101"}
        )


@pytest.fixture
def traced(client: Client) -> Client:
    EXPORTER.clear()
    return Client(**{**client.config(), "interceptors": [TRACING]})


def spans_of(run: str, spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in spans if s["attributes"].get("waypoint.workflow_id") == run]


def records(spans: tuple[ReadableSpan, ...]) -> list[dict[str, Any]]:
    return [span_record(s) for s in spans]


async def pay_run(traced: Client, task_queue: str, db: Path, **options: Any) -> str:
    agent = build_agent(Payments(db), PAY_SCRIPT)
    model = CachingModel({agent.name: PAY_SCRIPT})
    async with running_worker(traced, [agent], task_queue, scripted=model, **options):
        handle = await start_run(traced, "payer", "pay ada 5", task_queue=task_queue)
        result = await handle.result()
    assert result.output == "Paid ada 5."
    return handle.id


async def test_each_model_and_tool_step_gets_one_span_with_genai_attributes(
    traced: Client, task_queue: str, tmp_path: Path
) -> None:
    run = await pay_run(traced, task_queue, tmp_path / "payments.db")
    everything = records(EXPORTER.get_finished_spans())
    steps = spans_of(run, everything)
    by_step = {s["attributes"]["waypoint.step_id"]: s for s in steps}
    assert sorted(s["attributes"]["waypoint.step_id"] for s in steps) == sorted(
        ["t1.model", "t1.tool.1.weather", "t1.tool.2.add", "t2.model", "t2.tool.1.pay", "t3.model"]
    )
    model = by_step["t1.model"]
    assert model["name"] == "chat claude-sonnet-4-6"
    assert (
        model["attributes"].items()
        >= {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": "anthropic",
            "gen_ai.request.model": "claude-sonnet-4-6",
            "gen_ai.response.model": "claude-sonnet-4-6-20260101",
            "gen_ai.response.finish_reasons": ("tool_use",),
            "gen_ai.usage.input_tokens": 350,  # uncached + cache reads + cache writes
            "gen_ai.usage.output_tokens": 20,
            "gen_ai.usage.cache_read.input_tokens": 300,
            "gen_ai.usage.cache_creation.input_tokens": 40,
            "waypoint.cost_usd": 0.0123,
            "waypoint.step_id": "t1.model",
            "waypoint.attempt": 1,
        }.items()
    )
    assert by_step["t3.model"]["attributes"]["gen_ai.response.finish_reasons"] == ("end_turn",)
    pay = by_step["t2.tool.1.pay"]
    assert pay["name"] == "execute_tool pay"
    assert pay["attributes"]["gen_ai.tool.name"] == "pay"
    assert pay["attributes"]["waypoint.effect_key"].startswith(f"{run}/")
    assert pay["attributes"]["waypoint.effect_key"].endswith("/t2.tool.1.pay")
    assert "waypoint.effect_key" not in by_step["t1.tool.1.weather"]["attributes"]

    # Each step nests under Temporal's RunActivity span, in the trace the client started.
    ids = {s["span_id"]: s for s in everything}
    (start,) = [
        s for s in everything
        if s["name"] == "StartWorkflow:AgentWorkflow"
        and s["attributes"]["temporalWorkflowID"] == run
    ]  # fmt: skip
    for s in steps:
        assert ids[s["parent_id"]]["name"].startswith("RunActivity:waypoint.")
        assert s["trace_id"] == start["trace_id"]


async def test_replaying_every_task_duplicates_no_span(
    traced: Client, task_queue: str, tmp_path: Path
) -> None:
    cached = await pay_run(traced, task_queue, tmp_path / "cached.db")
    replayed = await pay_run(traced, task_queue, tmp_path / "replayed.db", max_cached_workflows=0)
    everything = records(EXPORTER.get_finished_spans())

    def workflow_spans(run: str) -> Counter[str]:
        return Counter(
            s["name"] for s in everything if s["attributes"].get("temporalWorkflowID") == run
        )

    steps = Counter(s["attributes"]["waypoint.step_id"] for s in spans_of(replayed, everything))
    assert len(steps) == 6
    assert set(steps.values()) == {1}
    # Temporal's workflow-side spans: replaying from history adds none.
    assert workflow_spans(replayed)["RunWorkflow:AgentWorkflow"] == 1
    assert workflow_spans(replayed) == workflow_spans(cached)


async def test_sigkilled_worker_duplicates_no_span_of_a_finished_step(
    traced: Client, env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    trace_file = tmp_path / "spans.jsonl"
    downstream = tmp_path / "downstream"
    report = await run_kill_test(
        traced,
        app="waypoint.demo:agents",
        agent="vendor_onboarding",
        task=DEMO_TASK,
        task_queue=task_queue,
        workdir=tmp_path / "killtest",
        kill_points=[
            KillPoint.after_step("t2.model"),
            barrier(tmp_path, "after_commit", "create_vendor"),
        ],
        count_effects=lambda key: count_vendors(downstream, key) + count_emails(downstream, key),
        env={**demo_env(env, tmp_path, "0.1"), "WAYPOINT_TRACE_FILE": str(trace_file)},
    )
    assert report.ok, report.summary()
    steps = spans_of(report.run_id, read_trace_file(trace_file))
    attempts: dict[str, list[int]] = {}
    for s in steps:
        attempts.setdefault(s["attributes"]["waypoint.step_id"], []).append(
            s["attributes"]["waypoint.attempt"]
        )
    ledger = {r.step_id for r in report.result.ledger if r.kind in ("model", "tool")}
    assert ledger == set(attempts)
    finished = ledger & set().union(*(k.completed for k in report.kills))
    assert {"t1.model", "t2.model", "t3.model"} <= finished
    recorded = {r.step_id: r.attempt for r in report.result.ledger}
    for step_id in finished:
        # One span per attempt, the last the recorded one: a step in flight at the first kill
        # is retried and may finish before the second, but no finished step runs again.
        tries = attempts[step_id]
        assert len(tries) == len(set(tries)), (step_id, tries)
        assert max(tries) == recorded[step_id], (step_id, tries, recorded[step_id])
    # Killed inside the effect: the first attempt's span never ended; the retry reconciled.
    create_vendor = "t4.tool.1.create_vendor"
    (create,) = [s for s in steps if s["attributes"]["waypoint.step_id"] == create_vendor]
    assert create["attributes"]["waypoint.attempt"] == 2
    assert create["attributes"]["waypoint.reconciled"] is True
    # The worker processes' spans join the trace this process started.
    (start,) = [
        s for s in records(EXPORTER.get_finished_spans())
        if s["name"] == "StartWorkflow:AgentWorkflow"
        and s["attributes"]["temporalWorkflowID"] == report.run_id
    ]  # fmt: skip
    assert {s["trace_id"] for s in steps} == {start["trace_id"]}
