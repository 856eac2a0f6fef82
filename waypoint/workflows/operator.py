"""What an operator can do to a run's state: correct a recorded result, leave a note, fork.

Pure functions over `AgentState`, called from signal and query handlers; deterministic.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waypoint.hashing import canonical_json, sha256_hex
    from waypoint.models import (
        AgentState,
        Correction,
        Message,
        StepRecord,
        TextBlock,
        ToolResultBlock,
    )


def rehash(s: AgentState) -> None:
    """Recompute the transcript chain after an edit; the worker's stored prefix no longer holds."""
    s.transcript_hash = ""
    for message in s.messages:
        s.transcript_hash = sha256_hex(s.transcript_hash + canonical_json(message))
    s.stored_hash, s.stored_len = "", 0


def turn_of(step_id: str) -> int:
    """`t3.tool.1.pay` -> 3."""
    return int(step_id.split(".", 1)[0][1:])


def _tool_use_id(s: AgentState, step_id: str) -> str | None:
    """The tool_use id of a tool step, found in the model's reply of its turn."""
    parts = step_id.split(".")
    if len(parts) < 4 or parts[1] != "tool":
        return None
    reply = _reply(s, turn_of(step_id))
    if reply is None:
        return None
    calls = [b for i in reply for b in s.messages[i].content if b.type == "tool_use"]
    position = int(parts[2]) - 1
    return calls[position].id if 0 <= position < len(calls) else None  # type: ignore[union-attr]


def _reply(s: AgentState, turn: int) -> list[int] | None:
    """Where turn `turn`'s model reply sits in the (possibly compacted) transcript.

    Usually one assistant message; a continued answer (`pause_turn`, text cut off at
    `max_tokens`) adds more in a row, so turns are found by scanning, never by arithmetic.
    """
    replies: list[list[int]] = []
    for i, message in enumerate(s.messages):
        if message.role != "assistant":
            continue
        if i == 0 or s.messages[i - 1].role != "assistant":
            replies.append([])
        replies[-1].append(i)
    position = turn - s.compacted_turns - 1
    if turn <= s.compacted_turns or position >= len(replies):
        return None
    return replies[position]


def correct(s: AgentState, c: Correction) -> str:
    """Apply a correction; returns why it cannot be applied, or '' when it was."""
    if c.step_id is None and not c.note:
        return "a correction needs a step_id with a result, or a note"
    record_id = f"t{s.turn}.operator.{sum(r.kind == 'operator' for r in s.ledger) + 1}"
    summary = []
    if c.step_id is not None:
        if c.result is None:
            return "a correction of a step needs the result to record"
        done = {r.step_id for r in s.ledger if r.kind == "tool" and r.status != "scheduled"}
        use_id = _tool_use_id(s, c.step_id) if c.step_id in done else None
        if use_id is None:
            return f"no finished tool step {c.step_id} in the current transcript"
        reply = _reply(s, turn_of(c.step_id))
        assert reply is not None
        index = reply[-1] + 1
        results = s.messages[index]
        s.messages[index] = Message(
            role="user",
            content=[
                ToolResultBlock(tool_use_id=use_id, content=c.result, is_error=False)
                if b.type == "tool_result" and b.tool_use_id == use_id
                else b
                for b in results.content
            ],
        )
        rehash(s)
        summary.append(f"replaced result of {c.step_id}")
    if c.note:
        s.notes.append(f"Note from {c.reviewer}: {c.note}")
        summary.append(f"note: {c.note[:80]}")
    why = f" ({c.reason})" if c.reason else ""
    s.ledger.append(
        StepRecord(
            step_id=record_id,
            kind="operator",
            input_hash=sha256_hex(c),
            status="completed",
            summary=f"{c.reviewer}{why}: " + "; ".join(summary),
        )
    )
    return ""


def deliver_notes(s: AgentState) -> None:
    """Put waiting notes into the last user message, just before a model step reads it."""
    if not s.notes:
        return
    last = s.messages[-1]
    notes = [TextBlock(text=n) for n in s.notes]
    s.messages[-1] = Message(role="user", content=[*last.content, *notes])
    s.notes = []
    rehash(s)


def fork_state(s: AgentState, after_turn: int) -> AgentState:
    """The state a new run starts from: everything up to the end of `after_turn`, reused as is."""
    if after_turn < 1 or after_turn >= s.turn:
        raise ValueError(f"fork after a finished turn: 1..{s.turn - 1}")
    if after_turn <= s.compacted_turns:
        raise ValueError(
            f"turns 1-{s.compacted_turns} were compacted into a summary; fork after a later turn"
        )
    reply = _reply(s, after_turn)
    if reply is None:
        raise ValueError(f"turn {after_turn} has no reply in the transcript")
    end = reply[-1] + 2  # the reply, then the user message with its tool results
    ledger = [r.model_copy() for r in s.ledger if turn_of(r.step_id) <= after_turn]
    if any(r.status not in ("completed", "error", "rejected", "aborted") for r in ledger):
        raise ValueError(f"turn {after_turn} has unfinished steps; fork after an earlier turn")
    archived = s.archived  # steps of turns before the fork point: they count as before
    fork = AgentState(
        input=s.input,
        spec=s.spec,
        limits=s.limits,
        messages=[m.model_copy(deep=True) for m in s.messages[:end]],
        turn=after_turn,
        ledger=ledger,
        total_tokens=archived.tokens + sum(r.tokens for r in ledger),
        cost_usd=archived.cost_usd + sum(r.cost_usd or 0.0 for r in ledger),
        cost_known=archived.cost_known
        and all(r.cost_usd is not None for r in ledger if r.kind == "model"),
        compacted_turns=s.compacted_turns,
        archived=archived.model_copy(),
    )
    rehash(fork)
    return fork
