"""Which runs would a new build break, park or replan? Asked before a deploy.

`waypoint deploy check` runs this.

Each run's history is replayed against this process's workflow code with Temporal's `Replayer`
(a non-determinism there is a run that stops making progress after the deploy), and the spec
the run snapshotted at start is compared with the new build's agents: a tool whose contract
changed meets the run's `on_change` at its next call (`refuse` parks it in `tool_changed`,
`replan` adopts the new build's tools, nothing else, and tells the model); a changed prompt,
model, limit, policy or setting leaves the run on its snapshot, replanned or not. A run
pinned to its build under worker versioning never meets the new build at all, so it is only
reported. Client-side I/O; nothing here runs in a workflow.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from waypoint._agent import Agent, with_children
from waypoint._operations.deploys import run_version
from waypoint._workflows import AgentWorkflow
from waypoint._workflows.replan import adopt
from waypoint.errors import WaypointError
from waypoint.protocol import AgentSpec, RunInput
from waypoint.protocol import search_attributes as sa

Change = Literal["none", "continue", "refuse", "replan", "unknown"]
STEP = re.compile(r"\bt\d+\.(?:model|spec|tool\.\d+\.[\w-]+|replan\.\d+|\w+)")
MESSAGE = re.compile(r'message: "((?:[^"\\]|\\.)*)"')
ACTIVITY_ID = re.compile(r"'(t\d+\.[^'#\s]+#[0-9a-f]+(?:~\w+)*)'")


@dataclass
class RunCheck:
    """What the new build means for one run."""

    run_id: str
    agent: str
    open: bool
    replay: Literal["ok", "nondeterministic", "failed"] = "ok"
    """`failed`: the replay broke for another reason (e.g. a payload this client cannot decode)."""
    error: str = ""
    """The replay failure in one line: Temporal's message names what the new code did instead."""
    event_id: int | None = None
    step: str = ""
    change: Change = "none"
    differences: list[str] = field(default_factory=list)
    pinned: str = ""
    """`deployment.build` when the run is pinned to a build: the deploy does not touch it."""
    parked: bool = False
    """The run already waits in `tool_changed` (a rollback and `resume`, or `--replan`)."""

    def meets(self, change: Change) -> bool:
        """Whether this open, unpinned run meets `change` at its next step (closed: never)."""
        return self.open and not self.pinned and self.change == change

    @property
    def fails(self) -> bool:
        """An open run the new build cannot continue (pinned ones stay on their own build).

        Its history does not replay, or the build has no agent for it.
        """
        return self.open and not self.pinned and (self.replay != "ok" or self.change == "unknown")


@dataclass
class DeployReport:
    """Every run checked; `ok` when no open run would fail."""

    runs: list[RunCheck]

    @property
    def ok(self) -> bool:
        """No open run would stop making progress on the new build."""
        return not any(r.fails for r in self.runs)

    def counts(self) -> dict[str, int]:
        """The table's row: runs checked, replay ok, non-deterministic, refuse, replan, pinned."""
        return {
            "checked": len(self.runs),
            "replay_ok": sum(r.replay == "ok" for r in self.runs),
            "nondeterministic": sum(r.replay == "nondeterministic" for r in self.runs),
            "replay_failed": sum(r.replay == "failed" for r in self.runs),
            "would_refuse": sum(r.meets("refuse") for r in self.runs),
            "would_replan": sum(r.meets("replan") for r in self.runs),
            "pinned": sum(bool(r.pinned) for r in self.runs),
            "parked": sum(r.parked for r in self.runs),
        }


