"""The console's HTTP API (`/api`): runs, one run, the verbs, and a run's events as SSE.

Every verb's route is made from its `waypoint.protocol.verbs.VERBS` entry (`_route`): it needs
the role the entry names for the run's agent, and answers with the verb's `Receipt`. Each goes
through the same client call as the CLI (`waypoint.client`), as `<person> via <console>` and
signed with the console's key when it has one, so an agent with `signed_decisions=True`
records a decider its workers verified. An approval carries the arguments hash the caller saw:
if the call waiting now has other arguments, it is refused (409), never applied to what nobody
reviewed.
"""

from __future__ import annotations

import contextlib
import inspect
import re
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from waypoint._console.access import Console, agent_of, allowed, console_of, who
from waypoint._console.events import event_stream
from waypoint._console.people import NAME, Principal
from waypoint._console.problems import Problem, responses, status_of
from waypoint._console.starts import StartBody
from waypoint.client import detail, evidence, runs, views
from waypoint.client.verbs import UPDATE_TIMEOUT
from waypoint.errors import RunIdTakenError, WaypointError
from waypoint.protocol import Resolution
from waypoint.protocol.answer_schema import problems
from waypoint.protocol.verbs import (
    ANSWER,
    APPROVE,
    REJECT,
    RESOLVE,
    RESUME,
    STEER,
    STEER_MAX_CHARS,
    VERBS,
    Receipt,
    Verb,
)

router = APIRouter(prefix="/api", tags=["runs"], responses=responses(401, 403, 422, 503))
ON_A_RUN = responses(404, 409)
"""A run that does not exist, or does not wait for what was sent (or has ended)."""
WITH_A_BODY = responses(413)
Who = Annotated[Principal, Depends(who)]
RunId = Annotated[str, Field(min_length=1, max_length=200, pattern=NAME.pattern)]
NOT_BLANK = r"[^\s\x1c-\x1f]"
"""Holds a character `str.strip` keeps: it strips 0x1c-0x1f too, which a schema's `\\s` keeps."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", str_max_length=100_000)


class DecisionBody(_Body):
    """Approve or reject the call waiting at `step_id`, whose arguments hashed to this."""

    step_id: str = Field(min_length=1, max_length=200)
    arguments_hash: str = Field(min_length=1, max_length=200)
    reason: str = Field(default="", max_length=2000)
    remember: Literal["", "tool", "args"] = ""


class RejectBody(DecisionBody):
    """Reject the call waiting at `step_id`, saying why: the model reads the reason."""

    reason: str = Field(min_length=1, max_length=2000, pattern=NOT_BLANK)


class AnswerBody(_Body):
    """A client tool's result for the question waiting at `step_id`."""

    step_id: str = Field(min_length=1, max_length=200)
    result: dict[str, Any]


class SteerBody(_Body):
    """A message for the running agent, read at its next safe point."""

    message: str = Field(min_length=1, max_length=STEER_MAX_CHARS)


class ResumeBody(_Body):
    """Retry a parked step, or raise the limit the run stopped at."""

    reason: str = Field(default="", max_length=2000)
    replan: bool = False
    max_turns: int | None = Field(default=None, ge=1, le=100_000)
    max_cost_usd: float | None = Field(default=None, gt=0, le=1_000_000)
    max_total_tokens: int | None = Field(default=None, ge=1, le=10**12)


class ResolveBody(_Body):
    """What happened to an effect the run could not confirm."""

    step_id: str = Field(min_length=1, max_length=200)
    action: Literal["result", "retry", "abort"]
    result: str = Field(default="", max_length=100_000)
    reason: str = Field(min_length=1, max_length=2000)


class ReasonBody(_Body):
    """Why: recorded with the verb (pause, unpause, cancel)."""

    reason: str = Field(default="", max_length=2000)


class Me(BaseModel):
    """Who the console thinks you are."""

    name: str
    via: str
    roles: dict[str, str]


