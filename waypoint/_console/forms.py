"""The run page's forms for what people do beyond approving: answer, resolve, resume, start.

Each reads its fields, checks them on the server, and sends the verb through the same API
function as `POST /api/...` (so the same client call, role, audit line and signature). A form
that does not read, or that the run refuses for what it says (422, 409), comes back as the
run's page with the message beside the form and what was typed kept; being refused for who
you are (403) or a run that is not there (404) is the console's error page.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from pydantic import ValidationError
from starlette.responses import Response

from waypoint._console import api, pages
from waypoint._console.access import allowed, console_of, who
from waypoint._console.people import Principal
from waypoint._console.problems import Problem, status_of
from waypoint._console.schema_forms import PREFIX, FormError, fields, parse
from waypoint._console.starts import StartBody
from waypoint.client import hosts, views
from waypoint.errors import WaypointError
from waypoint.protocol import PendingQuestion
from waypoint.protocol.verbs import ANSWER, RESOLVE, RESUME, VERBS

router = APIRouter(include_in_schema=False)
Who = Annotated[Principal, Depends(who)]
ON_THE_FORM = {409, 422}
"""Refusals shown on the form that was sent, not on an error page."""
REFUSALS = (FormError, ValidationError, Problem, WaypointError)


async def _form(request: Request) -> dict[str, str]:
    """The posted form's text fields (a file or a repeated field is not one of ours)."""
    return {k: v for k, v in (await request.form()).items() if isinstance(v, str)}


def _problem(err: Exception) -> tuple[int, str]:
    """The status and message of a refusal to show on its form; any other is raised again."""
    if isinstance(err, FormError):
        return 422, str(err)
    if isinstance(err, ValidationError):
        said = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'form'}: {e['msg']}" for e in err.errors()[:5]
        )
        return 422, said
    if isinstance(err, Problem) and err.status in ON_THE_FORM:
        return err.status, err.detail
    if isinstance(err, WaypointError) and status_of(err) in ON_THE_FORM:
        return status_of(err), str(err)
    raise err


async def _sent(
    request: Request, principal: Principal, run: str, form_id: str, given: dict[str, str], send: Any
) -> Response:
    """Run `send`; back to the run's page saying so, or the page with the form's refusal."""
    try:
        said, step = await send()
    except REFUSALS as err:
        status, why = _problem(err)
        refused = {form_id: why}
        return await pages.show_run(request, principal, run, status, refused=refused, given=given)
    return pages.back(run, said, step)


@router.post("/runs/{run}/answer")
async def answer_form(principal: Who, request: Request, run: api.RunId) -> Response:
    """The answer form of a question, made from its answer schema."""
    given = await _form(request)
    step = given.get("step_id", "")[:200]

    async def send() -> tuple[str, str]:
        await allowed(request, principal, "approver", run)
        question = await _question(request, run, step)
        result = parse(question.answer_schema if question else None, given)
        if not isinstance(result, dict):
            raise FormError("the answer must be a JSON object")
        await api.act(
            principal, request, run, VERBS[ANSWER], api.AnswerBody(step_id=step, result=result)
        )
        return "answer", step

    return await _sent(request, principal, run, f"answer-{step}", given, send)


async def _question(request: Request, run: str, step: str) -> PendingQuestion | None:
    """The question at `step`: the memo's, or the run's own (the page's) when the memo lags."""
    client = console_of(request).client
    for ask_worker in (False, True):
        seen = await views.view(client, run, ask_worker=ask_worker)
        shown = seen.live or seen.memo
        found = (
            next((q for q in shown.pending_questions if q.step_id == step), None) if shown else None
        )
        if found is not None:
            return found
    return None


@router.post("/runs/{run}/resolve")
async def resolve_form(principal: Who, request: Request, run: api.RunId) -> Response:
    """What happened to a parked effect: its result, try again, or abandon it."""
    given = await _form(request)
    step = given.get("step_id", "")[:200]

    async def send() -> tuple[str, str]:
        body = api.ResolveBody.model_validate(
            {k: given.get(k, "") for k in ("step_id", "action", "result", "reason")}
        )
        await api.act(principal, request, run, VERBS[RESOLVE], body)
        return "resolve", step

    return await _sent(request, principal, run, f"resolve-{step}", given, send)


@router.post("/runs/{run}/resume")
async def resume_form(principal: Who, request: Request, run: api.RunId) -> Response:
    """Resume a parked run, or raise the limits it runs under."""
    given = await _form(request)

    async def send() -> tuple[str, str]:
        limits = ("max_turns", "max_cost_usd", "max_total_tokens")
        body = api.ResumeBody.model_validate(
            {
                "reason": given.get("reason", ""),
                "replan": given.get("replan") == "on",
                **{k: given[k] for k in limits if given.get(k, "").strip()},
            }
        )
        receipt = await api.act(principal, request, run, VERBS[RESUME], body)
        return ("limits" if receipt.limits else "resume"), ""

    return await _sent(request, principal, run, "resume", given, send)


@router.get("/runs/{run}/steps/{step}", response_class=HTMLResponse)
async def step_page(
    principal: Who, request: Request, run: api.RunId, step: Annotated[str, Path(max_length=200)]
) -> Response:
    """One step's whole arguments and result, for a reader without scripts (or to link)."""
    found = await api.step(principal, request, run, step)  # the API's checks and 404
    return pages.render(request, "step.html", principal, run=run, step=found, title=step)


async def _startable(request: Request, principal: Principal) -> list[str]:
    """The agents `principal` may start runs of: named ones, and those hosted if any may."""
    named = principal.agents("operator")
    if named is None:
        console = console_of(request)
        return await hosts.hosted_agents(console.client, console.task_queue)
    return sorted(named)


async def _start_page(
    request: Request, principal: Principal, status: int = 200, **extra: Any
) -> Response:
    agents = await _startable(request, principal)
    schema = StartBody.model_json_schema()
    if agents:
        schema["properties"]["agent"] = {**schema["properties"]["agent"], "enum": agents}
    context = {"fields": fields(schema), "agents": agents, "refused": "", "given": {}, **extra}
    return pages.render(
        request, "start.html", principal, title="Start a run", status=status, **context
    )


@router.get("/start", response_class=HTMLResponse)
async def start_page(principal: Who, request: Request) -> Response:
    """A form to start a run, made from the start's input schema."""
    return await _start_page(request, principal)


@router.post("/start")
async def start_form(principal: Who, request: Request) -> Response:
    """Start a run; to its page, or the form again with what was wrong."""
    given = await _form(request)
    try:
        value = parse(StartBody.model_json_schema(), given)
        named = (k.removeprefix(PREFIX) for k in given if k.startswith(PREFIX))
        value |= {k: given[PREFIX + k] for k in named if k not in StartBody.model_fields}
        body = StartBody.model_validate(value)  # what the form has no input for is refused
        receipt = await api.start(principal, request, body)
    except REFUSALS as err:
        status, why = _problem(err)
        return await _start_page(request, principal, status, refused=why, given=given)
    return RedirectResponse(f"/runs/{receipt.run}?said=started", status_code=303)
