"""The vendor-onboarding demo's tools, downstream and script, called directly (no Temporal)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from waypoint._agent import Agent
from waypoint._providers.scripted import ScriptedModel
from waypoint._tools import Tool, ToolContext, ToolRegistry, render_result, tool
from waypoint.demo import DEMO_TASK, SCRIPT, agents, build_agent, downstream
from waypoint.demo import script as demo_script
from waypoint.demo.documents import DOCUMENTS_DIR, SANCTIONS_FILE
from waypoint.demo.sanctions import normalize_name
from waypoint.errors import ToolDefinitionError
from waypoint.protocol import (
    Message,
    ModelRequest,
    ModelResponse,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

CREATE_STEP = "t4.tool.1.create_vendor"
EMAIL_STEP = "t5.tool.1.send_welcome_email"


def ctx_for(step_id: str, attempt: int = 1) -> ToolContext:
    return ToolContext(
        step_id=step_id,
        attempt=attempt,
        effect_key=f"wf/run/{step_id}",
        workflow_id="wf",
        run_id="run",
    )


def read_ctx(step_id: str = "t1.tool.1.read") -> ToolContext:
    return ToolContext(step_id=step_id, attempt=1, effect_key=None, workflow_id="wf", run_id="run")


@pytest.fixture
def agent(tmp_path: Path) -> Agent:
    return build_agent(tmp_path / "demo")


@pytest.fixture
def tools(agent: Agent) -> dict[str, Tool]:
    return {t.name: t for t in agent.tools}


async def call(t: Tool, ctx: ToolContext, **arguments: Any) -> Any:
    return await t(t.args_model.model_validate(arguments), ctx)


VENDOR = {
    "legal_name": "Northwind Components GmbH",
    "tax_id": "DE287451934",
    "iban": "DE66370400440412345678",
    "bic": "COBADEFFXXX",
}
EMAIL = {
    "to_addr": "ar@northwind-components.example",
    "subject": "Welcome",
    "body": "Hello",
}


# --- read tools -----------------------------------------------------------------------------


async def test_list_documents_names_the_shipped_supplier_documents(tools: dict[str, Tool]):
    names = await call(tools["list_documents"], read_ctx())
    assert names == ["bank_confirmation_letter.txt", "supplier_tax_form.txt"]


async def test_read_document_returns_the_shipped_file(tools: dict[str, Tool]):
    content = await call(tools["read_document"], read_ctx(), document="supplier_tax_form.txt")
    assert content == (DOCUMENTS_DIR / "supplier_tax_form.txt").read_text(encoding="utf-8")
    assert "DE287451934" in content


@pytest.mark.parametrize(
    "document", ["../sanctions.csv", "../../agent.py", "/etc/passwd", "documents/../x.txt"]
)
async def test_read_document_refuses_paths(tools: dict[str, Tool], document: str):
    with pytest.raises(ValueError, match="refused document name"):
        await call(tools["read_document"], read_ctx(), document=document)


async def test_read_document_unknown_name_lists_the_available_ones(tools: dict[str, Tool]):
    with pytest.raises(ValueError, match="no document named 'w9.txt'.*supplier_tax_form.txt"):
        await call(tools["read_document"], read_ctx(), document="w9.txt")


async def test_screen_sanctions_finds_a_listed_name_despite_case_accents_and_legal_form(
    tools: dict[str, Tool],
):
    result = await call(
        tools["screen_sanctions"],
        read_ctx(),
        company="PETROQUIMICA orinoquia austral",
        country="VE",
    )
    assert result["result"] == "match"
    assert result["matches"] == [
        {
            "name": "Petroquímica Orinoquia Austral C.A.",
            "country": "VE",
            "program": "VENEZUELA-EO13850",
            "same_country": True,
        }
    ]
    result = await call(tools["screen_sanctions"], read_ctx(), company="Golden Crane Shipping")
    assert result["result"] == "match"
    assert result["matches"][0]["program"] == "DPRK3"


async def test_screen_sanctions_clears_northwind(tools: dict[str, Tool]):
    result = await call(
        tools["screen_sanctions"], read_ctx(), company="Northwind Components GmbH", country="DE"
    )
    assert result["result"] == "no_match"
    assert result["matches"] == []
    assert result["entries_screened"] == 12


def test_normalize_name_drops_case_punctuation_accents_and_legal_forms():
    assert normalize_name("Sable Ridge Mining & Minerals SARL") == "sable ridge mining and minerals"
    assert normalize_name("Zenithar Dual-Use Technologies Ltd.") == "zenithar dual use technologies"
    assert normalize_name("Caribe Solano Import Export S.A.") == "caribe solano import export"
    assert normalize_name("Northwind Components GmbH") == "northwind components"


def test_sanctions_list_has_a_dozen_rows_and_no_northwind():
    rows = SANCTIONS_FILE.read_text(encoding="utf-8").splitlines()
    assert rows[0] == "name,country,program"
    assert len(rows) == 13
    assert not any("northwind" in r.lower() for r in rows)


# --- effect tools and the downstream --------------------------------------------------------


async def test_create_vendor_twice_with_one_effect_key_creates_one_row(
    tools: dict[str, Tool], tmp_path: Path
):
    demo = tmp_path / "demo"
    create = tools["create_vendor"]
    first = await call(create, ctx_for(CREATE_STEP), **VENDOR)
    second = await call(create, ctx_for(CREATE_STEP, attempt=2), **VENDOR)
    assert first == second
    assert first["effect_key"] == "wf/run/t4.tool.1.create_vendor"
    assert first["name"] == "Northwind Components GmbH"
    assert downstream.count_vendors(demo) == 1
    assert downstream.count_vendors(demo, "wf/run/t4.tool.1.create_vendor") == 1
    await call(create, ctx_for("t9.tool.1.create_vendor"), **VENDOR)
    assert downstream.count_vendors(demo) == 2


async def test_create_vendor_reconcile_is_none_before_and_the_row_after(tools: dict[str, Tool]):
    create = tools["create_vendor"]
    assert create.options.reconcile is not None
    args = create.args_model.model_validate(VENDOR)
    ctx = ctx_for(CREATE_STEP, attempt=2)
    assert await create.options.reconcile(args, ctx) is None
    created = await create(args, ctx_for(CREATE_STEP))
    assert await create.options.reconcile(args, ctx) == created


async def test_send_welcome_email_twice_queues_one_email(tools: dict[str, Tool], tmp_path: Path):
    demo = tmp_path / "demo"
    first = await call(tools["send_welcome_email"], ctx_for(EMAIL_STEP), **EMAIL)
    second = await call(tools["send_welcome_email"], ctx_for(EMAIL_STEP, attempt=2), **EMAIL)
    assert first == second
    assert downstream.count_emails(demo) == 1
    assert downstream.count_emails(demo, f"wf/run/{EMAIL_STEP}") == 1
    assert downstream.count_emails(demo, "wf/run/other") == 0


def test_effect_tools_are_declared_safe(tools: dict[str, Tool]):
    assert tools["create_vendor"].kind == "effect"
    assert tools["create_vendor"].options.requires_approval is True
    assert tools["create_vendor"].options.reconcile is not None
    assert tools["send_welcome_email"].kind == "effect"
    assert tools["send_welcome_email"].options.idempotent
    reads = ["list_documents", "read_document", "screen_sanctions"]
    assert [tools[n].kind for n in reads] == ["read", "read", "read"]
    ToolRegistry(tools.values())


class WireArgs(BaseModel):
    to: str


def test_an_effect_with_neither_idempotent_nor_reconcile_is_refused():
    @tool("effect")
    async def wire_money(args: WireArgs) -> str:
        return "sent"

    with pytest.raises(ToolDefinitionError, match="neither idempotent nor reconcilable"):
        ToolRegistry([wire_money])


@pytest.mark.parametrize(
    ("field", "value"),
    [("iban", "DE66370400440412345679"), ("iban", "not an iban"), ("bic", "COBA")],
)
def test_create_vendor_refuses_a_malformed_iban_or_bic(
    tools: dict[str, Tool], field: str, value: str
):
    with pytest.raises(ValidationError, match=field):
        tools["create_vendor"].args_model.model_validate({**VENDOR, field: value})


def test_create_vendor_normalises_a_grouped_iban(tools: dict[str, Tool]):
    args = tools["create_vendor"].args_model.model_validate(
        {**VENDOR, "iban": "de66 3704 0044 0412 3456 78"}
    )
    assert args.model_dump()["iban"] == VENDOR["iban"]


# --- the agent and its script ---------------------------------------------------------------


def test_agents_builds_the_demo_agent_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("WAYPOINT_DEMO_DIR", str(tmp_path / "env-demo"))
    monkeypatch.setenv("WAYPOINT_DEMO_MODEL", "claude-test-model")
    [agent] = agents()
    assert agent.name == "vendor_onboarding"
    assert agent.model == "claude-test-model"
    assert agent.script is SCRIPT
    assert not (tmp_path / "env-demo").exists()  # nothing is created until the first write


def first_text(response: ModelResponse) -> str:
    block = response.content[0]
    assert isinstance(block, TextBlock)
    return block.text


def request_for(turn: int, messages: list[Message]) -> ModelRequest:
    return ModelRequest(
        step_id=f"t{turn}.model",
        turn=turn,
        model="scripted",
        provider="scripted",
        agent="vendor_onboarding",
        system="",
        tools=[],
        messages=messages,
        max_tokens=1024,
    )


def after(tool_name: str, content: str, is_error: bool = False) -> list[Message]:
    """A transcript ending in one call to `tool_name` and its result."""
    call_block = ToolUseBlock(id="toolu_x", name=tool_name, input={})
    return [
        Message(role="user", content=[TextBlock(text=DEMO_TASK)]),
        Message(role="assistant", content=[call_block]),
        Message(
            role="user",
            content=[ToolResultBlock(tool_use_id="toolu_x", content=content, is_error=is_error)],
        ),
    ]


def scripted_calls() -> list[ToolUseBlock]:
    """Every tool call the script makes on the happy path."""
    clear = json.dumps({"result": "no_match", "matches": []})
    created = json.dumps({"effect_key": "k", "name": "Northwind Components GmbH"})
    replies: list[ModelResponse] = []
    for turn, entry in enumerate(SCRIPT, start=1):
        if isinstance(entry, ModelResponse):
            replies.append(entry)
        elif turn == 4:
            replies.append(entry(request_for(turn, after("screen_sanctions", clear))))
        elif turn == 5:
            replies.append(entry(request_for(turn, after("create_vendor", created))))
    return [b for r in replies for b in r.content if isinstance(b, ToolUseBlock)]


def test_script_arguments_validate_against_the_tools(tools: dict[str, Tool]):
    calls = scripted_calls()
    assert [c.name for c in calls] == [
        "list_documents",
        "read_document",
        "read_document",
        "screen_sanctions",
        "create_vendor",
        "send_welcome_email",
    ]
    for c in calls:
        tools[c.name].args_model.model_validate(c.input)


def test_script_arguments_are_what_the_documents_say():
    text = "\n".join(p.read_text(encoding="utf-8") for p in DOCUMENTS_DIR.iterdir())
    by_tool = {c.name: c.input for c in scripted_calls()}
    for value in [*by_tool["create_vendor"].values(), by_tool["send_welcome_email"]["to_addr"]]:
        assert value in text
    assert by_tool["screen_sanctions"] == {"company": "Northwind Components GmbH", "country": "DE"}


def test_script_reads_both_documents_in_one_reply():
    second = SCRIPT[1]
    assert isinstance(second, ModelResponse)
    reads = [b.input["document"] for b in second.content if isinstance(b, ToolUseBlock)]
    assert sorted(reads) == sorted(p.name for p in DOCUMENTS_DIR.iterdir())


def test_script_stops_when_create_vendor_is_rejected():
    rejection = (
        "The call to create_vendor was rejected by dana: unverified bank. It was not executed."
    )
    response = demo_script.email_after_create(
        request_for(5, after("create_vendor", rejection, is_error=True))
    )
    assert response.stop_reason == "end_turn"
    assert not any(isinstance(b, ToolUseBlock) for b in response.content)
    assert "stopped" in first_text(response)
    assert "unverified bank" in first_text(response)


def test_script_stops_on_a_sanctions_match():
    hit = json.dumps({"result": "match", "matches": [{"name": "Northwind Components GmbH"}]})
    response = demo_script.create_after_screening(request_for(4, after("screen_sanctions", hit)))
    assert response.stop_reason == "end_turn"
    assert not any(isinstance(b, ToolUseBlock) for b in response.content)


async def play(agent: Agent, approve: bool) -> tuple[ModelResponse, list[str]]:
    """Run the script against the real tools, as the workflow would but without Temporal."""
    model = ScriptedModel({agent.name: agent.script or []})
    messages = [Message(role="user", content=[TextBlock(text=DEMO_TASK)])]
    steps: list[str] = []
    for turn in range(1, 10):
        response = await model.complete(request_for(turn, messages))
        messages.append(Message(role="assistant", content=response.content))
        calls = [b for b in response.content if isinstance(b, ToolUseBlock)]
        if response.stop_reason != "tool_use":
            return response, steps
        results = []
        for i, c in enumerate(calls, start=1):
            step_id = f"t{turn}.tool.{i}.{c.name}"
            steps.append(step_id)
            t = agent.registry.get(c.name)
            assert t is not None
            if t.options.requires_approval and not approve:
                content = f"The call to {c.name} was rejected by dana. It was not executed."
                results.append(ToolResultBlock(tool_use_id=c.id, content=content, is_error=True))
                continue
            ctx = ctx_for(step_id) if t.kind == "effect" else read_ctx(step_id)
            out = await t(t.args_model.model_validate(c.input), ctx)
            results.append(ToolResultBlock(tool_use_id=c.id, content=render_result(out)))
        messages.append(Message(role="user", content=results))
    raise AssertionError("the script did not finish")


async def test_script_onboards_northwind_against_the_real_tools(agent: Agent, tmp_path: Path):
    final, steps = await play(agent, approve=True)
    assert steps[-2:] == [CREATE_STEP, EMAIL_STEP]
    assert final.stop_reason == "end_turn"
    assert "Northwind Components GmbH is onboarded" in first_text(final)
    assert "queued to ar@northwind-components.example" in first_text(final)
    demo = tmp_path / "demo"
    assert downstream.count_vendors(demo, f"wf/run/{CREATE_STEP}") == 1
    assert downstream.count_emails(demo, f"wf/run/{EMAIL_STEP}") == 1
    vendor = downstream.find_vendor(demo, f"wf/run/{CREATE_STEP}")
    assert vendor is not None
    assert (vendor["name"], vendor["tax_id"], vendor["iban"], vendor["bic"]) == tuple(
        VENDOR.values()
    )


async def test_script_creates_nothing_when_compliance_rejects(agent: Agent, tmp_path: Path):
    final, steps = await play(agent, approve=False)
    assert steps[-1] == CREATE_STEP
    assert "stopped" in first_text(final)
    assert downstream.count_vendors(tmp_path / "demo") == 0
    assert downstream.count_emails(tmp_path / "demo") == 0


# --- crash-test barriers --------------------------------------------------------------------

BARRIER_CHILD = """
import asyncio, sys
from pathlib import Path
from typing import Any
from waypoint.demo import build_agent
from waypoint._tools import ToolContext