async def check_deploy(
    client: Client,
    agents: Sequence[Agent],
    *,
    workflows: Sequence[type] = (AgentWorkflow,),
    agent: str | None = None,
    query: str | None = None,
    sample: int | None = None,
    closed_within: timedelta = timedelta(hours=24),
    progress: Callable[[RunCheck], None] | None = None,
) -> DeployReport:
    """Replay open and recently closed runs against this code; compare their specs with `agents`.

    Args:
        client: Connected with Waypoint's data converter (`waypoint.connect`).
        agents: The new build's agents; the agents their sub-agent tools run are added, as a
            worker adds them (`waypoint._agent.with_children`), so an open child run is checked
            against the agent that runs it.
        workflows: The workflow classes to replay with; the new build's are this process's.
        agent: Only this agent's runs.
        query: A further visibility filter, e.g. `WaypointStatus = "awaiting_approval"`.
        sample: Check at most this many runs (open ones first).
        closed_within: Closed runs younger than this are replayed too (0 for open runs only).
        progress: Called with each run's check as it is done (a fleet takes a while).
    """
    specs = {a.name: await _spec_of(a) for a in with_children(agents)}
    replayer = Replayer(workflows=list(workflows), data_converter=client.data_converter)
    checks: list[RunCheck] = []
    for workflow_id, run_id, is_open in await _runs(client, agent, query, sample, closed_within):
        check = RunCheck(run_id=workflow_id, agent="", open=is_open)
        try:
            await _check_one(client, replayer, specs, check, run_id)
        except Exception as err:  # one run the check cannot read is reported, not fatal
            check.replay = "failed"
            check.error = f"could not check it: {type(err).__name__}: {err}"
        checks.append(check)
        if progress is not None:
            progress(check)
    return DeployReport(checks)


async def _check_one(
    client: Client,
    replayer: Replayer,
    specs: dict[str, AgentSpec],
    check: RunCheck,
    run_id: str,
) -> None:
    """Replay one run's history, compare its spec, and ask the server how it is routed."""
    handle = client.get_workflow_handle(check.run_id, run_id=run_id)
    history = await handle.fetch_history()
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    if result.replay_failure is not None:
        _explain(check, result.replay_failure, history)
    started = await _snapshot(client, history)
    if started is not None:
        check.agent, old = started
        if old is not None:
            check.change, check.differences = compare(old, specs.get(check.agent))
    if check.open:
        described = await handle.describe()
        version = run_version(described)
        if version.behavior == "pinned":
            check.pinned = f"{version.deployment}.{version.build_id}"
        check.parked = described.typed_search_attributes.get(sa.STATUS) == "tool_changed"


def compare(old: AgentSpec, new: AgentSpec | None) -> tuple[Change, list[str]]:
    """What `on_change` does at the run's next tool call, and every difference, in words."""
    if new is None:
        return "unknown", ["the new build has no agent of this name: no worker can take the run"]
    differences: list[str] = []
    tools = False
    now = {t.name: t for t in new.tools}
    for tool in old.tools:
        current = now.get(tool.name)
        if current is None:
            differences.append(f"tool {tool.name!r} is gone")
            tools = True
        elif current.schema_hash != tool.schema_hash:
            differences.append(
                f"tool {tool.name!r}: {tool_difference(tool.model_dump(), current.model_dump())}"
            )
            tools = True
    for name in sorted(now.keys() - {t.name for t in old.tools}):
        differences.append(f"tool {name!r} is new (the run does not see it unless it replans)")
    for attr in ("system", "model", "limits", "policy", "settings", "output_schema"):
        if getattr(old, attr) != getattr(new, attr):
            shown = "prompt" if attr == "system" else attr
            differences.append(f"{shown} changed (the run keeps the one it started with)")
    if tools:
        return old.on_change, differences
    return ("continue" if differences else "none"), differences


def tool_difference(old: dict[str, Any], new: dict[str, Any]) -> str:
    """A changed tool's contract, in a few words: arguments added, removed or changed."""
    parts: list[str] = []
    if old.get("description") != new.get("description"):
        parts.append("description changed")
    before = old.get("input_schema", {}).get("properties", {})
    after = new.get("input_schema", {}).get("properties", {})
    if added := sorted(after.keys() - before.keys()):
        parts.append("arguments added: " + ", ".join(added))
    if removed := sorted(before.keys() - after.keys()):
        parts.append("arguments removed: " + ", ".join(removed))
    if changed := sorted(k for k in before.keys() & after.keys() if before[k] != after[k]):
        parts.append("arguments changed: " + ", ".join(changed))
    was = set(old.get("input_schema", {}).get("required", []))
    required = set(new.get("input_schema", {}).get("required", []))
    if was != required and not (added or removed):
        parts.append("required arguments changed")
    return "; ".join(parts) or "schema changed"


