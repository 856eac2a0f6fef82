"""MCP servers as tools, against the real test server (`tests/mcp_server.py`) on both transports."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import MCPError
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.conftest import running_worker, wait_for_state
from tests.mcp_app import ROOT, SCRIPT, http_server, mcp_agent, stdio_server
from tests.mcp_server import Ledger
from waypoint._agent import Agent
from waypoint._operations.dev_server import free_port
from waypoint._security import redaction
from waypoint._tools import ToolContext
from waypoint.client import runs
from waypoint.errors import ToolDefinitionError
from waypoint.mcp import MCPServer, MCPToolClass
from waypoint.mcp.connection import Connection, value_of
from waypoint.protocol import AgentState, ResumeRequest, ToolResultBlock
from waypoint.protocol.policy import ApprovalPolicy, Condition, Rule
from waypoint.testing import KillPoint, reply, run_kill_test, text, tool_use

# One worker runs this module under `--dist loadgroup`: its HTTP MCP server starts once.
pytestmark = pytest.mark.xdist_group("test_mcp")


@pytest.fixture(scope="module")
def http_mcp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Ledger, Path]]:
    """The test server over streamable HTTP in its own process; yields url, ledger, barriers."""
    folder = tmp_path_factory.mktemp("mcp-http")
    barriers = folder / "barriers"
    barriers.mkdir()
    port = free_port()
    with (folder / "server.log").open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.mcp_server",
                "http",
                str(folder / "ledger.db"),
                str(port),
            ],
            env={**os.environ, "PYTHONPATH": str(ROOT), "MCP_TEST_BARRIERS": str(barriers)},
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp", Ledger(folder / "ledger.db"), barriers
    finally:
        process.kill()
        process.wait()


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 120) -> None:
    """Block until the server accepts connections (or exits)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"MCP server exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"MCP server not listening on {port}")


def test_unsafe_mcp_effect_is_refused_when_the_agent_is_defined() -> None:
    with pytest.raises(ToolDefinitionError, match="'wire' of server 'bank' cannot be made safe"):
        MCPServer.http("bank", "http://x/mcp", tools={"wire": "effect"})
    with pytest.raises(ToolDefinitionError, match="only an effect takes"):
        MCPServer.http("bank", "http://x/mcp", tools={"fee": MCPToolClass("read", "key")})


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_mcp_tools_run_through_the_funnel(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    transport: str,
    http_mcp: tuple[str, Ledger, Path],
) -> None:
    if transport == "stdio":
        ledger = Ledger(tmp_path / "ledger.db")
        agent = mcp_agent(stdio_server(tmp_path / "ledger.db"))
    else:
        url, ledger, _ = http_mcp
        agent = mcp_agent(http_server(url))
    try:
        async with running_worker(client, [agent], task_queue):
            handle = await runs.start_run(client, "mcp_payer", "pay ada", task_queue=task_queue)
            result = await handle.result()
            state = await handle.query("state", result_type=AgentState)
    finally:
        await agent.aclose()
    assert state.spec is not None
    tools = {t.name: t for t in state.spec.tools}
    assert list(tools) == ["fee", "balance", "pay", "transfer"]  # find_transfer is unclassified
    assert "key" not in tools["pay"].input_schema["properties"]  # Waypoint fills it in
    assert tools["fee"].kind == "pure" and tools["pay"].kind == "effect"
    steps = {r.step_id: r for r in result.ledger}
    assert steps["t0.spec"].summary.endswith("4 tools")
    assert steps["t1.tool.1.fee"].status == "completed"
    assert steps["t1.tool.2.balance"].status == "completed"
    paid = steps["t2.tool.1.pay"]
    assert paid.status == "completed" and paid.effect_key
    assert ledger.count(paid.effect_key) == 1
    assert steps["t3.tool.1.pay"].status == "error"
    results = [b for m in state.messages for b in m.content if isinstance(b, ToolResultBlock)]
    assert results[0].content == "5"  # fee(500)
    assert '"paid"' in str(results[1].content)
    refused = results[-1]
    assert refused.is_error and "amount must be positive" in str(refused.content)
    assert result.output == "Paid ada 5."


