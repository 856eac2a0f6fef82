"""Build a `Worker` from agents and tools: the shared queue and one queue per hosted agent.

What it connects to and which stores it uses come from `waypoint.settings`.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from waypoint.activities.children import await_child, child_spent
from waypoint.activities.clock import clock
from waypoint.activities.decisions import DecisionActivities
from waypoint.activities.forks import load_fork
from waypoint.activities.history import history_size
from waypoint.activities.journal import AttemptJournal, JournalInterceptor
from waypoint.activities.model import ModelActivities, ModelProvider
from waypoint.activities.output import OutputActivities
from waypoint.activities.spec import SpecActivities
from waypoint.activities.tools import ToolActivities
from waypoint.agent import Agent, with_children
from waypoint.errors import (
    AgentNotFoundError,
    DecisionKeyError,
)
from waypoint.operations.deploys import deployment_config
from waypoint.protocol.queues import agent_queue
from waypoint.providers.claude.backends import DEFAULT_TIMEOUT, Backend
from waypoint.providers.scripted import ScriptedModel
from waypoint.security.redaction import redact_logs, route_warnings
from waypoint.security.scrub import scrubbing
from waypoint.stores.transcripts import TranscriptStore
from waypoint.workflows import AgentWorkflow
from waypoint.workflows.live import LiveStreamWorkflow
from waypoint.workflows.plaintext_guard import PlaintextGuard

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from waypoint.mcp.toolset import MCPToolset
    from waypoint.providers.claude import AnthropicModel


from waypoint.settings import (
    DEFAULT_TASK_QUEUE,
    Settings,
    transcript_store,
)

log = logging.getLogger(__name__)


def workflow_runner() -> SandboxedWorkflowRunner:
    """Temporal's sandbox, with Waypoint's own modules imported once per process.

    The default sandbox imports the whole `waypoint.workflows` package afresh for every run it
    starts or takes back into its cache: about 50 ms of CPU on a quiet machine (164 ms loaded)
    and a private copy of those modules per cached run. Passed through, a run costs about 1 ms
    to set up. The modules hold no state of their own (`tests/test_layers.py` keeps their
    imports to the sandbox-safe ones), and replay keeps the strict default: every golden
    history and every torture run is replayed by a `Replayer` that imports and restricts all
    of it anew, so a clock or random read in workflow code still fails a test.
    """
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules("waypoint")
    )


def load_agents(app: str) -> list[Agent]:
    """Import `module:attribute` and return the agents it names."""
    module_name, _, attr = app.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = getattr(importlib.import_module(module_name), attr or "agents")
    except (ImportError, AttributeError) as err:
        raise AgentNotFoundError(f"cannot load agents from {app!r}: {err}") from err
    except Exception as err:  # the module itself failed, e.g. a setting it reads is missing
        raise AgentNotFoundError(
            f"cannot load agents from {app!r}: importing it raised {type(err).__name__}: {err}"
        ) from err
    if callable(target) and not isinstance(target, Agent):
        try:
            target = target()
        except TypeError as err:
            raise AgentNotFoundError(f"cannot call {app!r} to get its agents: {err}") from err
    try:
        agents = [target] if isinstance(target, Agent) else list(target)
    except TypeError:
        agents = [target]
    if not agents or not all(isinstance(a, Agent) for a in agents):
        raise AgentNotFoundError(
            f"{app!r} names a {type(target).__name__}, not an Agent, a list of Agents or a "
            "function returning them"
        )
    return agents


def build_worker(
    client: Client,
    agents: Sequence[Agent],
    *,
    task_queue: str = DEFAULT_TASK_QUEUE,
    use_anthropic: bool = False,
    anthropic: ModelProvider | None = None,
    claude_backend: Backend = "anthropic",
    model_timeout: float = DEFAULT_TIMEOUT,
    scripted: ScriptedModel | None = None,
    step_log: Path | None = None,
    transcripts: Path | TranscriptStore | None = None,
    live_text: bool = True,
    decision_keys: Mapping[str, Ed25519PublicKey] | None = None,
    refuse_plaintext: bool = True,
    attempt_journal: Path | None = None,
    **worker_options: Any,
) -> AgentWorkers:
    """The workers that run `AgentWorkflow` on one task queue, and these agents' steps.

    Runs, queries and decisions are served from `task_queue` by any worker; each agent's steps
    come from its own queue (`waypoint.protocol.queues`), so workers on one queue may host different
    agents and a run still never reaches a worker without its agent.

    Args:
        client: A client connected with the pydantic data converter.
        agents: The agents this worker can run.
        task_queue: The queue runs are started on.
        use_anthropic: Call Claude instead of the agents' scripts.
        anthropic: The Claude provider; defaults to one built for `claude_backend`.
        claude_backend: How the default provider reaches Claude (see `Settings`).
        model_timeout: The default provider's client timeout, in seconds.
        scripted: The scripted model; defaults to one playing each agent's script.
        step_log: Log every step execution here (see `waypoint.activities.step_log`).
        transcripts: The transcript store or its folder; None keeps it in this process's
            memory (a restarted worker then gets the transcript resent once).
        live_text: Stream Claude's words as they come (`waypoint.providers.live`).
        decision_keys: Reviewers' public keys, for agents with `signed_decisions=True`
            (`waypoint.security.signing.load_public_keys`).
        refuse_plaintext: With a client that encodes payloads, runs this worker starts refuse
            decisions, answers, notes and policies sent unencoded (`waypoint.security.plaintext`).
        attempt_journal: A folder on a local disk where the workers note the attempts they
            run, each process holding a lock there for its whole life; on start they fail the
            attempts of every process whose lock they can take (it has ended, in whatever
            container or pid namespace), so a SIGKILLed worker's steps are retried at once,
            not after their heartbeat timeout (`waypoint.activities.journal`). None: they wait.
        worker_options: Passed to each `temporalio.worker.Worker` (e.g. `max_cached_workflows`,
            `graceful_shutdown_timeout` to let running tools finish when the worker stops, as
            `waypoint worker` does, or `deployment_config` from
            `waypoint.operations.deploys.deployment_config` to version it).
    """
    encoded = client.data_converter.payload_codec is not None
    if encoded:
        redact_logs()  # payloads are encoded: what they hold stays out of this process's logs
    client = scrubbing(client)
    agents = with_children(agents)  # sub-agents run on the same worker, as child workflows
    by_name = {a.name: a for a in agents}
    signed = [a.name for a in agents if a.signed_decisions]
    if signed and not decision_keys:
        raise DecisionKeyError(
            f"agents {', '.join(signed)} accept signed decisions only, but this worker holds no "
            "reviewer public keys: set WAYPOINT_DECISION_KEYS=reviewer:BASE64,... (see "
            "`waypoint decision-key`)"
        )
    # A killed worker's runs wait this long on its sticky queue before another worker takes
    # them (SDK default 10 s; 3 s here before: resume after SIGKILL took 3.1 s, now 1.1 s, with
    # no change in throughput); a SIGTERMed worker hands them over at once.
    worker_options.setdefault("sticky_queue_schedule_to_start_timeout", timedelta(seconds=1))
    # An activity hears of a cancel (a steer cutting a model step short) only in a heartbeat's
    # answer, and the SDK sends heartbeats at most every 0.8 x the heartbeat timeout (48 s for
    # a model step): at most every 2 s instead, so a steer takes effect within seconds.
    worker_options.setdefault("max_heartbeat_throttle_interval", timedelta(seconds=2))
    worker_options.setdefault("workflow_runner", workflow_runner())
    built: list[AnthropicModel] = []  # closed with the workers; one handed in is the caller's
    if anthropic is None and use_anthropic:
        from waypoint.providers.claude import AnthropicModel

        anthropic = AnthropicModel(backend=claude_backend, timeout=model_timeout)
        built.append(anthropic)
    if scripted is None:
        scripted = ScriptedModel({a.name: a.script for a in agents if a.script is not None})
    providers: dict[str, ModelProvider] = {"scripted": scripted}
    if anthropic is not None:
        providers["anthropic"] = anthropic
    if not isinstance(transcripts, TranscriptStore):
        transcripts = TranscriptStore(transcripts)
    offloaded = client.data_converter.external_storage is not None
    models = ModelActivities(providers, step_log, transcripts, live_text, task_queue, offloaded)
    tools = ToolActivities(by_name, step_log, offloaded)
    check = getattr(anthropic, "check_model", None)
    versioned = worker_options.get("deployment_config") is not None
    specs = SpecActivities(
        by_name,
        use_anthropic=use_anthropic,
        check_model=check,
        versioned=versioned,
        refuse_plaintext=encoded and refuse_plaintext,
    )
    output = OutputActivities(by_name)
    steps = [
        models.call_model,
        tools.prepare_tool,
        tools.run_tool,
        specs.load_spec,
        output.validate_output,
    ]
    workflows = worker_options.pop("workflows", [AgentWorkflow, LiveStreamWorkflow])
    # Runs that refuse plain text refuse it in every update (`waypoint.security.plaintext`).
    # The journal is outermost: an attempt is noted before any other interceptor runs for it.
    journal = AttemptJournal(attempt_journal, client) if attempt_journal else None
    worker_options["interceptors"] = [
        *([JournalInterceptor(journal)] if journal is not None else []),
        *worker_options.get("interceptors", ()),
        PlaintextGuard(encoded and refuse_plaintext),
    ]
    activities = [
        *steps,
        await_child,
        child_spent,
        DecisionActivities(decision_keys or {}).verify_decision,
        load_fork,
        clock,
        history_size,
    ]
    # Each agent's queue carries its runs and their steps; the shared queue serves runs other
    # clients start there (their steps go to the agent's queue) and runs from before.
    shared = Worker(
        client,
        task_queue=task_queue,
        workflows=workflows,
        activities=activities,
        **worker_options,
    )
    own = [
        Worker(
            client,
            task_queue=agent_queue(task_queue, name),
            workflows=workflows,
            activities=activities,
            **worker_options,
        )
        for name in by_name
    ]
    toolsets = [a.mcp_tools for a in by_name.values() if a.mcp]
    freeing = (client, journal) if journal is not None else None
    return AgentWorkers([shared, *own], closing=built, toolsets=toolsets, freeing=freeing)


class AgentWorkers:
    """One process's Temporal workers, started and stopped together like one `Worker`.

    The first polls the shared queue (runs started there by other clients, and older runs); the
    others poll the queues of the agents this process hosts, which carry their runs and steps.
    """

    def __init__(
        self,
        workers: Sequence[Worker],
        closing: Sequence[AnthropicModel] = (),
        toolsets: Sequence[MCPToolset] = (),
        freeing: tuple[Client, AttemptJournal] | None = None,
    ) -> None:
        self.workers = list(workers)
        self._freeing = freeing
        """The journal whose dead processes' attempts are failed as these workers start."""
        self._closing = list(closing)
        """What `build_worker` built for them (a Claude client): closed once they stop."""
        self._toolsets = list(toolsets)
        """The agents' MCP sessions: closed once the workers stop, so a stdio server exits
        cleanly instead of writing into a pipe its worker left (a traceback in the log)."""
        self._stack: AsyncExitStack | None = None

    async def _free_dead(self) -> None:
        if self._freeing is not None:
            client, journal = self._freeing
            try:
                journal.open()  # this process's lock first: it proves this one alive
                freed = await journal.free_dead(client)
            except Exception as err:  # best effort: the heartbeat timeout still frees them
                log.warning("attempt journal %s not read: %s", journal.folder, err)
                return
            if freed:
                log.info("freed %d attempts a killed worker left running", freed)

    async def __aenter__(self) -> AgentWorkers:
        await self._free_dead()
        async with AsyncExitStack() as stack:
            for worker in self.workers:
                await stack.enter_async_context(worker)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await self.shutdown()  # all at once: each drains its running activities in parallel
            await stack.__aexit__(*exc)
        for resource in self._closing:
            await resource.close()
        for toolset in self._toolsets:
            await toolset.aclose()
        self._close_journal()

    def _close_journal(self) -> None:
        """A clean stop leaves no folder behind (its attempts have all ended)."""
        if self._freeing is not None:
            self._freeing[1].close()

    async def run(self) -> None:
        """Poll every queue until shut down; a fatal error in one stops them all, then raises."""
        await self._free_dead()
        try:
            await asyncio.gather(*(worker.run() for worker in self.workers))
        finally:
            await self.shutdown()
            self._close_journal()

    async def shutdown(self) -> None:
        """Stop polling and wait for the running activities of every worker."""
        await asyncio.gather(*(worker.shutdown() for worker in self.workers))


