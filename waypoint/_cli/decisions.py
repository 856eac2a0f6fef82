"""Commands a person decides with: approve, reject, resolve, resume, correct, steer.

Each calls its verb in `waypoint.client` and prints the receipt.

With a worker up, approve/reject/resolve/correct/steer are Updates: the run answers with a
receipt or refuses with its reason. With none, they are checked against the run's memo and sent
as signals, which take effect when a worker picks the run up.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Annotated

import typer

from waypoint._cli import render as out
from waypoint._cli.app import app
from waypoint._cli.common import (
    OPERATOR,
    AsJson,
    Run,
    Step,
    client,
    command,
    signing_key,
)
from waypoint.client import runs, views
from waypoint.errors import WaypointError
from waypoint.protocol import Correction, Receipt, Resolution


class Remember(StrEnum):
    """What `approve --remember` keeps allowed for the rest of the run."""

    tool = "tool"
    args = "args"


def print_sent(r: Receipt, verb: str, what: str = "") -> None:
    """The receipt, or a plain word that the decision waits for a worker."""
    if r.recorded:
        out.console.print(f"{verb} {r.step_id}{what}: recorded by {r.decided_by} at {r.decided_at}")
        if r.runs is False:  # approved, then refused: a read changed, or the policy now denies
            out.errors.print(f"[yellow]{r.detail}[/]")
        return
    out.console.print(f"{verb} {r.step_id or r.run}{what}")
    out.errors.print(
        "[yellow]no worker answered: sent as a signal; the decision takes effect when a worker "
        f"picks the run up (checked against the run as of {r.as_of or 'now'})[/]"
    )


async def _decide(
    verb: Callable[..., Awaitable[Receipt]], run: str, step: str, reviewer: str, reason: str,
    **given: str,
) -> Receipt:  # fmt: skip
    key = signing_key()
    c = await client()
    wait = views.QUICK
    return await verb(
        c, run, step, reviewer=reviewer, reason=reason, timeout=wait, signing_key=key, **given
    )


@app.command()
@command
async def approve(
    run: Run,
    step: Step,
    reviewer: Annotated[str, typer.Option(help="Who approves.")] = OPERATOR,
    reason: Annotated[str, typer.Option(help="Why.")] = "",
    remember: Annotated[
        Remember | None,
        typer.Option(help="Also allow later calls of the tool, or of these exact args, this run."),
    ] = None,
) -> None:
    """Approve a pending tool call (the exact arguments you were shown)."""
    sent = await _decide(
        runs.approve, run, step, reviewer, reason, remember=remember.value if remember else ""
    )
    args = f" ({sent.pending.tool} {json.dumps(sent.pending.arguments)})" if sent.pending else ""
    print_sent(sent, "approved", args)


@app.command()
@command
async def reject(
    run: Run,
    step: Step,
    reason: Annotated[str, typer.Option(help="Why; the model is told.")],
    reviewer: Annotated[str, typer.Option(help="Who rejects.")] = OPERATOR,
) -> None:
    """Reject a pending tool call; the model is told it was rejected and why."""
    sent = await _decide(runs.reject, run, step, reviewer, reason)
    print_sent(sent, "rejected", f" ({reason})")


@app.command()
@command
async def resolve(
    run: Run,
    step: Annotated[str, typer.Argument(help="The effect step that needs reconciliation.")],
    result_json: Annotated[
        str | None, typer.Option("--result", help="What happened, as JSON.")
    ] = None,
    text: Annotated[str | None, typer.Option("--text", help="What happened, as text.")] = None,
    retry: Annotated[bool, typer.Option("--retry", help="Reconcile again, then run.")] = False,
    abort: Annotated[bool, typer.Option("--abort", help="Abandon the step.")] = False,
    reason: Annotated[str, typer.Option(help="Why; recorded and told to the model.")] = "",
    reviewer: Annotated[str, typer.Option(help="Who decides.")] = OPERATOR,
) -> None:
    """Say what happened to an effect whose outcome could not be confirmed."""
    given = {"result": result_json, "text": text}
    chosen = [k for k, v in given.items() if v is not None]
    chosen += [k for k, on in (("retry", retry), ("abort", abort)) if on]
    if len(chosen) != 1:
        raise WaypointError("give exactly one of --result JSON, --text TEXT, --retry or --abort")
    if result_json is not None:
        try:
            json.loads(result_json)
        except ValueError as err:
            raise WaypointError(f"--result must be JSON ({err}); use --text for text") from None
    outcome = result_json if result_json is not None else text
    action = "result" if outcome is not None else chosen[0]
    resolution = Resolution(
        step_id=step,
        action=action,  # type: ignore[arg-type]
        result=outcome or "",
        reviewer=reviewer,
        reason=reason,
    )
    sent = await runs.resolve(
        await client(), run, resolution, timeout=views.QUICK, signing_key=signing_key()
    )
    print_sent(sent, "resolved", f" ({action})")


@app.command(name="decision-key")
def decision_key(
    reviewer: Annotated[str, typer.Argument(help="Whose key: the name they decide as.")],
) -> None:
    """Make a key pair for signed decisions: the private key for REVIEWER, the public for workers.

    The reviewer sets WAYPOINT_DECISION_KEY to the first line (and keeps it to themself); the
    workers' WAYPOINT_DECISION_KEYS gets the second. Agents with signed_decisions=True then
    accept REVIEWER's decisions only when signed with that key.
    """
    from waypoint._security.signing import new_key

    private, public = new_key()
    out.console.print(f"WAYPOINT_DECISION_KEY={private}", soft_wrap=True)
    out.console.print(f"{reviewer}:{public}", soft_wrap=True)


@app.command()
@command
async def resume(
    run: Run,
    max_turns: Annotated[int | None, typer.Option(help="New max turns.", metavar="N")] = None,
    max_cost_usd: Annotated[
        float | None, typer.Option(help="New cost budget.", metavar="USD")
    ] = None,
    max_total_tokens: Annotated[
        int | None, typer.Option(help="New token budget.", metavar="N")
    ] = None,
    replan: Annotated[
        bool,
        typer.Option(
            "--replan",
            help="For a run parked in tool_changed: tell the model the tool changed and go on "
            "with the new build's tools (nothing else: prompt, model, limits and policy stay "
            "the run's), instead of running the step again.",
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Continue a parked run: retry a step after an outage or a rollback, or raise its limits."""
    done = await runs.resume(
        await client(),
        run,
        reviewer=OPERATOR,
        replan=replan,
        max_turns=max_turns,
        max_cost_usd=max_cost_usd,
        max_total_tokens=max_total_tokens,
        signing_key=signing_key(),
    )
    if as_json:
        out.print_json(done.model_dump(mode="json"))
    elif done.limits is not None:
        out.console.print(f"limits raised for {run} ({done.state}): {done.detail}")
    else:
        out.console.print(f"resuming {run}: {done.detail}")


