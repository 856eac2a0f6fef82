"""The scenario's driver: a worker subprocess, the faults it meets, and what operators do.

`waypoint._torture.play` starts a worker subprocess on a fresh task queue and the run; this
driver acts on it the way operators would: it decides approvals (right hash, stale hash,
reject), answers client questions (fitting or not), resolves parked effects by asking the
downstream, resumes after outages, raises limits, and fires the scenario's actions (kills,
SIGTERMs, deploys, cancel, correct, policy, a reader (`watch`), fork, a Temporal server
SIGKILL and restart, and the later ones of `waypoint._torture.operators`: steer, raise
limits, deploy check, rerun) at their moments. A worker that a fault killed inside an
effect is started again; `play` returns what `invariants.check` judges.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from temporalio.client import (
    Client,
)
from temporalio.service import RPCError

from waypoint._operations import deploys
from waypoint._operations.dev_server import DevServer, start_dev_server
from waypoint._torture.agent import Downstream
from waypoint._torture.operators import REVIEWER, Operators
from waypoint._torture.scenario import LATER_ACTIONS, Action, Call, Scenario
from waypoint._torture.starts import OPTIONS, drawn
from waypoint._torture.verbs import DRIVERS
from waypoint.client import decisions, runs
from waypoint.errors import WaypointError
from waypoint.protocol import (
    ApprovalDecision,
    Correction,
    Limits,
    Resolution,
    RunInput,
    RunStatus,
)
from waypoint.protocol.policy import ApprovalPolicy, Rule
from waypoint.protocol.states import RESUMABLE_STATES
from waypoint.protocol.verbs import APPROVE
from waypoint.testing import WorkerProcess

STORE_THRESHOLD = 1024
"""Payloads of at least this many bytes go to the object store in a `store` scenario: most
model and tool steps, so history holds references."""
STALE_HASH = "0" * 64
READ_FOR = 2.0
"""Seconds the `watch` action reads a run before it leaves."""


class ModelServer(Protocol):
    """A Messages API the worker calls (`ANTHROPIC_BASE_URL`), which bills what it answers."""

    @property
    def base_url(self) -> str: ...  # noqa: D102

    usages: list[dict[str, Any]]


@dataclass
class Outcome:
    """What happened while a scenario ran: the evidence `check` judges."""

    scenario: Scenario
    task_queue: str
    run_ids: list[str]
    """The scenario's run first, then its forks."""
    folder: Path
    seconds: float = 0.0
    faults: dict[str, int] = field(default_factory=dict)
    limits: dict[str, Limits] = field(default_factory=dict)
    """Each run's limits as last raised."""
    started: RunInput | None = None
    """What the scenario's run was to start with (`started_as_drawn` holds it to that)."""
    restarts: int = 0
    """Worker starts after the first: a model call in flight may have been billed twice."""
    stuck: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Operator commands refused where the scenario expected it (stale hash, bad answer)."""
    exit_codes: list[int] = field(default_factory=list)
    """Of each SIGTERMed worker: a clean shutdown is 0."""
    client: Client | None = None
    """The client connected after the last server restart, if the scenario restarted it."""
    reruns: dict[str, str] = field(default_factory=dict)
    """A rerun workflow id -> the run id its first chain ended in."""
    deploy_check: list[str] = field(default_factory=list)
    """What `waypoint deploy check` of the running, unchanged build reported broken."""

    def downstream(self) -> Downstream:
        """The scenario's counted downstream."""
        return Downstream(self.folder / "downstream.db")


