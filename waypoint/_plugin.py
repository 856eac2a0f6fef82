"""`WaypointPlugin`: Waypoint for any Temporal client and worker, as Temporal's plugins work.

On a client it sets the pydantic data converter (a client's own converter is kept). On a
worker it adds `AgentWorkflow` and the agents' steps, the interceptors, the sandbox passthrough
and the timings below, and polls each hosted agent's own queue beside the worker's
(`waypoint.protocol.queues`): `Worker(client, task_queue="waypoint",
plugins=[WaypointPlugin(agents)])` is a whole Waypoint worker. `build_worker` is that, from
`waypoint.settings`' defaults.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import temporalio.activity
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import Worker, WorkerConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from waypoint._activities.children import await_child, child_spent
from waypoint._activities.clock import clock
from waypoint._activities.decisions import DecisionActivities
from waypoint._activities.forks import load_fork
from waypoint._activities.history import history_size
from waypoint._activities.journal import AttemptJournal, JournalInterceptor
from waypoint._activities.model import ModelActivities, ModelProvider
from waypoint._activities.output import OutputActivities
from waypoint._activities.spec import SpecActivities
from waypoint._activities.tools import ToolActivities
from waypoint._agent import Agent, with_children
from waypoint._notify.config import NotifyConfig
from waypoint._notify.deliveries import Deliveries
from waypoint._providers.claude.backends import DEFAULT_TIMEOUT, Backend
from waypoint._providers.scripted import ScriptedModel
from waypoint._security.redaction import redact_logs
from waypoint._security.scrub import scrubbing
from waypoint._workflows import AgentWorkflow
from waypoint._workflows.live import LiveStreamWorkflow
from waypoint._workflows.plaintext_guard import PlaintextGuard
from waypoint.errors import DecisionKeyError
from waypoint.protocol.queues import agent_queue
from waypoint.stores.payloads import data_converter as waypoint_converter
from waypoint.stores.transcripts import TranscriptStore

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from waypoint._providers.claude.provider import AnthropicModel

log = logging.getLogger(__name__)

STICKY_TIMEOUT = timedelta(seconds=1)
"""A killed worker's runs wait this long on its sticky queue before another worker takes them
(SDK default 10 s; 3 s before: resume after SIGKILL took 3.1 s, now 1.1 s, with no change in
throughput); a SIGTERMed worker hands them over at once."""
HEARTBEAT_THROTTLE = timedelta(seconds=2)
"""An activity hears of a cancel (a steer cutting a model step short) only in a heartbeat's
answer, and the SDK sends them at most every 0.8 x the heartbeat timeout (48 s for a model
step): at most every 2 s instead, so a steer takes effect within seconds."""
TUNED = {
    "sticky_queue_schedule_to_start_timeout": STICKY_TIMEOUT,
    "max_heartbeat_throttle_interval": HEARTBEAT_THROTTLE,
}
"""Worker settings Waypoint sets in place of the SDK's defaults; a value given is kept."""


def _left_at_default(config: WorkerConfig, key: str) -> bool:
    """Whether `Worker` got no value for `key`: its own default object, not an equal one given."""
    return config.get(key) is inspect.signature(Worker).parameters[key].default


@dataclass(frozen=True)
class WorkerOptions:
    """What a worker needs beside its agents; every field has the default `waypoint worker` uses."""

    claude: ModelProvider | Backend | None = None
    """Call Claude through this provider, or through a client built for this backend
    (`anthropic`, `bedrock`, `vertex`) and closed with the worker; None plays the agents'
    scripts."""
    model_timeout: float = DEFAULT_TIMEOUT
    """With a backend for `claude`: its client's timeout, in seconds."""
    scripted: ScriptedModel | None = None
    """The scripted model; None plays each agent's `script`."""
    step_log: Path | None = None
    """Log every step execution here (see `waypoint._activities.step_log`)."""
    transcripts: Path | TranscriptStore | None = None
    """The transcript store or its folder; None keeps it in this process's memory (a restarted
    worker then gets the transcript resent once)."""
    live_text: bool = True
    """Stream Claude's words as they come (`waypoint._providers.live`)."""
    decision_keys: Mapping[str, Ed25519PublicKey] = field(default_factory=dict)
    """Reviewers' public keys, for agents with `signed_decisions=True`
    (`waypoint._security.signing.load_public_keys`)."""
    refuse_plaintext: bool = True
    """With a client that encodes payloads, runs this worker starts refuse decisions, answers,
    notes and policies sent unencoded (`_security.plaintext`)."""
    attempt_journal: Path | None = None
    """A folder on a local disk where the worker notes the attempts it runs, holding a lock
    there for its whole life; on start it fails the attempts of every process whose lock it
    can take (ended, in whatever container or pid namespace), so a SIGKILLed worker's steps are
    retried at once, not after their heartbeat timeout (`waypoint._activities.journal`). None:
    they wait. Notices' deliveries are noted beside it (`deliveries.db`), else in memory."""
    notify: NotifyConfig | None = None
    """Channels and routes for notices (`waypoint._notify.config.load_notify`); None: nobody is
    notified (a run still asks, and gets an empty plan)."""
    console_secret: str = field(default="", repr=False)
    """The console's secret, to sign review links with; empty: notices carry no link."""