@app.command()
@command
async def correct(
    run: Run,
    step: Annotated[
        str | None, typer.Option(help="Finished tool step whose recorded result to replace.")
    ] = None,
    result_text: Annotated[
        str | None, typer.Option("--result", help="The corrected result.")
    ] = None,
    note: Annotated[str | None, typer.Option(help="A note the model reads next turn.")] = None,
    reason: Annotated[str, typer.Option(help="Why; recorded in the ledger.")] = "",
    reviewer: Annotated[str, typer.Option(help="Who corrects.")] = OPERATOR,
) -> None:
    """Replace a recorded tool result and/or leave a note for the model's next turn."""
    if (step is None) != (result_text is None):
        raise WaypointError("--step and --result go together")
    if step is None and not note:
        raise WaypointError("give --step STEP --result TEXT, or --note TEXT, or both")
    correction = Correction(
        step_id=step, result=result_text, note=note, reviewer=reviewer, reason=reason
    )
    key = signing_key()
    sent = await runs.correct(await client(), run, correction, views.QUICK, key)
    print_sent(sent, "correction", f" ({step or 'note'}); see `waypoint ledger {run}`")


@app.command()
@command
async def steer(
    run: Run,
    message: Annotated[str, typer.Argument(help="What the agent should know or do now.")],
    reviewer: Annotated[str, typer.Option(help="Who steers; recorded in the ledger.")] = OPERATOR,
) -> None:
    """Tell a running agent something now, at its next safe point.

    A model step in flight is cancelled (what it spent stays in the ledger) and asked again
    with your message; tool calls in flight finish first, and the message goes with their
    results. The ledger records who steered and when; `waypoint watch` shows it.
    """
    key, c = signing_key(), await client()
    sent = await runs.steer(
        c, run, message, reviewer=reviewer, timeout=views.QUICK, signing_key=key
    )
    if sent.recorded:
        r = sent
        out.console.print(f"steered {run}: {r.detail}")
        out.console.print(f"recorded as {r.step_id} by {r.decided_by} at {r.decided_at}")
        return
    out.console.print(f"steered {run}")
    out.errors.print(
        "[yellow]no worker answered: sent as a signal; the message reaches the agent when a "
        f"worker picks the run up (see `waypoint ledger {run}`)[/]"
    )