def worker_env(
    address: str,
    task_queue: str,
    folder: Path,
    api: ModelServer,
    store: Path | None = None,
    offload: bool = False,
) -> dict[str, str]:
    """What a torture worker process runs with; `offload` sends most payloads to `store`."""
    root = Path(__file__).resolve().parents[2]
    threshold = {"WAYPOINT_PAYLOAD_THRESHOLD": str(STORE_THRESHOLD)} if store and offload else {}
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": address,
        "WAYPOINT_TASK_QUEUE": task_queue,
        "WAYPOINT_TORTURE_DIR": str(folder),
        "WAYPOINT_TRANSCRIPT_STORE": str(folder / "transcripts"),
        "WAYPOINT_PAYLOAD_STORE": str(store) if store else "off",
        **threshold,
        "WAYPOINT_STEP_LOG": str(folder / "steps.log"),
        "ANTHROPIC_API_KEY": "torture",
        "ANTHROPIC_BASE_URL": api.base_url,
        "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p),
    }


class Driver(Operators):
    """Drives the runs of one scenario to their end, as operators and faults would."""

    def __init__(
        self,
        client: Client,
        scenario: Scenario,
        worker: WorkerProcess,
        outcome: Outcome,
        server: DevServer | None = None,
    ) -> None:
        self.client = client
        self.deployment = ""
        """The worker deployment of a `versioned` scenario; its first build is `v1`."""
        self.builds: list[WorkerProcess] = []
        """Workers of later builds, started by `deploy_build`."""
        self.server = server
        """The scenario's own server, which `server_kill` kills and restarts."""
        self.scenario = scenario
        self.worker = worker
        self.outcome = outcome
        self.calls: dict[str, Call] = {c.ref: c for c in scenario.calls()}
        self.kills_at_start: set[str] = set()
        """The kill faults fired before the current worker started."""
        self.done: set[tuple[str, str]] = set()
        """(run, step) decided or answered already."""
        self.resolved: dict[tuple[str, str], tuple[int, float]] = {}
        """(run, step and why it parked) -> resolutions sent, and when the last was."""
        self.last_resume: dict[str, float] = {}
        self.follow_ups = {}
        self.pending_actions = sorted(scenario.actions, key=lambda a: (a.at_turn, a.delay))
        self.reached: dict[int, float] = {}
        self.options = OPTIONS
        self.drawn = drawn(scenario)
        self.sign_with(scenario, worker)

    def fault(self, kind: str) -> None:
        """Count one fault or action."""
        self.outcome.faults[kind] = self.outcome.faults.get(kind, 0) + 1

    async def read(self, run: str) -> None:
        """A reader follows the run for a moment and leaves (`invariants`: it wrote nothing)."""
        with contextlib.suppress(TimeoutError, WaypointError, RPCError):
            async with asyncio.timeout(READ_FOR):
                async for _ in runs.events(self.client, run):
                    pass

    def restart(self, how: str, build: str | None = None) -> None:
        """SIGKILL or SIGTERM the worker and start it again, on `build` if given."""
        if how == "kill":
            self.worker.kill()
        else:
            self.stop(self.worker)
        if build is not None:
            self.worker.env["WAYPOINT_TORTURE_BUILD"] = build
        self.kills_at_start = self.kills_fired()
        self.worker.start(timeout=60)
        self.outcome.restarts += 1

    def kills_fired(self) -> set[str]:
        """The kill faults that have fired (each SIGKILLs the worker that met it)."""
        fired = {p.name.removeprefix("fired-") for p in self.outcome.folder.glob("fired-*")}
        return {r for r in fired if self.calls.get(r, Call("", r)).fault.startswith("kill")}

    def stop(self, worker: WorkerProcess) -> None:
        """SIGTERM a worker, keep its exit code unless a fault SIGKILLed it first or meanwhile.

        A kill fault that fired just before the SIGTERM may still be ending the process, so
        every kill since the worker started counts (seed 6200 met one).
        """
        process = worker.process
        if process is None or process.poll() is None:
            code = worker.stop()
            killed = bool(self.kills_fired() - self.kills_at_start)
            if not (code == -signal.SIGKILL and killed):
                self.outcome.exit_codes.append(code)
                return
        self.fault("worker_died_in_effect")

    async def restart_server(self) -> None:
        """SIGKILL the Temporal server and start it again on its state folder and ports."""
        if self.server is None:
            self.outcome.notes.append("server_kill: the scenario has no server of its own")
            return
        server = self.server
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait()
        port = int(server.address.rsplit(":", 1)[1])
        ui_port = int(server.ui_url.rstrip("/").rsplit(":", 1)[1])
        # The same object follows the new process, so whoever started the server stops it.
        server.process = start_dev_server(server.state_dir, port=port, ui_port=ui_port).process
        self.client = await Client.connect(
            server.address, data_converter=self.client.data_converter
        )
        self.outcome.client = self.client
        if self.channel is not None:
            self.channel.follow(self.client)

    async def deploy_build(self, run: str) -> None:
        """Start a worker of a new build (a changed prompt), make it current, move the run."""
        if not self.deployment:
            self.outcome.notes.append("deploy_build: the scenario's workers are not versioned")
            return
        build = f"v{len(self.builds) + 2}"
        env = {**self.worker.env, "WAYPOINT_BUILD_ID": build, "WAYPOINT_TORTURE_BUILD": "prompt"}
        worker = WorkerProcess(self.worker.app, env, self.outcome.folder / f"worker-{build}.log")
        self.builds.append(worker)
        worker.start(timeout=60)
        await make_current(self.client, self.deployment, build)
        described = await runs.handle(self.client, run).describe()
        await deploys.auto_upgrade(self.client, run, described.run_id or "")

    async def step(self, run: str, status: RunStatus) -> None:
        """React to what the run waits for."""
        for p in status.pending_approvals:
            if (run, p.step_id) not in self.done:
                await self._decide(run, p.step_id, p.arguments, p.arguments_hash)
        for q in status.pending_questions:
            if (run, q.step_id) not in self.done:
                await self._answer(run, q.step_id, str(q.arguments.get("question", "")))
        now = time.monotonic()
        for u in status.unresolved:
            # A step parks again when what it relied on changed while it waited (`retry` runs
            # on fresh reads), or when its retry cannot run (a changed tool with no reconcile):
            # a park seen again 2 s after its resolution is resolved again, `abort` the second
            # time when the downstream still has nothing.
            tries, at = self.resolved.get((run, f"{u.step_id}\n{u.reason}"), (0, 0.0))
            if not tries or (tries == 1 and now - at > 2.0):
                await self.crowd(run, f"{u.step_id} unresolved: {u.reason}")
                await self._resolve(run, u.step_id, u.effect_key, u.reason, again=bool(tries))
        if status.state in RESUMABLE_STATES:  # request_invalid is reported, not resumed (play)
            if now - self.last_resume.get(run, 0) > 1.0:
                self.last_resume[run] = now
                # No rollback in a scenario: a changed tool's step is replanned, as documented.
                replan = status.state == "tool_changed"
                if replan:
                    self.fault("resume_replan_tool_changed")  # counted: the soak shows it ran
                await self.crowd(run, f"{status.state}: {status.detail}")
                await self.send_resume(run, replan)
        if status.state == "limit_reached" and now - self.last_resume.get(run, 0) > 1.0:
            self.last_resume[run] = now
            await self.crowd(run, f"{status.state}: {status.detail}")
            await self.raise_limits(run, turns=20, factor=2.0, extra=0.05)

    async def _decide(
        self, run: str, step_id: str, arguments: dict[str, Any], arguments_hash: str
    ) -> None:
        call = self.calls.get(str(arguments.get("ref", "")))
        decision = call.decision if call and call.kind == "approval" else "approve"
        await self.before_deciding(run, step_id)
        if decision == "stale_then_approve":
            stale = ApprovalDecision(step_id=step_id, reviewer=REVIEWER, arguments_hash=STALE_HASH)
            await runs.handle(self.client, run).signal(APPROVE, stale)
            self.outcome.notes.append(f"{run} {step_id}: stale approval sent")
        if self.channel is not None:
            sending = self.channel.decide(run, step_id, arguments_hash, decision != "reject")
        else:
            send = decisions.reject if decision == "reject" else decisions.approve
            sending = send(self.client, run, step_id, reviewer=REVIEWER, signing_key=self.key)
        if await self.noted(f"{run} {step_id}", "decision", sending):
            self.done.add((run, step_id))

    async def _answer(self, run: str, step_id: str, ref: str) -> None:
        call = self.calls.get(ref)
        if call is not None and call.decision == "bad_then_answer":
            with contextlib.suppress(WaypointError):
                await self.send_answer(run, step_id, {"wrong": 1})
                self.outcome.notes.append(f"{run} {step_id}: an answer that does not fit went in")
        answering = self.send_answer(run, step_id, {"answer": "yes"})
        if await self.noted(f"{run} {step_id}", "answer", answering):
            self.done.add((run, step_id))

    async def _resolve(
        self, run: str, step_id: str, key: str | None, reason: str, again: bool = False
    ) -> None:
        """What a careful operator does: ask the downstream, then record, retry or abort."""
        found = self.outcome.downstream().find(key) if key else None
        resolution = Resolution(
            step_id=step_id,
            action="result" if found else "abort" if again else "retry",
            result=str(found or ""),
            reviewer=REVIEWER,
            reason="looked it up downstream",
        )
        if self.channel is not None:
            sending = self.channel.resolve(run, resolution)
        else:
            sending = decisions.resolve(self.client, run, resolution, signing_key=self.key)
        if await self.noted(f"{run} {step_id}", "resolution", sending):
            self.resolved[(run, f"{step_id}\n{reason}")] = (1 + again, time.monotonic())

    async def act(self, run: str, turn: int) -> None:
        """Fire the actions whose moment has come (and a follow-up whose moment has)."""
        await self.due(run)
        now = time.monotonic()
        for t in range(1, turn + 1):
            self.reached.setdefault(t, now)
        while self.pending_actions:
            action = self.pending_actions[0]
            seen = self.reached.get(action.at_turn)
            if seen is None or now - seen < action.delay:
                return
            self.pending_actions.pop(0)
            await self._do(run, action, turn)

    async def _do(self, run: str, action: Action, turn: int) -> None:
        self.fault(action.kind)
        kind = action.kind
        if kind in ("kill", "term"):
            self.restart(kind)
        elif kind == "deploy_build":
            await self.deploy_build(run)
        elif kind.startswith("deploy_"):
            self.restart("term", build=kind.removeprefix("deploy_"))
        elif kind == "server_kill":
            await self.restart_server()
        elif kind in LATER_ACTIONS:
            await self.later(run, action)
        elif (drive := DRIVERS.get(kind)) is not None:
            await drive(self, run)
        elif kind == "watch":
            await self.read(run)
        elif kind == "correct":
            note = Correction(note="torture: carry on", reviewer=REVIEWER, reason="torture")
            with contextlib.suppress(WaypointError):
                await decisions.correct(self.client, run, note, signing_key=self.key)
        elif kind == "policy_set":
            policy = ApprovalPolicy(rules=[Rule(action="ask", tool="pay")])
            with contextlib.suppress(WaypointError):
                await decisions.set_policy(
                    self.client, run, policy, reviewer=REVIEWER, signing_key=self.key
                )
        elif kind == "fork" and turn >= 1:
            try:
                forked = await runs.fork(
                    self.client, run, max(1, turn - 1), task_queue=self.outcome.task_queue,
                    reviewer=REVIEWER, signing_key=self.key,
                )  # fmt: skip
            except WaypointError as err:
                self.outcome.notes.append(f"{run}: fork refused: {err}")
            else:
                self.outcome.run_ids.append(forked.id)


async def make_current(client: Client, deployment: str, build: str, timeout: float = 30) -> None:
    """Make `build` current once the server has seen its worker poll."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await deploys.set_current(client, deployment, build)
        except WaypointError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