async def test_a_policy_rule_may_name_an_mcp_tool_and_decides_its_calls(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    ledger = Ledger(tmp_path / "ledger.db")
    big = Condition(field="amount", op="gt", value=100)
    policy = ApprovalPolicy(rules=[Rule(tool="pay", action="deny", when=[big])], default="allow")
    script = [
        reply(tool_use("pay", payee="ada", amount=500)),
        reply(tool_use("pay", payee="ada", amount=5)),
        reply(text("Paid ada 5.")),
    ]
    agent = mcp_agent(stdio_server(tmp_path / "ledger.db"), script, policy=policy)
    try:
        async with running_worker(client, [agent], task_queue):
            handle = await runs.start_run(client, "mcp_payer", "pay ada", task_queue=task_queue)
            result = await handle.result()
    finally:
        await agent.aclose()
    steps = {r.step_id: r for r in result.ledger}
    denied, paid = steps["t1.tool.1.pay"], steps["t2.tool.1.pay"]
    assert denied.status == "rejected" and denied.decided_by is not None
    assert denied.decided_by.startswith("policy: rule 1 (pay amount > 100")
    assert paid.status == "completed" and paid.decided_by == "policy: default allow"
    assert ledger.count() == 1 and ledger.count(paid.effect_key) == 1  # the denied 500 never ran


def test_a_policy_rule_naming_neither_a_python_nor_an_mcp_tool_is_refused() -> None:
    typo = ApprovalPolicy(rules=[Rule(tool="pya", action="deny")])
    with pytest.raises(ToolDefinitionError, match="it has: fee, balance, pay, transfer"):
        mcp_agent(http_server("http://x/mcp"), policy=typo)


async def test_reconcile_tool_says_whether_the_effect_happened(
    http_mcp: tuple[str, Ledger, Path],
) -> None:
    url, ledger, _ = http_mcp
    agent = mcp_agent(http_server(url))
    try:
        await agent.discover()
        transfer = agent.tool("transfer")
        assert transfer is not None and transfer.options.reconcile is not None
        args = transfer.args_model.model_validate({"payee": "bob", "amount": 7})
        ctx = ToolContext("t1.tool.1.transfer", 2, "wf/run/t1.tool.1.transfer", "wf", "run")
        assert await transfer.options.reconcile(args, ctx) is None
        done = await transfer(args, ctx)
        assert await transfer.options.reconcile(args, ctx) == json.loads(done)
        assert ledger.count(ctx.effect_key) == 1
        with pytest.raises(ValueError, match="filled in by Waypoint"):
            transfer.args_model.model_validate({"payee": "bob", "amount": 7, "reference": "x"})
    finally:
        await agent.aclose()


@pytest.mark.parametrize("on_change", ["refuse", "replan"])
async def test_changed_mcp_tool_schema_hits_on_change(
    client: Client, task_queue: str, tmp_path: Path, on_change: str
) -> None:
    flag = tmp_path / "schema-v2"
    ledger = Ledger(tmp_path / "ledger.db")
    script = [reply(tool_use("pay", payee="ada", amount=5)), reply(text("done"))]
    agent = mcp_agent(stdio_server(tmp_path / "ledger.db", flag, approval=True), script, on_change)  # type: ignore[arg-type]
    try:
        async with running_worker(client, [agent], task_queue) as model:
            handle = await runs.start_run(client, "mcp_payer", "pay", task_queue=task_queue)
            await wait_for_state(client, handle.id, "awaiting_approval", timeout=60)
            flag.touch()
            await agent.aclose()  # the server restarts with pay(..., currency)
            await runs.approve(client, handle.id, "t1.tool.1.pay", reviewer="me")
            if on_change == "refuse":
                status = await wait_for_state(client, handle.id, "tool_changed", timeout=60)
                assert "'pay' of server 'payments' changed" in status.detail
                await runs.handle(client, handle.id).signal(
                    "resume", ResumeRequest(reviewer="me", replan=True)
                )
                result = await handle.result()
                assert "t1.replan.2" in {r.step_id for r in result.ledger}
            else:
                result = await handle.result()
                steps = {r.step_id: r for r in result.ledger}
                assert steps["t1.tool.1.pay"].status == "error"
                assert "plan v2" in steps["t1.replan.2"].summary
                pay = next(t for t in model.requests[-1].tools if t.name == "pay")
                assert "currency" in pay.input_schema["properties"]
    finally:
        await agent.aclose()
    assert ledger.count() == 0


async def test_mcp_effect_runs_once_when_worker_killed_mid_effect(
    client: Client,
    env: WorkflowEnvironment,
    tmp_path: Path,
    task_queue: str,
    http_mcp: tuple[str, Ledger, Path],
) -> None:
    url, ledger, barriers = http_mcp
    point = KillPoint.at_file(
        "after commit in MCP pay",
        barriers / "reached.after_commit.pay",
        barriers / "after_commit.pay",
    )
    report = await run_kill_test(
        client,
        app="tests.mcp_app:agents",
        agent="mcp_payer",
        task="pay ada",
        task_queue=task_queue,
        workdir=tmp_path / "killtest",
        kill_points=[point],
        count_effects=ledger.count,
        env={
            "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
            "MCP_TEST_URL": url,
            "PYTHONPATH": str(ROOT),
        },
        timeout=120,
    )
    print(report.summary())
    assert report.ok, report.summary()
    # Every effect step is counted, whatever its ledger line: t3's pay of 0 was refused by the
    # server (an error result), so the downstream saw it never.
    assert report.effect_counts == {"t2.tool.1.pay": 1, "t3.tool.1.pay": 0}
    pay = next(r for r in report.result.ledger if r.step_id == "t2.tool.1.pay")
    assert pay.attempt >= 2  # killed once after the commit, then run again under the same key


def test_agent_without_mcp_is_unchanged() -> None:
    agent = Agent(name="a", model="claude-sonnet-4-6", system="s", script=SCRIPT)
    assert agent.tool("pay") is None


def test_readme_example_defines_an_agent_and_refuses_an_unsafe_effect() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "mcp_readme_example.py")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    assert "'run' of server 'shell' cannot be made safe" in done.stdout


