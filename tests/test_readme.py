"""Every code block of the README and the docs pages runs as written, or is checked as it can be.

The pages are README.md and every `docs/**/*.md`; a block is named by its page and line
(`docs/console.md:14`).

A block's mode is an HTML comment on the line before it, `<!-- readme-test: MODE -->`:

- none (bash, python): run as written against the session's dev server, from the repo root,
  with `.venv/bin` first on PATH and a fresh bank file;
- `run`: the same, said explicitly;
- `excerpt FILE`: the block is a verbatim part of FILE, which another block or test runs;
- `each-line-against-a-run`: `temporal` commands with `$RUN`, `$STEP` and `$HASH`; each line
  runs against a run put in the state its signal, update or query needs;
- `check (REASON)`: not run (REASON says why and what runs instead): bash syntax is checked, and
  every `waypoint`/`temporal` subcommand and flag it uses must appear in that command's --help.

`text` blocks are diagrams; `toml` and `yaml` blocks are parsed.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.workflow import _Definition
from typer.testing import CliRunner

from examples.payments.agent import agents as payment_agents
from examples.payments.agent import bank as example_bank
from examples.payments.bank import Bank
from tests.client_tool_app import asker
from tests.conftest import running_worker, wait_for_state
from waypoint._cli import app
from waypoint._workflows.agent import AgentWorkflow
from waypoint.client import runs
from waypoint.testing import final_answer, reply

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BIN = Path(sys.executable).parent
PARSED = {"toml", "yaml"}
BLOCK = re.compile(
    r"(?:<!-- readme-test: (?P<mode>[^\n]*?) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)```\n", re.S
)


@dataclasses.dataclass
class Block:
    page: str
    line: int
    lang: str
    mode: str
    body: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line} ({self.lang}, {self.mode})"


@functools.cache  # read once per process: parametrize and every test ask for the same list
def blocks() -> tuple[Block, ...]:
    found = []
    for path in PAGES:
        text = path.read_text()
        for m in BLOCK.finditer(text):
            line = text.count("\n", 0, m.start("lang")) + 1
            mode = m.group("mode") or ("parse" if m.group("lang") in PARSED else "run")
            page = path.relative_to(ROOT).as_posix()
            found.append(Block(page, line, m.group("lang"), mode, m.group("body")))
    return tuple(found)


def of_mode(prefix: str) -> list[Block]:
    return [
        b
        for b in blocks()
        if b.mode.startswith(prefix) and b.lang in {"bash", "python", "toml", "yaml"}
    ]


def test_every_block_has_a_language_and_a_known_mode() -> None:
    per_page = collections.Counter(b.page for b in blocks())
    assert per_page["README.md"] >= 4  # the quickstart, the short agent and its run
    assert sum(per_page.values()) >= 40  # the 34 the README held before the docs site, and more
    for b in blocks():
        assert b.lang in {"bash", "python", "toml", "yaml", "text"}, f"{b}: give it a language"
        if b.mode.startswith("check"):
            assert re.fullmatch(r"check \(.{10,}\)", b.mode), f"{b}: say why it is not run"
        else:
            assert b.mode in {"run", "parse", "each-line-against-a-run"} or b.mode.startswith(
                "excerpt "
            ), b


FENCE = re.compile(r"^```", re.M)
LINK = re.compile(r"\]\((?P<target>[^)\s#]*)(?:#(?P<anchor>[^)\s]*))?\)")


def anchors(page: Path) -> set[str]:
    """A page's heading anchors, as GitHub makes them (mkdocs makes the same for these)."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    headings = re.findall(r"^#+ (.+)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_fence_is_closed(page: Path) -> None:
    fences = FENCE.findall(page.read_text())
    name = page.relative_to(ROOT)
    assert len(fences) % 2 == 0, f"{name}: a ``` fence is left open, the rest reads as code"


def test_readme_is_the_front_door() -> None:
    """What, why, the two commands, a short agent, the guarantees, links; the rest is in docs/."""
    readme = ROOT / "README.md"
    assert len(readme.read_text().splitlines()) <= 300
    for m in LINK.finditer(readme.read_text()):
        target, anchor = m["target"], m["anchor"]
        if not target or "://" in target:
            continue
        assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"
        if anchor:
            assert anchor in anchors(ROOT / target), f"README.md: no #{anchor} in {target}"


