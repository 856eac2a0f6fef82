"""A model call reserves its worst case before it is made, so a budget binds before it is crossed.

Deterministic code only: no tokenizer (that would be I/O), no price lookup. The worst case of a
call is its input estimate plus its `max_tokens`, priced at the rates snapshotted into the spec
at start (`AgentSpec.price`). The input estimate never undershoots:
- the previous call's billed prompt and reply (`last_context_tokens`, exact) plus the UTF-8
  bytes of the messages added since, when the transcript has only grown since that call;
- otherwise (the first call, after a compaction or an operator's edit, a summary call) the
  bytes of the system prompt, tool schemas and messages, plus the API's tool preamble;
- and, for a turn's call, the bytes of the steers waiting for it (`steers_estimate`): they are
  put in the transcript only once the reservation holds, so a steer never rides past it.
A token is never shorter than a byte, so bytes overestimate (about four times for English); the
exact count of the call before keeps the overestimate to what is new.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        AgentSpec,
        AgentState,
        CallPrice,
        Limits,
        Message,
        TextBlock,
        ToolSpec,
    )
    from waypoint.protocol.billing import BILLED_USES, ServerUse
    from waypoint.protocol.hashing import canonical_json

TOOLS_PREAMBLE_TOKENS = 1000
"""What the API adds to a prompt that offers tools (its tool-use system prompt, ~350 tokens)."""


def _bytes(value: object) -> int:
    return len(canonical_json(value).encode())


def prompt_estimate(system: str, tools: list[ToolSpec], messages: list[Message]) -> int:
    """An upper bound of the prompt tokens of a call, from the bytes it sends."""
    preamble = TOOLS_PREAMBLE_TOKENS if tools else 0
    schemas = sum(_bytes([t.name, t.description, t.input_schema]) for t in tools)
    return len(system.encode()) + schemas + preamble + sum(_bytes(m) for m in messages)


def turn_estimate(s: AgentState, spec: AgentSpec) -> int:
    """An upper bound of the prompt tokens of a call over the run's transcript and its steers."""
    waiting = steers_estimate(s)
    if s.last_context_tokens and 0 < s.stored_len <= len(s.messages):
        return s.last_context_tokens + sum(_bytes(m) for m in s.messages[s.stored_len :]) + waiting
    return prompt_estimate(spec.system, spec.tools, s.messages) + waiting


def steers_estimate(s: AgentState) -> int:
    """An upper bound of the tokens the waiting steers add to the next call (0 with none).

    They go in as text blocks, in a user message of their own after a continued answer.
    """
    if not s.steers:
        return 0
    said = [TextBlock(text=p.text) for p in s.steers]
    return _bytes(Message(role="user", content=[*said]))


def worst_cost(
    price: CallPrice, input_tokens: int, max_tokens: int, uses: dict[str, int | None] | None = None
) -> float:
    """USD of a call at its dearest: `input_tokens` read, `max_tokens` written, `uses` made.

    `uses`: of each server tool billed per use, by its name (`max_uses`).
    """
    tier = price.tiers[0]
    for t in price.tiers:
        if input_tokens >= t.from_tokens:
            tier = t
    tokens = (input_tokens * tier.input + max_tokens * tier.output) / 1_000_000
    made = uses or {}
    return tokens + sum((made.get(u.tool) or 0) * getattr(price, u.per_use) for u in BILLED_USES)


def max_uses(spec: AgentSpec) -> dict[str, int | None]:
    """The most uses one call may make of each server tool billed per use; None when uncapped."""
    caps = {u.tool: [t.options.get("max_uses") for t in spec.server_tools if t.name == u.tool]
            for u in BILLED_USES}  # fmt: skip
    return {tool: None if None in c else sum(int(n or 0) for n in c) for tool, c in caps.items()}


def uncapped(spec: AgentSpec) -> ServerUse | None:
    """A server tool billed per use that has no `max_uses`: no budget can bound a call's cost."""
    return next((u for u in BILLED_USES if max_uses(spec)[u.tool] is None), None)


def refusal(
    s: AgentState,
    spec: AgentSpec,
    step_id: str,
    input_tokens: int,
    max_tokens: int,
    steers: bool = False,
) -> str:
    """Why the call does not fit the run's budgets, or '' when its worst case does.

    `steers`: the call is a turn's, which sends the waiting steers (counted in `input_tokens`).
    """
    limits = s.limits or Limits()
    raise_it = "raise it (`waypoint resume RUN --max-{}`) to make the call"
    need = input_tokens + max_tokens
    cap = limits.max_total_tokens
    steered = _steered(s, steers)
    if cap is not None and s.total_tokens + need > cap:
        return (
            f"max_total_tokens={cap} would be crossed: {step_id} may use {need} tokens "
            f"(~{input_tokens} in{steered}, up to {max_tokens} out) with "
            f"{max(0, cap - s.total_tokens)} left; " + raise_it.format("total-tokens N")
        )
    budget = limits.max_cost_usd
    if budget is not None and spec.price is not None:
        cost = worst_cost(spec.price, input_tokens, max_tokens, max_uses(spec))
        if s.cost_usd + cost > budget:
            return (
                f"max_cost_usd={budget} would be crossed: {step_id} may cost ${cost:.4f} "
                f"(~{input_tokens} tokens in{steered}, up to {max_tokens} out) with "
                f"${max(0.0, budget - s.cost_usd):.4f} left; " + raise_it.format("cost-usd X")
            )
    return ""


def _steered(s: AgentState, steers: bool) -> str:
    """The share of a turn's input that waiting steers make, for a refusal to name."""
    if not steers or not s.steers:
        return ""
    n = len(s.steers)
    return f", ~{steers_estimate(s)} of it from {n} steer{'s' if n > 1 else ''} waiting"


def unpriced(spec: AgentSpec | None, limits: Limits | None) -> str:
    """Why a cost budget cannot be enforced on the run's model, or ''."""
    if limits and limits.max_cost_usd is not None and spec and not spec.price_known:
        return f"no price is known for {spec.model!r}: a cost budget cannot be enforced"
    if limits and limits.max_cost_usd is not None and spec and (u := uncapped(spec)):
        return f"{u.tool} has no max_uses: a cost budget cannot bound a call's {u.units}"
    return ""


def refuse_unpriced(s: AgentState) -> None:
    """A cost budget on a model without a known price would never stop the run: refuse it."""
    assert s.spec is not None
    if (s.limits or Limits()).max_cost_usd is not None and not s.spec.price_known:
        raise ApplicationError(
            f"max_cost_usd is set but no price is known for model {s.spec.model!r}, so the "
            "budget could never be enforced. Add the model to a price override file "
            "(WAYPOINT_PRICES) or start the run without max_cost_usd",
            type="PriceUnknown",
            non_retryable=True,
        )
    if (s.limits or Limits()).max_cost_usd is not None and (u := uncapped(s.spec)):
        raise ApplicationError(
            f"max_cost_usd is set but the agent's {u.tool} has no max_uses, so a call's "
            f"{u.units} (billed per use) could not be bounded: give it max_uses",
            type="PriceUnknown",
            non_retryable=True,
        )