def workflow_runner(runner: WorkflowRunner | None = None) -> WorkflowRunner:
    """Temporal's sandbox, with Waypoint's own modules imported once per process.

    The default sandbox imports the whole `waypoint._workflows` package afresh for every run it
    starts or takes back into its cache: about 50 ms of CPU on a quiet machine (164 ms loaded)
    and a private copy of those modules per cached run. Passed through, a run costs about 1 ms
    to set up. The modules hold no state of their own (`tests/test_layers.py` keeps their
    imports to the sandbox-safe ones), and replay keeps the strict default: every golden
    history and every torture run is replayed by a `Replayer` that imports and restricts all
    of it anew, so a clock or random read in workflow code still fails a test. A runner that
    is not a sandbox is left as it is.
    """
    if runner is None:
        return SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("waypoint")
        )
    if not isinstance(runner, SandboxedWorkflowRunner):
        return runner
    restrictions = runner.restrictions.with_passthrough_modules("waypoint")
    return dataclasses.replace(runner, restrictions=restrictions)


def waypoint_client(client: Client) -> Client:
    """`client` on the same connection, with Waypoint's converter if it had Temporal's default.

    Failures are recorded through the scrubbing converter either way (`waypoint._security.scrub`).
    """
    config = client.config()
    if config["data_converter"] is DataConverter.default:
        client = Client(**{**config, "data_converter": waypoint_converter(None)})
    return scrubbing(client)


@dataclass
class _Wiring:
    """What one plugin builds once for its worker and that worker's agent queues."""

    client: Client
    activities: list[Callable[..., Any]]
    interceptors: list[Any]
    journal: AttemptJournal | None
    closing: list[AnthropicModel]


