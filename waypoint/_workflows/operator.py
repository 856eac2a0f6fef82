"""What an operator can do to a run's state: correct a recorded result, leave a note, fork.

Pure functions over `AgentState`, called from signal and query handlers; deterministic.
"""

from __future__ import annotations

from temporalio import workflow

from waypoint._workflows import budget, containers, decisions, policy, simple
from waypoint._workflows.gates import Gates

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        AgentSpec,
        AgentState,
        Correction,
        Limits,
        Message,
        StepRecord,
        TextBlock,
        ToolResultBlock,
        ToolUseBlock,
    )
    from waypoint.protocol import verbs as v
    from waypoint.protocol.hashing import canonical_json, sha256_hex
    from waypoint.protocol.output import FINAL_TOOL
    from waypoint.protocol.reads import Observation
    from waypoint.protocol.states import FINAL_STATES
    from waypoint.protocol.verbs import Hold, Receipt


def rehash(s: AgentState) -> None:
    """Recompute the transcript chain after an edit; the worker's stored prefix no longer holds."""
    s.transcript_hash = ""
    for message in s.messages:
        s.transcript_hash = sha256_hex(s.transcript_hash + canonical_json(message))
    s.stored_hash, s.stored_len = "", 0


def turn_of(step_id: str) -> int:
    """`t3.tool.1.pay` -> 3."""
    return int(step_id.split(".", 1)[0][1:])


FINISHED = ("completed", "error", "rejected", "aborted")
"""Step statuses whose result is recorded in the transcript, and so can be corrected."""

_WAITING = {
    "scheduled": "it is still running; correct it once it has finished",
    "awaiting_approval": "it is awaiting approval; approve or reject it first",
    "awaiting_answer": "it is waiting for a client's answer; answer it first (`waypoint answer`)",
    "needs_reconciliation": (
        "its effect is unconfirmed; say what happened with `waypoint resolve` first"
    ),
}


def _tool_use_id(s: AgentState, step_id: str) -> str | None:
    """The tool_use id of a tool step, found by its number and name in the reply of its turn.

    With an output type, the calls beside `final_answer` are numbered without it
    (`OutputSteps.review` takes it out before they run); a cut-off reply numbers them all.
    """
    parts = step_id.split(".")
    if len(parts) < 4 or parts[1] != "tool" or not parts[2].isdigit():
        return None
    name, position = ".".join(parts[3:]), int(parts[2]) - 1
    reply = _reply(s, turn_of(step_id))
    if reply is None:
        return None
    calls = [b for i in reply for b in s.messages[i].content if isinstance(b, ToolUseBlock)]
    numberings = [calls]
    if name != FINAL_TOOL and s.spec is not None and s.spec.output_schema is not None:
        numberings.insert(0, [c for c in calls if c.name != FINAL_TOOL])
    for numbered in numberings:
        if position < len(numbered) and numbered[position].name == name:
            return numbered[position].id
    return None


def _reply(s: AgentState, turn: int) -> list[int] | None:
    """Where turn `turn`'s model reply sits in the (possibly compacted) transcript.

    Usually one assistant message; a continued answer (`pause_turn`, text cut off at
    `max_tokens`) adds more in a row, so turns are found by scanning, never by arithmetic.
    """
    replies = replies_in(s.messages)
    position = turn - s.compacted_turns - 1
    if turn <= s.compacted_turns or position >= len(replies):
        return None
    return replies[position]


def replies_in(messages: list[Message]) -> list[list[int]]:
    """The model's replies in `messages`, one per turn: runs of assistant messages, by index."""
    replies: list[list[int]] = []
    for i, message in enumerate(messages):
        if message.role != "assistant":
            continue
        if i == 0 or messages[i - 1].role != "assistant":
            replies.append([])
        replies[-1].append(i)
    return replies


def _results_at(s: AgentState, step_id: str) -> tuple[int, str] | str:
    """Where a finished tool step's result sits (message index, tool_use id), or why not."""
    turn = turn_of(step_id)
    if turn <= s.compacted_turns:
        return (
            f"turn {turn} was compacted into a summary, so {step_id} has no result left to "
            "replace; send a note instead"
        )
    use_id = _tool_use_id(s, step_id)
    reply = _reply(s, turn)
    if use_id is None or reply is None:
        return f"{step_id} is not a tool call of the model in the current transcript"
    index = reply[-1] + 1
    results = s.messages[index] if index < len(s.messages) else None
    if results is None or not any(
        isinstance(b, ToolResultBlock) and b.tool_use_id == use_id for b in results.content
    ):
        return (
            f"turn {turn} is still running (other calls of its reply have not finished), so "
            f"its results are not recorded yet; correct {step_id} once they are"
        )
    return index, use_id


