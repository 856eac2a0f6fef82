"""A real Temporal dev server for the whole session, and a worker per test on its own queue.

The suite runs on several processes (`pytest -n`, see scripts/test.sh): each has its own session
dev server and its own Waypoint home, so nothing here is shared between them but the disk.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from tests.agents import PAY_SCRIPT, Payments, build_agent
from waypoint._agent import Agent
from waypoint._plugin import WorkerOptions
from waypoint._providers.scripted import ScriptedModel
from waypoint._worker import build_worker
from waypoint.client import runs
from waypoint.errors import RunStuckError
from waypoint.protocol import HistoryLimits, PendingApproval, RunInput, RunResult, RunStatus
from waypoint.protocol import search_attributes as sa
from waypoint.testing import Script

if TYPE_CHECKING:
    from tests.fake_messages_api import FakeMessagesAPI
    from waypoint._providers.claude.provider import AnthropicModel

Claude = Callable[[Any], "AnthropicModel"]
"""Builds a Claude provider on a `FakeMessagesAPI` (the `claude` fixture)."""

TEMPORAL = Path(sys.executable).parent / "temporal"


def pytest_configure(config: pytest.Config) -> None:
    """Give this process its own Waypoint home (`ui.home()`), before any fixture starts a server.

    Every embedded server started records itself there, and `waypoint server --stop` with no
    state dir stops the one recorded last: one home per test process keeps those records apart,
    and out of the user's own `~/.waypoint` (or `$WAYPOINT_HOME`).
    """
    home = tempfile.mkdtemp(prefix="waypoint-home-")  # a worker's, not its parent's it inherits
    os.environ["WAYPOINT_HOME"] = home
    config.add_cleanup(lambda: shutil.rmtree(home, ignore_errors=True))


# Modules holding a test of about 15 s or more (`--durations` of a quiet fresh-clone run, 2
# cores, 2f3538b), longest first. A parallel run hands them out first, so it ends on short tests
# instead of waiting on a long one that was handed out last. Serial runs keep the files' order.
STARTED_FIRST = (
    "test_object_store",
    "test_torture",
    "test_procurement",
    "test_kill",
    "test_steer",
    "test_mcp",
    "test_stores",
    "test_cli",
    "test_subagents",
    "test_tracing",
    "test_changes",
    "test_codec",
    "test_carried_state",
    "test_browser",
    "test_readme",
    "test_operator_truth",
    "test_tool_recovery",
    "test_long_runs",
    "test_fleet",
    "test_client_tools",
    "test_cli_edges",
    "test_compaction_edges",
    "test_encryption_at_rest",
    "test_events",
    "test_agent_queues",
    "test_change_meets_effect",
    "test_seams",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, start the long tests first (every worker sorts the same way)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    rank = {name: i for i, name in enumerate(STARTED_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: file order within
    if getattr(config.option, "loadgroup", False):
        for item in items:
            join_its_group(item)


def join_its_group(item: pytest.Item) -> None:
    """Suffix an `xdist_group` test's id with its group, which `--dist loadgroup` schedules by.

    pytest-xdist 3.8 writes the suffix to `item._nodeid`, which pytest 9.2's structured ids no
    longer read (pytest-xdist issue 1386): a grouped module was spread over every worker and set
    its module fixtures up on each (the 1,008 stand-in runs of test_console_lists four times).
    """
    groups = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                     for m in item.iter_markers("xdist_group")})  # fmt: skip
    suffix = "@" + "_".join(groups)
    if groups and hasattr(item, "_id") and not item.nodeid.endswith(suffix):
        item._id = type(item._id).parse(item.nodeid + suffix)  # type: ignore[attr-defined]


LISTS_NAMESPACE = "waypoint-lists"


@pytest.fixture(scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    async with await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(TEMPORAL),
        data_converter=pydantic_data_converter,
        search_attributes=sa.ALL,
        # One partition a task queue: the suite makes a thousand queues, and each extra
        # partition is loaded and polls its root for user data (8% of the server's CPU).
        dev_server_extra_args=[
            "--dynamic-config-value",
            "history.transferProcessorMaxPollRPS=1000",
            "--dynamic-config-value",  # as the embedded server: a retry due now starts now
            'history.timerProcessorMaxTimeShift="50ms"',
            "--dynamic-config-value",
            "matching.numTaskqueueReadPartitions=1",
            "--dynamic-config-value",
            "matching.numTaskqueueWritePartitions=1",
            "--namespace",  # for a thousand stand-in runs no other test's list may see
            LISTS_NAMESPACE,
        ],
    ) as env:
        yield env


@pytest.fixture
async def client(env: WorkflowEnvironment) -> Client:
    return env.client


@pytest.fixture
async def claude() -> AsyncIterator[Claude]:
    """Claude providers on fake APIs, their clients closed after the test.

    An unclosed client's finalizer schedules its close on whatever loop runs when it is
    collected: inside a workflow that is a stray task the SDK reports as destroyed pending.
    """
    from anthropic import AsyncAnthropic  # here: workflows in test modules import this file

    from waypoint._providers.claude.provider import AnthropicModel

    clients: list[AsyncAnthropic] = []

    def build(api: Any) -> AnthropicModel:
        clients.append(AsyncAnthropic(base_url=api.base_url, api_key="test", max_retries=0))
        return AnthropicModel(clients[-1])

    yield build
    for sdk in clients:
        await sdk.close()


@pytest.fixture
def api() -> Iterator[FakeMessagesAPI]:
    """A local Messages API server, empty until the test scripts its answers."""
    from tests.fake_messages_api import FakeMessagesAPI

    with FakeMessagesAPI() as api:
        yield api


@pytest.fixture
def task_queue() -> str:
    return f"tq-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def cli_env(env: WorkflowEnvironment, tmp_path: Path, task_queue: str) -> dict[str, str]:
    """What a `waypoint` process of this test runs with: this server, queue and payments."""
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": "default",
        "WAYPOINT_TASK_QUEUE": task_queue,
        "WAYPOINT_TEST_PAYMENTS": str(tmp_path / "payments.db"),
        "PYTHONPATH": str(Path(__file__).parent.parent),
    }


SMALL_HISTORY = HistoryLimits(max_events=80, keep_recent_turns=2)
"""A history budget small enough that a run continues-as-new every few turns."""


async def start_directly(
    client: Client, workflow_id: str, task_queue: str, run: RunInput, **start: Any
) -> WorkflowHandle[Any, RunResult]:
    """Start `run` straight through Temporal, as any client may: no check, no wait for a worker.

    `start` goes to `Client.start_workflow` (`start_signal=`, ...).
    """
    return await client.start_workflow(
        "AgentWorkflow", run, id=workflow_id, task_queue=task_queue, result_type=RunResult, **start
    )


async def start_continuing(
    client: Client,
    workflow_id: str,
    task_queue: str,
    agent: str = "payer",
    task: str = "long",
    history: HistoryLimits = SMALL_HISTORY,
) -> WorkflowHandle[Any, RunResult]:
    """Start `agent` straight through Temporal with a small `history`: it continues-as-new."""
    run = RunInput(agent=agent, task=task, history=history)
    return await start_directly(client, workflow_id, task_queue, run)


@asynccontextmanager
async def running_worker(
    client: Client,
    agents: Sequence[Agent],
    task_queue: str,
    **options: Any,
) -> AsyncIterator[ScriptedModel]:
    """Run a worker for these agents; yields the scripted model so tests can count its calls.

    `options` are `WorkerOptions` fields (`claude=`, `transcripts=`, ...) and `Worker` settings.
    """
    fields = {f.name for f in dataclasses.fields(WorkerOptions)}
    chosen = {k: options.pop(k) for k in fields & options.keys()}
    scripted = chosen.pop("scripted", None) or ScriptedModel(
        {a.name: a.script for a in agents if a.script is not None}
    )
    given = WorkerOptions(scripted=scripted, **chosen)
    async with build_worker(client, agents, task_queue=task_queue, options=given, **options):
        yield scripted


@asynccontextmanager
async def payer_run(
    client: Client, task_queue: str, payments: Payments, script: Script = PAY_SCRIPT, **start: Any
) -> AsyncIterator[WorkflowHandle[Any, RunResult]]:
    """A worker for the payer whose payments wait for approval, and its run on "pay ada 5".

    `start` goes to `start_run` (`limits=`, `workflow_id=`, ...).
    """
    agent = build_agent(payments, script, approval=True)
    async with running_worker(client, [agent], task_queue):
        yield await runs.start_run(client, "payer", "pay ada 5", task_queue=task_queue, **start)


async def wait_for_state(client: Client, run: str, state: str, timeout: float = 60) -> RunStatus:
    """Poll the run's status query until it reaches `state` (a minute: CI may be busy).

    Each query is a round trip through the worker, so the pause grows from 50 to 200 ms: a
    state reached at once is seen at once, a long wait asks 5 times a second, not 20.
    """
    deadline = asyncio.get_running_loop().time() + timeout
    current: RunStatus | str = "no answer yet"
    pause = 0.05
    while True:
        try:
            current = await runs.status(client, run)
        except RunStuckError as err:  # e.g. a worker still reconnecting after a server restart
            current = str(err)
        if isinstance(current, RunStatus) and current.state == state:
            return current
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"run {run} did not reach {state}: {current}")
        await asyncio.sleep(pause)
        pause = min(pause * 1.5, 0.2)


async def the_pending_approval(client: Client, run: str) -> PendingApproval:
    """Wait until the run waits for approval of exactly one call, and return it."""
    (pending,) = (await wait_for_state(client, run, "awaiting_approval")).pending_approvals
    return pending


async def wait_until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 30) -> None:
    """Poll `check` until it holds: for eventually consistent answers such as visibility."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.05)


async def wait_for_visibility(client: Client, query: str, count: int) -> None:
    """Wait until the visibility store lists `count` runs for `query`: it lags behind the runs."""

    async def listed() -> bool:
        return (await client.count_workflows(query)).count == count

    await wait_until(listed, f"visibility lists {count} runs for {query}")


async def wait_for_count(payments: Any, n: int, timeout: float = 20) -> None:
    """Wait until the downstream `payments` (anything with `count()`) holds `n` rows."""
    deadline = asyncio.get_running_loop().time() + timeout
    while payments.count() != n:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"expected {n} payments, have {payments.count()}")
        await asyncio.sleep(0.05)