async def test_a_stdio_server_that_died_mid_call_is_started_again_on_the_next_call(
    tmp_path: Path,
) -> None:
    """Its pending call fails with "Connection closed"; the worker must not keep that session."""
    connection = Connection(stdio_server(tmp_path / "ledger.db"))
    try:
        assert value_of(await connection.call_tool("fee", {"amount": 500})) == 5
        with pytest.raises(MCPError, match="Connection closed"):
            await connection.call_tool("crash", {})
        assert value_of(await connection.call_tool("fee", {"amount": 700})) == 7
        assert "pay" in [t.name for t in await connection.list_tools()]
    finally:
        await connection.close()


@pytest.mark.parametrize("encrypting", [False, True])
async def test_a_stdio_servers_stderr_is_logged_and_withheld_under_encryption(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    encrypting: bool,
) -> None:
    """Its stderr went straight to the worker's own, unredacted with encryption on (issue 34.3)."""
    monkeypatch.setattr(redaction, "_installed", encrypting)
    caplog.set_level(logging.INFO, logger="waypoint.child")
    secret = "payee IBAN DE89370400440532013000 refused"
    expected = (
        f"wrote {len(secret)} characters to stderr" if encrypting else f"'payments': {secret}"
    )
    connection = Connection(stdio_server(tmp_path / "ledger.db"))
    try:
        assert value_of(await connection.call_tool("complain", {"text": secret})) == "complained"
        deadline = time.monotonic() + 30
        while expected not in caplog.text:
            assert time.monotonic() < deadline, "the server's stderr line was never logged"
            await asyncio.sleep(0.05)
    finally:
        await connection.close()
    assert ("DE89" in caplog.text) is not encrypting