@pytest.mark.parametrize("block", of_mode("parse"), ids=str)
def test_toml_and_yaml_blocks_parse(block: Block) -> None:
    from ruamel.yaml import YAML

    assert tomllib.loads(block.body) if block.lang == "toml" else YAML(typ="safe").load(block.body)


@pytest.mark.parametrize("block", of_mode("excerpt"), ids=str)
def test_excerpts_are_verbatim(block: Block) -> None:
    source = ROOT / block.mode.removeprefix("excerpt ")
    assert block.body in source.read_text(), f"{block} drifted from {source}"


def commands(body: str) -> list[str]:
    """The commands of a bash block: continuations joined, comments and blanks dropped."""
    joined = body.replace("\\\n", " ")
    lines = [re.sub(r"\s+#\s.*$", "", line).strip() for line in joined.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


@functools.cache  # the same subcommand's help, asked for by several blocks, runs once
def help_of(*command: str, flag: str = "--help") -> str:
    asked = [*command[1:], *([flag] if flag else [])]
    if Path(command[0]).name == "waypoint":
        # The app the script runs, in this process: a process of its own imports for a second.
        shown = CliRunner().invoke(app, asked, env={"COLUMNS": "200"})
        assert shown.exit_code == 0, shown.output
        return shown.output
    done = subprocess.run(
        [command[0], *asked],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


GROUPS = {"deploy"}
"""`waypoint` commands that are groups of subcommands (`waypoint deploy check`)."""


@pytest.mark.parametrize("block", of_mode("check"), ids=str)
def test_checked_blocks_use_real_subcommands_and_flags(block: Block) -> None:
    syntax = subprocess.run(["bash", "-n"], input=block.body, capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    for command in commands(block.body):
        words = shlex.split(command.rstrip("&").replace(";", " ; ").strip("() "))
        program = Path(words[0]).name
        if program == "waypoint":  # a command group's subcommand is checked, not the group
            sub = words[1:3] if words[1] in GROUPS and len(words) > 2 else [words[1]]
        elif program == "temporal":
            sub = list(words[1:4])
        else:
            continue
        shown = help_of(str(BIN / program), *sub)
        if program == "temporal":  # --address, --namespace ... are global options
            shown += help_of(str(BIN / "temporal"), "options", flag="")
        for flag in (w.split("=")[0] for w in words if w.startswith("--")):
            assert flag in shown, f"{block}: `{program} {' '.join(sub)}` has no {flag}"


def block_env(env: WorkflowEnvironment, tmp_path: Path, queue: str) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": "default",
        "WAYPOINT_TASK_QUEUE": queue,
        "WAYPOINT_BANK": str(tmp_path / "bank.sqlite3"),
        "HOME": str(tmp_path),
    }


@pytest.mark.parametrize("block", of_mode("run"), ids=str)
def test_runnable_blocks_run(
    block: Block, env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    program = ["bash", "-euo", "pipefail", "-c"] if block.lang == "bash" else [sys.executable, "-c"]
    done = subprocess.run(
        [*program, block.body],
        cwd=ROOT,
        env=block_env(env, tmp_path, task_queue),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, f"{block}\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    assert Bank(tmp_path / "bank.sqlite3").count_payments() >= 1


class Invoice(BaseModel):
    payee: str
    amount_cents: int


async def test_raw_temporal_forms_of_every_signal_update_and_query(
    client: Client,
    env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (block,) = of_mode("each-line-against-a-run")
    lines = commands(block.body)
    named = {re.search(r"--name (\w+)", c).group(1): c for c in lines}  # type: ignore[union-attr]
    definition = _Definition.from_class(AgentWorkflow)
    assert definition is not None
    handlers = {*definition.signals, *definition.queries, *definition.updates} - {None}
    assert handlers <= set(named), f"undocumented: {handlers - set(named)}"

    shell_env = block_env(env, tmp_path, task_queue)
    bank = Bank(tmp_path / "bank.sqlite3")
    monkeypatch.setattr(example_bank, "path", bank.path)  # the in-process worker's bank
    (payer,) = payment_agents()
    typed = dataclasses.replace(
        payer,
        name="typed",
        output_type=Invoice,
        max_output_retries=0,
        script=[
            reply(final_answer({"payee": "ACME"})),  # no amount: parks in output_invalid
            reply(final_answer(Invoice(payee="ACME", amount_cents=1))),
        ],
    )

    async def run_line(line: str, run: str, step: str = "", digest: str = "") -> str:
        done = await asyncio.to_thread(
            subprocess.run,
            ["bash", "-euo", "pipefail", "-c", line],
            cwd=ROOT,
            env={**shell_env, "RUN": run, "STEP": step, "HASH": digest},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    async def awaiting(n: int) -> tuple[str, str, str]:
        handle = await runs.start_run(
            client, "payer", "Pay ACME 250.00", task_queue=task_queue, workflow_id=f"raw-{n}"
        )
        status = await wait_for_state(client, handle.id, "awaiting_approval")
        pending = status.pending_approvals[0]
        return handle.id, pending.step_id, pending.arguments_hash or ""

    async def output(run: str) -> str:
        return str((await runs.handle(client, run).result()).output)

    async with running_worker(client, [payer, typed, asker(tmp_path / "notes.db")], task_queue):
        run, step, digest = await awaiting(0)
        for name in ("status", "ledger", "pending_approvals", "limits", "state", "fork_state"):
            shown = await run_line(named[name], run, step, digest)
            assert "Query result" in shown
        assert digest in await run_line(named["pending_approvals"], run)
        await run_line(named["raise_limits"], run)
        assert (await runs.status(client, run)).state == "awaiting_approval"
        await run_line(named["correct"], run)
        for kind in ("update", "signal"):  # approval policy (tests/test_policies.py)
            await run_line(next(c for c in lines if kind in c and "--name set_policy " in c), run)
        assert '"changes": 2' in (await run_line(named["policy"], run)).replace(":2", ": 2")
        for kind in ("update", "signal"):  # steering (tests/test_steer.py)
            await run_line(next(c for c in lines if kind in c and "--name steer " in c), run)
        ledger = await runs.ledger(client, run)
        said = [r.summary for r in ledger if r.tool == "steer"]
        assert said == [f"steer, after {step}: Pay bob, not ada."] * 2

        decisions = [("update", "approve"), ("signal", "approve")]
        decisions += [("update", "reject"), ("signal", "reject")]
        for i, (kind, name) in enumerate(decisions):
            line = next(c for c in lines if f"{kind}" in c and f"--name {name} " in c)
            run, step, digest = await awaiting(i + 1)
            await run_line(line, run, step, digest)
            said = await output(run)
            assert ("Paid ACME" in said) == (name == "approve"), said

        for i, kind in enumerate(["update", "signal"]):
            line = next(c for c in lines if kind in c and "--name resolve " in c)
            run, step, digest = await awaiting(10 + i)
            bank.set_down(True)
            await runs.approve(client, run, step, reviewer="t", timeout=10)
            await wait_for_state(client, run, "needs_reconciliation", timeout=60)
            bank.set_down(False)
            await run_line(line, run, step)
            assert "Paid ACME" in await output(run)

        for kind in ("update", "signal"):  # a client-answered tool (tests/test_client_tools.py)
            line = next(c for c in lines if kind in c and "--name answer " in c)
            asked = await runs.start_run(
                client, "asker", "pick", task_queue=task_queue, workflow_id=f"raw-answer-{kind}"
            )
            await wait_for_state(client, asked.id, "awaiting_answer")
            await run_line(line, asked.id, "t1.tool.1.ask_user")
            assert await output(asked.id) == 'User said: {"choice": "red"}'

        typed_run = await runs.start_run(
            client, "typed", "invoice", task_queue=task_queue, workflow_id="raw-typed"
        )
        await wait_for_state(client, typed_run.id, "output_invalid")
        await run_line(named["resume"], typed_run.id)
        result = await typed_run.result()
        assert result.output_as(Invoice) == Invoice(payee="ACME", amount_cents=1)