@router.get("/me")
async def me(principal: Who) -> Me:
    """The caller's name and roles."""
    return Me(name=principal.name, via=principal.via, roles=dict(principal.roles))


@router.post("/runs", status_code=201, responses={**WITH_A_BODY, **responses(409)})
async def start(principal: Who, request: Request, body: StartBody) -> Receipt:
    """Start a run (operator of the agent), under the limits and settings it names.

    Step timeouts and retries are the console's (`Console.start_options`), never the body's.
    """
    if not principal.can("operator", body.agent):
        raise Problem(403, f"{principal.name} may not start runs of agent {body.agent!r}")
    console = console_of(request)
    chosen = body.audited()
    async with console.audit.verb(request, principal, "start", agent=body.agent, **chosen) as line:
        line["run"] = body.workflow_id or ""
        try:
            handle = await runs.start_run(
                console.client,
                body.agent,
                body.task,
                task_queue=console.task_queue,
                workflow_id=body.workflow_id,
                worker_wait=5.0,
                options=console.start_options,
                task_timeout=console.start_task_timeout,
                **body.chosen(),
            )
        except RunIdTakenError:
            if await _sees(console, principal, str(body.workflow_id)):
                raise
            raise Problem(409, TAKEN.format(id=body.workflow_id)) from None
        line["run"] = handle.id
    return Receipt(run=handle.id, decision="started", decided_by=principal.name)


TAKEN = "the id {id!r} cannot be used for a new run: choose another"
"""For an id held by a run the caller may not see: no state, no Temporal run id, no agent."""


async def _sees(console: Console, principal: Principal, run: str) -> bool:
    """Whether `principal` holds any role for the agent of the run `run` names."""
    try:
        return principal.role(await agent_of(console.client, run)) is not None
    except WaypointError:
        return False  # not a Waypoint run: nothing of it is theirs to read


@router.get("/runs/{run}", responses=responses(404))
async def run_detail(principal: Who, request: Request, run: RunId) -> detail.RunDetail:
    """One run: status, what it waits for, ledger, refusals, each step's latency."""
    await allowed(request, principal, "viewer", run)
    return await detail.run_detail(console_of(request).client, run)


@router.get("/runs/{run}/steps/{step}", responses=responses(404))
async def step(
    principal: Who, request: Request, run: RunId, step: Annotated[str, Path(max_length=200)]
) -> evidence.StepEvidence:
    """One step's whole arguments, result, words and tries, however large (viewer)."""
    await allowed(request, principal, "viewer", run)
    found = await detail.step_evidence(console_of(request).client, run, step)
    if found is None:
        raise Problem(404, f"run {run!r} has no step {step!r} in its history")
    return found


BODIES: dict[str, type[_Body]] = {
    APPROVE: DecisionBody, REJECT: RejectBody, ANSWER: AnswerBody, RESOLVE: ResolveBody,
    STEER: SteerBody, RESUME: ResumeBody,
}  # fmt: skip
"""A verb's request body, by its name; a verb not named takes `ReasonBody`."""
TYPED = frozenset({"reason", "message", "result"})
"""What a person typed: never in the audit log."""
Send = Callable[..., Awaitable[Receipt]]


async def act(principal: Principal, request: Request, run: str, verb: Verb, body: _Body) -> Receipt:
    """Send `verb` as `principal` through its client function, with the role its entry names.

    The body's fields go as the function's arguments of the same names, or as the verb's hook
    (`HOOKS`) gives them.
    Recorded in the audit log with the body's fields but what a person typed, and signed by the
    console when it has a key (every verb can be).
    """
    agent = await allowed(request, principal, verb.role, run)
    console, fn = console_of(request), getattr(runs, verb.name)
    said = body.model_dump(exclude_defaults=True)
    audit = {k: str(v) for k, v in said.items() if k not in TYPED}

    async def send(*args: Any, **given: Any) -> Receipt:
        async with console.audit.verb(
            request, principal, verb.name, run, agent=agent, **audit
        ) as line:
            receipt: Receipt = await fn(
                console.client, run, *args, reviewer=console.reviewer(principal),
                timeout=UPDATE_TIMEOUT, signing_key=console.signing_key, **given,
            )  # fmt: skip
            line["recorded"] = receipt.recorded
        return receipt

    if verb.hook in HOOKS:
        return await HOOKS[verb.hook](request, run, body, send)
    return await send(**body.model_dump())


