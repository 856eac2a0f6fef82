"""The driver's later actions: steer, limits raised unprompted, deploy check, rerun, signing.

`waypoint._torture.runner.Driver` takes these from `Operators`. A `signed` scenario's driver
holds the reviewer's key (its public half goes to the worker's `WAYPOINT_DECISION_KEYS`) and
signs every verb it sends. A rerun starts the ended run's
workflow id again (`runs.start_run(rerun=True)`); in a signed scenario the first run's signed
approvals, copied from its history, are replayed onto the rerun's pending steps first, and
the rerun must refuse them (`approval_gate` judges it).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import Client

from waypoint._torture import evidence
from waypoint._torture.agent import CHILD, NAME, agents
from waypoint._torture.scenario import Action, Scenario
from waypoint.client import decisions, runs, verbs
from waypoint.errors import WaypointError
from waypoint.protocol import ApprovalDecision, Limits, ResumeRequest, RunInput, StepOptions
from waypoint.protocol.queues import agent_queue
from waypoint.protocol.verbs import APPROVE, RAISE_LIMITS, RESUME, LimitsChange
from waypoint.testing import WorkerProcess

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from waypoint._torture.console_channel import ConsoleChannel

REVIEWER = "torture"
TASK = "Run the errands."
CROWD_SECONDS = 5.0
"""How long a crowded wait is watched for its handover before it is decided all the same."""
STEER = "torture steer: carry on with the errands as planned. "
"""A steer's text; it holds no conversation marker (`wpNx`), so the position stays the same."""