async def _spec_of(agent: Agent) -> AgentSpec:
    """The agent as a run starting on the new build would snapshot it (MCP tools listed)."""
    try:
        await agent.discover()
        return agent.spec("anthropic" if agent.script is None else "scripted")
    finally:
        await agent.aclose()


async def _runs(
    client: Client,
    agent: str | None,
    query: str | None,
    sample: int | None,
    closed_within: timedelta,
) -> list[tuple[str, str, bool]]:
    """(workflow id, run id, open) of each run to check, open ones first.

    Then those closed within `closed_within`, filtered and cut to `sample`. A segment that
    continued-as-new is not a run of its own.
    """
    base = "WorkflowType = 'AgentWorkflow'"
    if agent:
        base += f" AND {sa.AGENT.name} = '{quoted(agent)}'"
    if query:
        base += f" AND ({query})"
    since = (datetime.now(UTC) - closed_within).strftime("%Y-%m-%dT%H:%M:%SZ")
    filters = [(f"{base} AND ExecutionStatus = 'Running'", True)]
    if closed_within > timedelta(0):
        ended = "ExecutionStatus != 'Running' AND ExecutionStatus != 'ContinuedAsNew'"
        filters.append((f"{base} AND {ended} AND CloseTime > '{since}'", False))
    found: dict[str, tuple[str, str, bool]] = {}
    for visibility_query, is_open in filters:
        async for wf in client.list_workflows(visibility_query):
            found.setdefault(wf.id, (wf.id, wf.run_id, is_open))
            if sample is not None and len(found) >= sample:
                return list(found.values())
    return list(found.values())


def quoted(name: str) -> str:
    """A name for a visibility query's string literal; one that could close it is refused."""
    if not re.fullmatch(r"[\w.@:-]+", name):
        raise WaypointError(
            f"{name!r} cannot go into a visibility query: use letters, digits and . _ - @ :"
        )
    return name


async def _snapshot(
    client: Client, history: WorkflowHistory
) -> tuple[str, AgentSpec | None] | None:
    """The agent's name and the spec the run holds now.

    The one continue-as-new carried into this history, else its first `load_spec` result; a
    later `load_spec` is a replan, which took that build's tools and nothing else.
    """
    converter = client.data_converter
    name = ""
    spec: AgentSpec | None = None
    scheduled: set[int] = set()
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            (run_input,) = await converter.decode(payloads, [RunInput])
            name = run_input.agent
            spec = run_input.resume.spec if run_input.resume else None
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == "waypoint.load_spec":
                scheduled.add(event.event_id)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = event.activity_task_completed_event_attributes
            if done.scheduled_event_id in scheduled:
                (loaded,) = await converter.decode(done.result.payloads, [AgentSpec])
                spec = loaded if spec is None else adopt(spec, loaded, spec.plan_version + 1)
    return (name, spec) if name else None


def _explain(check: RunCheck, failure: Exception, history: WorkflowHistory) -> None:
    """The replay failure in one line, and the recorded event and step it disagrees with."""
    text = " ".join(str(failure).split())
    check.replay = "nondeterministic" if "TMPRL1100" in text else "failed"
    core = MESSAGE.search(text)  # the SDK core's own words, without its debug wrapping
    check.error = core.group(1) if core else text
    for activity_id in ACTIVITY_ID.findall(check.error):
        for event in history.events:
            attrs = event.activity_task_scheduled_event_attributes
            if (
                event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                and attrs.activity_id == activity_id
            ):
                check.event_id, check.step = event.event_id, activity_id.split("#")[0]
                return
    if step := STEP.search(check.error):
        check.step = step.group(0)