async def _answer(request: Request, run: str, body: AnswerBody, send: Send) -> Receipt:
    """An answer that does not fit its question's schema is 422, before anything is sent.

    The run checks the answer too; this says what is wrong.
    """
    seen = await views.view(console_of(request).client, run, ask_worker=False)
    asked = seen.memo.pending_questions if seen.memo and not seen.closed else []
    schema = next((q.answer_schema for q in asked if q.step_id == body.step_id), None)
    if wrong := problems(schema, body.result) if schema else []:
        raise Problem(422, f"the answer does not fit its schema: {'; '.join(wrong)}")
    return await send(body.step_id, body.result)


async def _reject(request: Request, run: str, body: RejectBody, send: Send) -> Receipt:
    """Its body is an approval's: what a rejection cannot do, `remember`, is left out."""
    return await send(**body.model_dump(exclude={"remember"}))


async def _resolve(request: Request, run: str, body: ResolveBody, send: Send) -> Receipt:
    """Recorded as the run's `Resolution` of the effect."""
    return await send(Resolution(**body.model_dump()))


async def _resume(request: Request, run: str, body: ResumeBody, send: Send) -> Receipt:
    """A resume refused for the run's state, not for its body, is 409."""
    try:
        return await send(**body.model_dump())
    except WaypointError as err:
        if status_of(err) != 422:
            raise
        raise Problem(409, str(err)) from err


HOOKS: dict[str, Callable[..., Awaitable[Receipt]]] = {
    "answer": _answer, "reject": _reject, "resolve": _resolve, "resume": _resume,
}  # fmt: skip
"""A verb's own part of its route, by its `Verb.hook`: `(request, run, body, send)`."""


def _route(verb: Verb) -> None:
    """`POST /api/runs/{run}/<verb>`, from its `VERBS` entry: body, role, hook and receipt."""

    async def route(principal: Who, request: Request, run: RunId, body: ReasonBody) -> Receipt:
        return await act(principal, request, run, verb, body)

    route.__annotations__["body"] = BODIES.get(verb.name, ReasonBody)
    hook = inspect.getdoc(HOOKS[verb.hook]) if verb.hook in HOOKS else ""
    route.__doc__ = f"{verb.does[0].upper()}{verb.does[1:]} ({verb.role}).\n\n{hook}".strip()
    route.verb = verb  # type: ignore[attr-defined]
    router.post(
        f"/runs/{{run}}/{verb.name}", name=verb.name, responses={**ON_A_RUN, **WITH_A_BODY}
    )(route)


for _verb in VERBS.values():
    if _verb.api:
        _route(_verb)


@router.get(
    "/runs/{run}/events",
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "Server-Sent Events"},
        **responses(404),
    },
)
async def events(
    principal: Who,
    request: Request,
    run: RunId,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
) -> Any:
    """The run's events as Server-Sent Events: the recorded past first, then live.

    From `offset`, or after the `Last-Event-ID` a reconnecting browser sends.
    """
    await allowed(request, principal, "viewer", run)
    last = request.headers.get("last-event-id", "")
    if re.fullmatch(r"[0-9]{1,10}", last):
        offset = max(offset, min(int(last) + 1, 10**9))

    async def still_allowed() -> bool:
        with contextlib.suppress(Problem, WaypointError):
            await allowed(request, await who(request), "viewer", run)
            return True
        return False

    console = console_of(request)
    return event_stream(console.client, run, offset, still_allowed, console.recheck_seconds)