def correction_refusal(s: AgentState, c: Correction, folding: int = 0) -> str:
    """Why this correction cannot apply, or '' when it can; never raises.

    `folding`: while a compaction runs, the messages before this index are being summarised,
    so a result replaced there would be lost.
    """
    if c.step_id is None:
        return "" if c.note else "a correction needs a step_id with a result, or a note"
    if c.result is None:
        return "a correction of a step needs the result to record"
    record = next(
        (r for r in reversed(s.ledger) if r.step_id == c.step_id and r.kind == "tool"), None
    )
    if record is None:
        return f"no tool step {c.step_id} in this run (see `waypoint ledger`)"
    if record.status not in FINISHED:
        why = _WAITING.get(record.status, f"it is {record.status}")
        return f"{c.step_id} cannot be corrected yet: {why}"
    found = _results_at(s, c.step_id)
    if isinstance(found, str):
        return found
    if found[0] < folding:
        return (
            f"turn {turn_of(c.step_id)} is being compacted into a summary right now, and a "
            "result replaced there would be lost; send a note instead"
        )
    return ""


def correct(s: AgentState, c: Correction, folding: int = 0) -> str:
    """Apply a correction; returns why it cannot be applied, or '' when it was."""
    why = correction_refusal(s, c, folding)
    if why:
        return why
    record_id = f"t{s.turn}.operator.{sum(r.kind == 'operator' for r in s.ledger) + 1}"
    summary = []
    if c.step_id is not None and c.result is not None:
        found = _results_at(s, c.step_id)
        assert not isinstance(found, str)
        index, use_id = found
        s.messages[index] = Message(
            role="user",
            content=[
                ToolResultBlock(tool_use_id=use_id, content=c.result, is_error=False)
                if isinstance(b, ToolResultBlock) and b.tool_use_id == use_id
                else b
                for b in s.messages[index].content
            ],
        )
        rehash(s)
        summary.append(f"replaced result of {c.step_id}")
        # The transcript now holds an operator's words, not a read: nothing to read again.
        kept = [o for o in s.observations if o.tool_use_id != use_id]
        if len(kept) != len(s.observations):
            s.observations = kept
            summary.append("its fresh_for read is no longer read again")
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


def correct_once(s: AgentState, gates: Gates, c: Correction, folding: int = 0) -> tuple[str, str]:
    """Apply a correction once (by its decision id), stamped with who sent it.

    Returns why it cannot apply ('' when it did, or was a repeat) and its operator step.
    """
    if gates.repeated(v.CORRECT, c.step_id or "", c):
        return "", s.decision_ids[c.decision_id]
    why = correct(s, c, folding)
    if why:
        return why, ""
    step_id = s.ledger[-1].step_id
    decisions.stamp(s, step_id, decisions.who(c.reviewer, c.identity))
    gates.applied(c.decision_id, step_id)
    return "", step_id


def simple_refusal(s: AgentState, name: str, sent: Hold) -> str:
    """Why a simple verb (pause, unpause) cannot apply, or '' when it can (a repeat is a no-op)."""
    if decisions.seen(s, sent.decision_id):
        return ""
    if s.state in FINAL_STATES:
        return f"the run has ended ({s.state}): nothing to {name}"
    return simple.SIMPLE[name].refusal(s)


async def simple_verb(s: AgentState, gates: Gates, name: str, sent: Hold) -> Receipt:
    """Apply a simple verb once (by its decision id): an operator line says who, when and why."""
    done = v.VERBS[name].done
    why = await gates.admit(name, "", sent, lambda: simple_refusal(s, name, sent))
    if why is not None:
        return decisions.receipt(s, s.decision_ids.get(sent.decision_id, ""), done, why)
    step_id = f"t{s.turn}.operator.{sum(r.kind == 'operator' for r in s.ledger) + 1}"
    said = f"{done} by {sent.reviewer}: {sent.reason or 'no reason given'}"
    digest = sha256_hex(sent.model_dump(mode="json", exclude={"signature"}))
    s.ledger.append(
        StepRecord(step_id=step_id, kind="operator", tool=name, input_hash=digest,
                   status="completed", summary=said[:160])
    )  # fmt: skip
    signed = sent.signature is not None and gates.signed_only()
    decisions.stamp(s, step_id, decisions.who(sent.reviewer, sent.identity, signed))
    gates.applied(sent.decision_id, step_id)
    simple.SIMPLE[name].apply(s, said)
    gates.settle()
    return decisions.receipt(s, step_id, done)


def raise_limits(s: AgentState, gates: Gates, limits: Limits) -> bool:
    """Put `limits` in force (recorded once the spec is loaded); False, recorded, if unpriced."""
    why = budget.unpriced(s.spec, limits)
    if why:
        gates.ignore(v.RAISE_LIMITS, "", why)
        return False
    before, s.limits = s.limits, limits
    if s.spec is not None:
        limits_set(s, before)
    return True


