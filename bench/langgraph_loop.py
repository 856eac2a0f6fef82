"""The same loop on LangGraph: a model node and a tool node, checkpointed to SQLite each step.

LangGraph is a bench-only extra (`pip install langgraph langgraph-checkpoint-sqlite`); without
it `available()` is False and the column is skipped.
"""

from __future__ import annotations

import importlib.util
import sqlite3
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict


def available() -> bool:
    """Whether LangGraph and its SQLite checkpointer are installed."""
    return all(
        importlib.util.find_spec(m) is not None
        for m in ("langgraph", "langgraph.checkpoint.sqlite")
    )


class LoopState(TypedDict):
    step: int
    payload: str


def _graph(sizes: Sequence[tuple[int, int]], conn: sqlite3.Connection) -> Any:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    def node(state: LoopState) -> dict[str, Any]:
        return {"step": state["step"] + 1, "payload": "y" * sizes[state["step"]][1]}

    def then(following: str) -> Any:
        return lambda state: END if state["step"] >= len(sizes) else following

    graph = StateGraph(LoopState)
    graph.add_node("model", node)
    graph.add_node("tool", node)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", then("tool"), ["tool", END])
    graph.add_conditional_edges("tool", then("model"), ["model", END])
    return graph.compile(checkpointer=SqliteSaver(conn))


def langgraph_run(path: Path, sizes: Sequence[tuple[int, int]]) -> float:
    """Seconds to run the steps with durability "sync" (each checkpoint written before going on)."""
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        app = _graph(sizes, conn)
        config = {
            "configurable": {"thread_id": uuid.uuid4().hex},
            "recursion_limit": len(sizes) + 10,
        }
        started = time.perf_counter()
        app.invoke({"step": 0, "payload": ""}, config, durability="sync")
        return time.perf_counter() - started
    finally:
        conn.close()
