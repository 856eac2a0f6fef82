"""A note keeper with Claude's memory tool, its `/memories` files in an object store.

With ANTHROPIC_API_KEY set the worker calls Claude, which sends the memory tool's commands;
offline the scripted model plays a keeper that views its memory first, starts
`/memories/notes.md` on its first run and reads and extends it on every later one.
"""

from __future__ import annotations

import os
from pathlib import Path

from examples.memory.store import MemoryCommand, MemoryStore
from waypoint import Agent, Limits, Tool, ToolContext, tool
from waypoint.errors import ToolReportedError
from waypoint.protocol import ModelRequest, ModelResponse, ToolResultBlock, text_of
from waypoint.stores.blobs import Backend, BlobStore, Folder
from waypoint.testing import Script, last_tool_results, reply, text, tool_use

NAME = "note_keeper"
NOTES = "/memories/notes.md"
SHOWN = "Here's the content of"


def memory_tool(store: MemoryStore) -> Tool:
    """Anthropic's memory tool over `store`; a plain `def`, so it runs in a worker thread."""

    @tool("effect", idempotent=True, anthropic_type="memory_20250818")
    def memory(args: MemoryCommand, ctx: ToolContext) -> str:
        """Claude's memory: files under /memories that outlive the run."""
        outcome = store.run(args, ctx.effect_key)
        if outcome.error:
            raise ToolReportedError(outcome.text)  # the model reads it; the run goes on
        return outcome.text

    return memory


def store_from_env() -> MemoryStore:
    """The index in `$WAYPOINT_MEMORY_DIR` (else `.waypoint/memory`), the files beside it.

    `$WAYPOINT_MEMORY_STORE=s3://bucket/prefix` puts the files in that bucket instead (AWS
    settings as for `WAYPOINT_STORE`; needs `waypoint-agents[s3]`).
    """
    folder = Path(os.environ.get("WAYPOINT_MEMORY_DIR") or ".waypoint/memory").absolute()
    backend: Backend = Folder(folder / "blobs")
    if url := os.environ.get("WAYPOINT_MEMORY_STORE"):
        from waypoint.stores.s3 import Bucket, parse_store_url

        backend = Bucket(*parse_store_url(url))
    return MemoryStore(BlobStore(backend), folder / "index.sqlite3")


def _task(request: ModelRequest) -> str:
    return text_of(request.messages[0].content).strip()


def _last(request: ModelRequest) -> str:
    return "\n".join(text_of(r.content) for r in last_tool_results(request))


def _lines(shown: str) -> list[str]:
    """A viewed file's lines, without the numbers and the empty line after the last newline."""
    lines = [row.split("\t", 1)[1] for row in shown.splitlines()[1:]]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _after_listing(request: ModelRequest) -> ModelResponse:
    if NOTES in _last(request):
        return reply(
            text("I have notes from earlier runs."), tool_use("memory", command="view", path=NOTES)
        )
    note = f"# Notes\n- {_task(request)}\n"
    return reply(tool_use("memory", command="create", path=NOTES, file_text=note))


def _after_reading(request: ModelRequest) -> ModelResponse:
    shown = _last(request)
    if not shown.startswith(SHOWN):
        return reply(text(f"Noted in {NOTES} for the next run."))
    line = len(_lines(shown))
    return reply(
        tool_use(
            "memory",
            command="insert",
            path=NOTES,
            insert_line=line,
            insert_text=f"- {_task(request)}",
        )
    )


def _answer(request: ModelRequest) -> ModelResponse:
    shown = next(
        text_of(b.content)
        for m in request.messages
        for b in m.content
        if isinstance(b, ToolResultBlock) and text_of(b.content).startswith(SHOWN)
    )
    earlier = [line[2:].rstrip(".") for line in _lines(shown) if line.startswith("- ")]
    return reply(text(f"From earlier runs I remember: {'; '.join(earlier)}. Noted this one too."))


SCRIPT = [
    reply(text("I check my memory first."), tool_use("memory", command="view", path="/memories")),
    _after_listing,
    _after_reading,
    _answer,
]

SYSTEM = """\
Your memory is the /memories directory, kept between runs. View it before anything else. Keep
what a later run should know in /memories/notes.md, one line a fact, and answer from it."""


def build_agent(
    store: MemoryStore | None = None,
    *,
    model: str = "claude-sonnet-4-6",
    script: Script = SCRIPT,
) -> Agent:
    """The note keeper over `store` (by default `store_from_env()`), `script` played offline."""
    return Agent(
        name=NAME,
        model=model,
        system=SYSTEM,
        tools=[memory_tool(store or store_from_env())],
        limits=Limits(max_turns=8, max_cost_usd=0.50),
        script=script,
    )