def limits_set(s: AgentState, before: Limits | None, said: str = "limits set") -> None:
    """Record the limits put in force (`resume` with limits, a start's) as an operator line.

    A replan never changes them: only this verb does, and the ledger says what it changed.
    """
    assert s.limits is not None
    s.limit_changes += 1
    now = s.limits.model_dump()
    was = before.model_dump() if before is not None else {}
    changed = [f"{k} {was.get(k)} -> {v}" for k, v in now.items() if was.get(k) != v]
    s.ledger.append(
        StepRecord(
            step_id=f"t{s.turn}.limits.{s.limit_changes}",
            kind="operator",
            input_hash=sha256_hex(now),
            status="completed",
            summary=f"{said}: {', '.join(changed) or 'as they were'}"[:160],
        )
    )


def _limits_line(r: StepRecord) -> bool:
    """Whether this ledger line put limits in force (`t3.limits.1`)."""
    parts = r.step_id.split(".")
    return r.kind == "operator" and len(parts) == 3 and parts[1] == "limits"


def deliver_notes(s: AgentState) -> None:
    """Put waiting notes into the last user message, just before a model step reads it.

    An expired code-execution container leaves one too (`containers.expire`).
    """
    containers.expire(s)
    if not s.notes:
        return
    last = s.messages[-1]
    notes = [TextBlock(text=n) for n in s.notes]
    s.messages[-1] = Message(role="user", content=[*last.content, *notes])
    s.notes = []
    rehash(s)


def fork_state(s: AgentState, after_turn: int) -> AgentState:
    """The state a new run starts from: everything up to the end of `after_turn`, reused as is.

    Its policy is the one the kept ledger put in force, no approval remembered
    (`policy.at_fork`).
    """
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
    ledger = [r.model_copy() for r in s.ledger if _made_by(r) <= after_turn]
    if any(r.status not in (*FINISHED, "cancelled") for r in ledger):
        raise ValueError(f"turn {after_turn} has unfinished steps; fork after an earlier turn")
    archived = s.archived  # steps of turns before the fork point: they count as before
    fork = AgentState(
        input=s.input,
        spec=_plan_at(s, after_turn),
        limits=s.limits,
        messages=(messages := [m.model_copy(deep=True) for m in s.messages[:end]]),
        turn=after_turn,
        ledger=ledger,
        total_tokens=archived.tokens + sum(r.tokens for r in ledger),
        cost_usd=archived.cost_usd + sum(r.cost_usd or 0.0 for r in ledger),
        cost_known=archived.cost_known
        and all(r.cost_usd is not None for r in ledger if r.kind == "model"),
        compacted_turns=s.compacted_turns,
        archived=archived.model_copy(),
        policy=policy.at_fork(s, ledger),
        limit_changes=sum(_limits_line(r) for r in ledger),  # its next line's number is new
        replaced_plans=[p for p in s.replaced_plans if p.turn <= after_turn],
        notes=containers.left_behind(s),  # a fork's code runs in a container of its own
        observations=_reads_at(s, messages, after_turn),
        earlier_reads=[o for o in s.earlier_reads if o.superseded <= after_turn],
    )
    rehash(fork)
    return fork


LONG_AGO = "1970-01-01T00:00:00+00:00"


def _plan_at(s: AgentState, after_turn: int) -> AgentSpec | None:
    """The spec a fork after `after_turn` starts on: the tools the run had then.

    Not a later replan's: its ledger line is not the fork's either.
    """
    later = [p for p in s.replaced_plans if p.turn > after_turn]
    if s.spec is None or not later:
        return s.spec
    first = later[0]
    return s.spec.model_copy(update={"tools": first.tools, "plan_version": first.plan_version})


def _made_by(r: StepRecord) -> int:
    """The turn a ledger line was made in: its id's, or a refresh's own (made later)."""
    return max(turn_of(r.step_id), r.made_in or 0)


def _reads_at(s: AgentState, messages: list[Message], after_turn: int) -> list[Observation]:
    """A fork's `fresh_for` reads: the copies in play after `after_turn`, never a later one.

    Those its transcript keeps (or its compacted turns' summary), stale, so an effect reads
    again and compares with what the run held at the fork point.
    """
    calls = {b.id for m in messages for b in m.content if isinstance(b, ToolUseBlock)}
    return sorted(
        (
            o.model_copy(update={"read_at": LONG_AGO, "superseded": 0})
            for o in [*s.observations, *s.earlier_reads]
            if o.turn <= after_turn < (o.superseded or after_turn + 1)
            and (o.tool_use_id in calls or turn_of(o.step_id) <= s.compacted_turns)
        ),
        key=lambda o: (o.step_id, o.tool_use_id),
    )
