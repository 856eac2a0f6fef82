"""Every verb's command, made from its `VERBS` entry: `waypoint <command> RUN ...`.

--reason and --reviewer are made from the verb's payload (where it has those fields); what else
a command takes, and the client call it makes of them, is its hook's (`OWN`, by `Verb.hook`);
a verb without one (pause, unpause, cancel) is its client function with those two alone. Each
prints the receipt the client returns as one line (as JSON with --json, where it has one).
With a worker up, a verb that is an Update is answered by the run (a receipt, or the refusal
and its reason); with none, it is checked against the run's memo and sent as a signal, which
takes effect when a worker picks it up.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from temporalio.client import Client

from waypoint._cli import render as out
from waypoint._cli.app import app
from waypoint._cli.common import OPERATOR, AsJson, Run, Step, client, command, opt, signing_key
from waypoint._cli.runs import print_started
from waypoint.client import runs, views
from waypoint.errors import WaypointError
from waypoint.protocol import Correction, Resolution
from waypoint.protocol.policy import ApprovalPolicy
from waypoint.protocol.verbs import VERBS, Receipt, Verb
from waypoint.settings import Settings

Call = Callable[..., Awaitable[Receipt | None]]
"""A client call still to be given the client, the run and `by`: what every verb takes by name
(reviewer, reason, timeout, signing_key). It answers with the receipt to print, or None."""
OWN: dict[str, Callable[..., Call]] = {}
"""A verb's own options, by its `Verb.hook`: a function of them that answers with its `Call`."""
SHARED = {
    "reason": Annotated[str, opt("Why; recorded with it.")],
    "reviewer": Annotated[str, opt("Who sends it; recorded with it.", "NAME")],
}
"""Options made from a verb's payload fields of these names (a hook may declare its own)."""
Message = Annotated[str, typer.Argument(help="What the agent should know or do now.")]
Effect = Annotated[str, typer.Argument(help="The effect step that needs reconciliation.")]
Asked = Annotated[str, typer.Argument(help="The step awaiting an answer, e.g. t2.tool.1.ask.")]


def own(fn: Callable[..., Call]) -> Callable[..., Call]:
    """Keep `fn` as the hook of its name."""
    OWN[fn.__name__] = fn
    return fn


def print_receipt(r: Receipt, verb: Verb) -> None:
    """The receipt as one line: what was done, to what, by whom or what comes next."""
    args = f" ({r.pending.tool} {json.dumps(r.pending.arguments)})" if r.pending else ""
    state = f" ({r.state})" if r.state else ""
    head = f"{r.decision} {r.step_id or f'for {r.run}'}{args}{state}"
    if r.decided_at:
        out.console.print(f"{head}: recorded by {r.decided_by} at {r.decided_at}")
        if r.detail:  # where a steer goes; why an approved call was refused after all
            (out.errors if r.runs is False else out.console).print(r.detail)
    else:
        out.console.print(head + (f": {r.detail}" if r.detail else ""))
    if not r.recorded and verb.update:
        out.errors.print(
            "[yellow]no worker answered: sent as a signal; the decision takes effect when a "
            f"worker picks the run up (checked against the run as of {r.as_of or 'now'})[/]"
        )


def verb_command(verb: Verb) -> None:
    """`waypoint <verb.command>`: its hook's options, then --reason and --reviewer as above."""
    fn = OWN.get(verb.hook) or (lambda: getattr(runs, verb.name))
    mine = list(inspect.signature(fn, eval_str=True).parameters.values())
    made = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=kind)
        for (name, kind), default in zip(SHARED.items(), ("", OPERATOR), strict=True)
        if name in verb.payload.model_fields and name not in {p.name for p in mine}
    ]

    async def sends(run: str, **given: Any) -> None:
        by = {p.name: given.pop(p.name) for p in made}
        by |= {k: given[k] for k in SHARED if k in given}  # its hook's own: it gets them too
        as_json = given.get("as_json", False)
        call = fn(**given)
        by |= {"timeout": views.QUICK, "signing_key": signing_key()}
        receipt = await call(await client(), run, **by)
        if receipt is not None and as_json:
            out.print_json(receipt.model_dump(mode="json"))
        elif receipt is not None:
            print_receipt(receipt, verb)

    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in [*mine, *made]]
    run = inspect.Parameter("run", inspect.Parameter.KEYWORD_ONLY, annotation=Run)
    sends.__signature__ = inspect.Signature([run, *params])  # type: ignore[attr-defined]
    sends.__annotations__ = {}
    sends.__doc__ = fn.__doc__ or f"{verb.does[0].upper()}{verb.does[1:]}."
    sends.verb = verb  # type: ignore[attr-defined]
    app.command(name=verb.command)(command(sends))


class Remember(StrEnum):
    """What `approve --remember` keeps allowed for the rest of the run."""

    tool = "tool"
    args = "args"


@own
def approve(
    step: Step,
    remember: Annotated[
        Remember | None,
        opt("Also allow later calls of the tool, or of these exact args, this run."),
    ] = None,
) -> Call:
    """Approve a pending tool call (the exact arguments you were shown)."""
    return partial(runs.approve, step_id=step, remember=remember.value if remember else "")


@own
def reject(step: Step, reason: Annotated[str, opt("Why; the model is told.")]) -> Call:
    """Reject a pending tool call; the model is told it was rejected and why."""
    return partial(runs.reject, step_id=step)