demo, barriers = Path(sys.argv[1]), Path(sys.argv[2])
agent = build_agent(demo, barrier_dir=barriers)
create = agent.registry.get("create_vendor")
args = create.args_model.model_validate({
    "legal_name": "Northwind Components GmbH", "tax_id": "DE287451934",
    "iban": "DE66370400440412345678", "bic": "COBADEFFXXX",
})
ctx = ToolContext("t4.tool.1.create_vendor", 1, "wf/run/t4.tool.1.create_vendor", "wf", "run")
asyncio.run(create(args, ctx))
"""


@pytest.mark.parametrize(("point", "rows"), [("before_commit", 0), ("after_commit", 1)])
def test_barrier_parks_create_vendor_so_a_kill_lands_before_or_after_the_commit(
    tmp_path: Path, point: str, rows: int
):
    demo, barriers = tmp_path / "demo", tmp_path / "barriers"
    barriers.mkdir()
    (barriers / f"{point}.create_vendor").touch()
    child = subprocess.Popen(
        [sys.executable, "-c", BARRIER_CHILD, str(demo), str(barriers)],
        cwd=Path(__file__).parent.parent,
    )
    try:
        reached = barriers / f"reached.{point}.create_vendor"
        deadline = time.monotonic() + 30
        while not reached.exists():
            assert child.poll() is None, "the child exited before reaching the barrier"
            assert time.monotonic() < deadline, "the barrier was never reached"
            time.sleep(0.05)
        assert reached.read_text().strip() == str(child.pid)
        assert not (barriers / f"{point}.create_vendor").exists()  # one-shot
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert downstream.count_vendors(demo) == rows