def worker_from_settings(
    client: Client, agents: Sequence[Agent], settings: Settings
) -> AgentWorkers:
    """`build_worker` configured from `Settings` (what `waypoint worker` runs)."""
    from waypoint.providers.pricing import (
        use_price_file,  # not at the top: keep it out of the sandbox
    )

    route_warnings()  # through the log's handlers (and, with encryption on, its redaction)
    use_price_file(settings.prices_file)
    options: dict[str, Any] = {
        "max_cached_workflows": settings.max_cached_workflows,
        "graceful_shutdown_timeout": timedelta(seconds=settings.drain_seconds),
    }
    if version := deployment_config(settings.deployment, settings.build_id):
        options["deployment_config"] = version
    agents = with_children(agents)
    scripts = {a.name: a.script for a in agents if a.script is not None}
    if settings.decision_keys:
        from waypoint.security.signing import load_public_keys  # cryptography: not in the sandbox

        options["decision_keys"] = load_public_keys(settings.decision_keys)
    return build_worker(
        client,
        agents,
        task_queue=settings.task_queue,
        use_anthropic=settings.use_anthropic,
        claude_backend=settings.claude_backend,
        model_timeout=settings.model_timeout,
        scripted=ScriptedModel(scripts, latency=settings.scripted_latency),
        step_log=settings.step_log,
        transcripts=transcript_store(settings),
        refuse_plaintext=settings.refuse_plaintext,
        attempt_journal=settings.attempt_journal,
        **options,
    )