@own
def resolve(
    step: Effect,
    result_json: Annotated[
        str | None, typer.Option("--result", help="What happened, as JSON.")
    ] = None,
    text: Annotated[str | None, opt("What happened, as text.")] = None,
    retry: Annotated[bool, opt("Reconcile again, then run.")] = False,
    abort: Annotated[bool, opt("Abandon the step.")] = False,
) -> Call:
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
    made = Resolution(step_id=step, action=action, result=outcome or "")  # type: ignore[arg-type]
    return lambda c, run, reason, **by: runs.resolve(
        c, run, made.model_copy(update={"reason": reason}), **by
    )


@own
def correct(
    step: Annotated[str | None, opt("Finished tool step whose recorded result to replace.")] = None,
    result_text: Annotated[
        str | None, typer.Option("--result", help="The corrected result.")
    ] = None,
    note: Annotated[str | None, opt("A note the model reads next turn.")] = None,
) -> Call:
    """Replace a recorded tool result and/or leave a note for the model's next turn."""
    if (step is None) != (result_text is None):
        raise WaypointError("--step and --result go together")
    if step is None and not note:
        raise WaypointError("give --step STEP --result TEXT, or --note TEXT, or both")
    made = Correction(step_id=step, result=result_text, note=note)
    return lambda c, run, reviewer, reason, **by: runs.correct(
        c, run, made.model_copy(update={"reviewer": reviewer, "reason": reason}), **by
    )


@own
def steer(message: Message) -> Call:
    """Tell a running agent something now, at its next safe point.

    A model step in flight is cancelled (what it spent stays in the ledger) and asked again
    with your message; tool calls in flight finish first, and the message goes with their
    results. The ledger records who steered and when; `waypoint watch` shows it.
    """
    return partial(runs.steer, message=message)


@own
def answer(
    step: Asked,
    json_text: Annotated[
        str | None, typer.Option("--json", help="The answer, a JSON object.", metavar="JSON")
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option("--file", help="Read the answer from a JSON file.", metavar="FILE"),
    ] = None,
    reviewer: Annotated[
        str, typer.Option("--reviewer", "--sender", help="Who answers.", metavar="NAME")
    ] = OPERATOR,
) -> Call:
    """Answer a tool call the run is waiting on a client for."""
    if (json_text is None) == (file is None):
        raise WaypointError("give exactly one of --json '{...}' or --file PATH")
    if file is not None:
        try:
            json_text = file.read_text(encoding="utf-8")
        except OSError as err:
            raise WaypointError(f"cannot read {file}: {err.strerror}") from None
    try:
        result = json.loads(json_text or "")
    except ValueError as err:
        raise WaypointError(f"the answer must be JSON ({err})") from None
    if not isinstance(result, dict):
        raise WaypointError("the answer must be a JSON object, the tool's output type")
    return partial(runs.answer, step_id=step, result=result)


class Action(StrEnum):
    """What to do with the run's policy."""

    show = "show"
    set = "set"


@own
def policy(
    action: Annotated[Action, typer.Argument(help="show the policy, or set a new one.")],
    file: Annotated[
        Path | None,
        typer.Option("--file", help="The new policy, as JSON (for set).", metavar="FILE"),
    ] = None,
) -> Call:
    """Show or change a live run's approval policy; a change is recorded with who made it."""
    if action is Action.show:
        return show_policy
    if file is None:
        raise WaypointError("set needs --file POLICY.json")
    try:
        new = ApprovalPolicy.model_validate_json(file.read_text())
    except (OSError, ValidationError, json.JSONDecodeError) as err:
        raise WaypointError(f"cannot read a policy from {file}: {err}") from None
    return partial(_set_policy, new)


async def _set_policy(new: ApprovalPolicy, c: Client, run: str, **by: Any) -> Receipt | None:
    """Set it; the receipt names the policy sent (rules and digest), to check against the file."""
    r = await runs.set_policy(c, run, policy=new, **by)
    sent = f"{len(new.rules)} rules, sha256 {new.digest()[:12]}"
    return r and r.model_copy(update={"detail": f"{r.detail} ({sent})" if r.detail else sent})


async def show_policy(c: Client, run: str, **_: Any) -> None:
    """Print the policy in force on the run, where it came from, and what it remembers."""
    view = await runs.show_policy(c, run, timeout=views.QUICK)
    out.console.print_json(view.model_dump_json())


@own
def resume(
    max_turns: Annotated[int | None, opt("New max turns.", "N")] = None,
    max_cost_usd: Annotated[float | None, opt("New cost budget.", "USD")] = None,
    max_total_tokens: Annotated[int | None, opt("New token budget.", "N")] = None,
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
) -> Call:
    """Continue a parked run: retry a step after an outage or a rollback, or raise its limits."""
    return partial(
        runs.resume, replan=replan, max_turns=max_turns, max_cost_usd=max_cost_usd,
        max_total_tokens=max_total_tokens,
    )  # fmt: skip


@own
def fork(
    after_turn: Annotated[int, opt("Reuse everything up to the end of this turn.", "N")],
    note: Annotated[str | None, opt("A note for the model in the new run.")] = None,
    run_id: Annotated[str | None, typer.Option("--id", help="Workflow id of the fork.")] = None,
) -> Call:
    """Start a new run from a finished turn of RUN; nothing before that point runs again."""
    settings = Settings.from_env()

    async def forks(c: Client, run: str, reviewer: str, signing_key: Any, **_: Any) -> None:
        handle = await runs.fork(
            c, run, after_turn, task_queue=settings.task_queue, note=note, workflow_id=run_id,
            reviewer=reviewer, signing_key=signing_key,
        )  # fmt: skip
        print_started(settings, handle.id)

    return forks


for _verb in VERBS.values():
    if _verb.hook or _verb.command == _verb.name:  # raise_limits is sent by `resume`'s command
        verb_command(_verb)