class Operators:
    """What a driver does besides reacting: the scenario's later actions, and signing."""

    client: Client
    scenario: Scenario
    worker: WorkerProcess
    outcome: Any
    """The driver's `Outcome` (`waypoint._torture.runner`, which imports this module)."""
    options: StepOptions
    drawn: RunInput
    """What the scenario's run starts with (`waypoint._torture.starts.drawn`); a rerun too."""
    done: set[tuple[str, str]]
    resolved: dict[tuple[str, str], tuple[int, float]]
    reached: dict[int, float]
    pending_actions: list[Action]
    key: Ed25519PrivateKey | None = None
    channel: ConsoleChannel | None = None
    """A `console` scenario's: decisions and steers go through a real console over HTTP."""
    reran: bool = False
    crowded: set[tuple[str, str]]
    """Waits (a call's, a park's) `crowd` crowded already."""
    follow_ups: dict[str, tuple[float, str]]
    """By run: a verb an earlier action left to send, and when (`time.monotonic`): an unpause."""
    copies: dict[str, ApprovalDecision]
    """By step id: the first run's signed approvals, replayed onto the rerun's pending steps."""

    def sign_with(self, scenario: Scenario, worker: WorkerProcess) -> None:
        """In a signed scenario, make the reviewer's key and give the worker its public half."""
        self.copies, self.crowded = {}, set()
        if not scenario.signed:
            return
        from waypoint._security.signing import (  # cryptography: signed only
            load_private_key,
            new_key,
        )

        private, public = new_key()
        self.key = load_private_key(private)
        worker.env["WAYPOINT_DECISION_KEYS"] = f"{REVIEWER}:{public}"

    def fault(self, kind: str) -> None:
        """Count one fault or action (the driver's)."""
        raise NotImplementedError

    async def noted(self, about: str, what: str, sending: Awaitable[Any]) -> bool:
        """Send; False, noted as `{about}: {what} refused`, when the run refused it."""
        try:
            await sending
        except WaypointError as err:
            self.outcome.notes.append(f"{about}: {what} refused: {err}")
            return False
        return True

    async def send_resume(self, run: str, replan: bool) -> None:
        """Resume a parked step, through the console in a `console` scenario."""
        if self.channel is None:
            request = ResumeRequest(reviewer=REVIEWER, replan=replan)  # early ones too
            signed = await verbs.signed(self.client, run, RESUME, request, self.key)
            await runs.handle(self.client, run).signal(RESUME, signed)
        else:  # refused when the run moved on meanwhile: the next poll sees it
            await self.noted(run, "resume", self.channel.resume(run, replan=replan))

    async def send(self, run: str, verb: str) -> bool:
        """Send cancel, pause or unpause (through the console in a `console` scenario).

        False, noted, when refused: the run had ended, or was not paused.
        """
        reason = f"torture: {verb}"
        if self.channel is not None:
            return await self.noted(run, verb, self.channel.send(run, verb, reason))
        send = getattr(runs, verb)
        sending = send(self.client, run, reviewer=REVIEWER, reason=reason, signing_key=self.key)
        return await self.noted(run, verb, sending)

    async def due(self, run: str) -> None:
        """Send the verb an earlier action left for this run once its moment has come."""
        at, verb = self.follow_ups.get(run, (math.inf, ""))
        if time.monotonic() >= at:
            del self.follow_ups[run]
            await self.send(run, verb)

    async def send_answer(self, run: str, step_id: str, result: dict[str, Any]) -> None:
        """Answer a client tool's question, through the console in a `console` scenario."""
        if self.channel is not None:
            await self.channel.answer(run, step_id, result)
        else:
            await decisions.answer(
                self.client, run, step_id, result, reviewer=REVIEWER, signing_key=self.key
            )

    async def later(self, run: str, action: Action) -> None:
        """Fire one of `LATER_ACTIONS`; a rerun waits until every run has ended (`rerun`)."""
        if action.kind == "steer":
            text = (STEER * (action.size // len(STEER) + 1))[: action.size] or STEER
            if self.channel is not None:
                await self.noted(run, "steer", self.channel.steer(run, text))
            else:
                steer = decisions.steer(
                    self.client, run, text, reviewer=REVIEWER, signing_key=self.key
                )
                await self.noted(run, "steer", steer)
        elif action.kind == "raise_limits":
            await self.raise_limits(run, turns=2, factor=1.25, extra=0.0)
        elif action.kind == "deploy_check":
            await self.deploy_check()

    async def raise_limits(self, run: str, *, turns: int, factor: float, extra: float) -> None:
        """Raise the run's turn limit by `turns` and its cost limit (if set) by `factor`."""
        handle = runs.handle(self.client, run)
        limits = await handle.query("limits", result_type=Limits)
        cost = limits.max_cost_usd
        raised = limits.model_copy(
            update={
                "max_turns": limits.max_turns + turns,
                "max_cost_usd": None if cost is None else round(cost * factor + extra, 4),
            }
        )
        if self.channel is None:
            change = LimitsChange(**raised.model_dump(), reviewer=REVIEWER)
            await handle.signal(
                RAISE_LIMITS, await verbs.signed(self.client, run, RAISE_LIMITS, change, self.key)
            )
        else:  # refused, e.g. a cost limit of 0 raised to 0: the limits stay as they were
            sending = self.channel.resume(
                run, max_turns=raised.max_turns, max_cost_usd=raised.max_cost_usd
            )
            if not await self.noted(run, "raise_limits", sending):
                return
        self.outcome.limits[run] = raised

    async def deploy_check(self) -> None:
        """`waypoint deploy check` of the running build: no open run may be reported broken."""
        from waypoint._operations.deploy_check import check_deploy  # the replayer: here only

        build = self.worker.env.get("WAYPOINT_TORTURE_BUILD", "")
        queue = self.outcome.task_queue
        queues = ", ".join(
            f"'{q}'" for q in (queue, agent_queue(queue, NAME), agent_queue(queue, CHILD))
        )
        report = await check_deploy(
            self.client,
            agents(self.outcome.folder, build),
            query=f"TaskQueue IN ({queues})",
            closed_within=timedelta(0),
        )
        for check in report.runs:
            if check.fails:
                self.outcome.deploy_check.append(
                    f"{check.run_id} on its unchanged build ({build or 'original'}): replay "
                    f"{check.replay}, change {check.change} {check.error[:200]}".rstrip()
                )

    async def rerun(self, run: str) -> bool:
        """Once every run has ended, start the first again under its workflow id, once.

        A scenario with a `rerun` reruns whether or not the run reached its moment.
        """
        if self.reran or not any(a.kind == "rerun" for a in self.scenario.actions):
            return False
        self.reran = True
        if any(a.kind == "rerun" for a in self.pending_actions):
            self.fault("rerun")  # counted as fired: it fires now
        described = await runs.handle(self.client, run).describe()
        self.outcome.reruns[run] = described.run_id or ""
        if self.key is not None:
            self.copies = await self._signed_approvals(run)
        limits = evidence.started_limits(self.drawn) or Limits()  # whole: as the run began
        self.done = {(r, s) for r, s in self.done if r != run}
        self.resolved = {k: v for k, v in self.resolved.items() if k[0] != run}
        self.reached = {}  # the rerun's turns are its own; a fork of it is left out
        self.pending_actions = [a for a in self.pending_actions if a.kind not in ("fork", "rerun")]
        try:
            await runs.start_run(
                self.client,
                NAME,
                TASK,
                task_queue=self.outcome.task_queue,
                workflow_id=run,
                limits=limits,
                options=self.options,
                history=self.drawn.history_override or self.drawn.history,
                task_timeout=timedelta(seconds=3),
                rerun=True,
            )
        except WaypointError as err:
            self.outcome.stuck.append(f"{run}: the rerun did not start: {err}")
            return False
        self.outcome.limits[run] = limits
        return True

    async def _signed_approvals(self, run: str) -> dict[str, ApprovalDecision]:
        """Every signed approve the run's chain received, by step, read from its histories."""
        found: dict[str, ApprovalDecision] = {}
        async for wf in self.client.list_workflows(f'WorkflowId = "{run}"'):
            history = await self.client.get_workflow_handle(run, run_id=wf.run_id).fetch_history()
            ex = await evidence.read(self.client, run, wf.run_id, history.events)
            for d in ex.decisions:
                if d.name == "approve" and d.signature:
                    with contextlib.suppress(ValueError):
                        copy = ApprovalDecision.model_validate(d.payload)
                        found[copy.step_id] = copy
        return found

    async def before_deciding(self, run: str, step_id: str) -> None:
        """Replay a copied approval; in a small-budget scenario, crowd the wait first."""
        await self.replay_copy(run, step_id)
        await self.crowd(run, step_id)

    async def crowd(self, run: str, wait: str) -> None:
        """In a small-budget scenario, crowd a wait (a call's, or a park's) before moving it.

        A busy team pokes a waiting or parked run: refused decisions enough to fill its history
        budget, so it continues-as-new as it waits (`waypoint/_workflows/handover.py`), counted
        as `waiting_handover` when seen, and only then is the call decided or the park moved.
        """
        budget = self.scenario.history_events
        if not budget or not self.scenario.crowd or (run, wait) in self.crowded:
            return
        self.crowded.add((run, wait))
        handle = runs.handle(self.client, run)
        before = (await handle.describe()).run_id
        for i in range(budget // 4):
            wrong = ApprovalDecision(step_id=f"crowd{len(self.crowded)}.{i}", reviewer=REVIEWER)
            await handle.signal(APPROVE, wrong)  # refused and recorded: no such step waits
        deadline = time.monotonic() + CROWD_SECONDS
        while time.monotonic() < deadline:
            if (await handle.describe()).run_id != before:
                self.fault("waiting_handover")
                return
            await asyncio.sleep(0.1)

    async def replay_copy(self, run: str, step_id: str) -> None:
        """Send the first run's signed approve of this step onto the rerun, as a copier would."""
        copy = self.copies.pop(step_id, None)
        if copy is None:
            return
        await runs.handle(self.client, run).signal(APPROVE, copy)
        self.outcome.notes.append(f"{run} {step_id}: the first run's signed approval replayed")