class WaypointPlugin(SimplePlugin):
    """Waypoint for Temporal clients and workers (`Client.connect(plugins=...)`, `Worker(...)`).

    A worker that has it runs `agents` (and their sub-agents): on its own task queue and on
    each agent's queue, which it polls beside it. Build one plugin per worker.

    Args:
        agents: The agents the worker hosts; none on a client that only starts and decides.
        options: How the worker calls Claude, where it keeps what, whom it trusts.
        workflows: Replace `AgentWorkflow` and `LiveStreamWorkflow` (`[]`: steps only).
        data_converter: The client's converter; None keeps one the client has, or sets the
            pydantic converter in place of Temporal's default.
    """

    def __init__(
        self,
        agents: Sequence[Agent] = (),
        options: WorkerOptions | None = None,
        *,
        workflows: Sequence[type] | None = None,
        data_converter: DataConverter | None = None,
    ) -> None:
        self.agents = with_children(agents)  # sub-agents run on the same worker, as children
        self.options = options or WorkerOptions()
        signed = [a.name for a in self.agents if a.signed_decisions]
        if signed and not self.options.decision_keys:
            raise DecisionKeyError(
                f"agents {', '.join(signed)} accept signed decisions only, but this worker holds "
                "no reviewer public keys: set WAYPOINT_DECISION_KEYS=reviewer:BASE64,... (see "
                "`waypoint decision-key`)"
            )
        own = [AgentWorkflow, LiveStreamWorkflow] if workflows is None else list(workflows)
        self._wiring: _Wiring | None = None
        self._siblings: list[Worker] = []
        self.polling = asyncio.Event()
        """Set once killed workers' attempts are freed and every queue's worker runs (or that
        failed: the worker's run then raises why)."""
        super().__init__(
            "waypoint.WaypointPlugin",
            data_converter=data_converter or _keep_or_waypoint,
            workflows=lambda given: [*(given or []), *(w for w in own if w not in (given or []))],
        )

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """Add the workflows, the agents' steps, the interceptors and Waypoint's timings."""
        config = super().configure_worker(config)
        wiring = self._wire(config)
        config["client"] = wiring.client
        given = list(config.get("activities", ()))
        names = {_name(a) for a in given}  # given ones stand in for ours (a test's receiver)
        config["activities"] = [*given, *(a for a in wiring.activities if _name(a) not in names)]
        # The journal is outermost: an attempt is noted before any other interceptor runs.
        given = list(config.get("interceptors", ()))
        config["interceptors"] = [*wiring.interceptors[:-1], *given, wiring.interceptors[-1]]
        config["workflow_runner"] = workflow_runner(config.get("workflow_runner"))
        for key, ours in TUNED.items():
            if _left_at_default(config, key):
                config[key] = ours  # type: ignore[literal-required]
        return config

    def _wire(self, config: WorkerConfig) -> _Wiring:
        """The steps and interceptors, built on the first worker's client and shared after."""
        if self._wiring is not None:
            return self._wiring
        options = self.options
        client = waypoint_client(config["client"])  # type: ignore[typeddict-item]
        encoded = client.data_converter.payload_codec is not None
        if encoded:
            redact_logs()  # payloads are encoded: what they hold stays out of this process's logs
        by_name = {a.name: a for a in self.agents}
        closing: list[AnthropicModel] = []
        claude = options.claude
        if isinstance(claude, str):
            from waypoint._providers.claude.provider import AnthropicModel

            claude = AnthropicModel(backend=claude, timeout=options.model_timeout)
            closing.append(claude)
        scripted = options.scripted or ScriptedModel(
            {a.name: a.script for a in self.agents if a.script is not None}
        )
        providers: dict[str, ModelProvider] = {"scripted": scripted}
        if claude is not None:
            providers["anthropic"] = claude
        transcripts = options.transcripts
        if not isinstance(transcripts, TranscriptStore):
            transcripts = TranscriptStore(transcripts)
        offloaded = client.data_converter.external_storage is not None
        models = ModelActivities(
            providers, options.step_log, transcripts, options.live_text, offloaded
        )
        tools = ToolActivities(by_name, options.step_log, offloaded)
        refuse = encoded and options.refuse_plaintext
        specs = SpecActivities(
            by_name,
            use_anthropic=claude is not None,
            check_model=getattr(claude, "check_model", None),
            versioned=config.get("deployment_config") is not None,
            refuse_plaintext=refuse,
        )
        from waypoint._notify.activities import NotifyActivities  # httpx: not in the sandbox

        notices = NotifyActivities(
            options.notify or NotifyConfig(),
            by_name,
            Deliveries(
                options.attempt_journal and options.attempt_journal.parent / "deliveries.db"
            ),
            options.console_secret,
        )
        journal = None
        if options.attempt_journal is not None:
            journal = AttemptJournal(options.attempt_journal, client)
        self._wiring = _Wiring(
            client=client,
            activities=[
                models.call_model,
                tools.prepare_tool,
                tools.run_tool,
                specs.load_spec,
                OutputActivities(by_name).validate_output,
                await_child,
                child_spent,
                DecisionActivities(dict(options.decision_keys)).verify_decision,
                load_fork,
                clock,
                history_size,
                notices.notify,
                notices.notice_plan,
            ],
            # Runs that refuse plain text refuse it in every update (`_security.plaintext`).
            interceptors=[
                *([JournalInterceptor(journal)] if journal is not None else []),
                PlaintextGuard(refuse),
            ],
            journal=journal,
            closing=closing,
        )
        return self._wiring

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Run `worker` with a worker per hosted agent's queue; a fatal error stops them all."""
        if any(worker is s for s in self._siblings):
            await next(worker)
            return
        config = worker.config()
        queues = {agent_queue(worker.task_queue, a.name) for a in self.agents}
        siblings = [
            Worker(**{**config, "task_queue": q}) for q in sorted(queues - {worker.task_queue})
        ]
        self._siblings.extend(siblings)
        stopping: list[asyncio.Task[None]] = []

        def stop_all(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and task.exception() is not None:
                stopping.append(asyncio.ensure_future(worker.shutdown()))

        try:
            await self._free_dead()
            running = [asyncio.create_task(s.run()) for s in siblings]
            for task in running:
                task.add_done_callback(stop_all)
        finally:
            self.polling.set()
        try:
            await next(worker)
        finally:
            # All at once: each drains its running activities in parallel.
            await asyncio.gather(*(s.shutdown() for s in siblings))
            ended = await asyncio.gather(*running, *stopping, return_exceptions=True)
            await self._release()
        failed = [e for e in ended if isinstance(e, BaseException)]
        if failed:
            raise failed[0]

    async def _free_dead(self) -> None:
        """Fail the attempts that killed workers left running (best effort: heartbeats stay)."""
        wiring = self._wiring
        if wiring is None or wiring.journal is None:
            return
        try:
            wiring.journal.open()  # this process's lock first: it proves this one alive
            freed = await wiring.journal.free_dead(wiring.client)
        except Exception as err:  # the heartbeat timeout still frees them
            log.warning("attempt journal %s not read: %s", wiring.journal.folder, err)
            return
        if freed:
            log.info("freed %d attempts a killed worker left running", freed)

    async def _release(self) -> None:
        """Close what the plugin built, the agents' MCP sessions and the journal.

        An MCP stdio server left open writes into a pipe its worker left (a traceback in the
        log); a clean stop leaves no journal folder behind (its attempts have all ended).
        """
        wiring = self._wiring
        for resource in wiring.closing if wiring else ():
            await resource.close()
        for agent in self.agents:
            if agent.mcp:
                await agent.mcp_tools.aclose()
        if wiring is not None and wiring.journal is not None:
            wiring.journal.close()


def _name(fn: Callable[..., Any]) -> str | None:
    """An activity's registered name."""
    found = temporalio.activity._Definition.from_callable(fn)  # noqa: SLF001
    return found.name if found is not None else None


def _keep_or_waypoint(converter: DataConverter | None) -> DataConverter:
    """A client's own converter, or Waypoint's pydantic one in place of Temporal's default."""
    if converter is None or converter is DataConverter.default:
        return waypoint_converter(None)
    return converter
