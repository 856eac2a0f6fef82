"""The console's pages, rendered on the server: the approvals inbox, the runs list, one run.

Forms post to these routes, which call the same handlers as the API (`waypoint._console.api`)
and send the browser back to the run's page. Every form carries the session's CSRF token;
every approval carries the arguments hash the page showed, so a page gone stale cannot approve
arguments that changed since.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl, quote, urlencode

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates
from starlette.responses import Response

import waypoint._readable as readable
from waypoint._console import api, lists, schema_forms
from waypoint._console.access import allowed, console_of, session_of, who
from waypoint._console.people import NAME, Principal
from waypoint._console.problems import Problem
from waypoint._operations import ui
from waypoint.client import detail, evidence, spec
from waypoint.client.paging import PAGE
from waypoint.protocol.states import RESUMABLE_STATES, STATES
from waypoint.protocol.verbs import APPROVE, REJECT, STEER, STEER_MAX_CHARS, VERBS, Verb

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")
router = APIRouter(include_in_schema=False)
Who = Annotated[Principal, Depends(who)]


def since(iso: str) -> str:
    """`3 min ago`: how long ago an ISO time was."""
    try:
        seconds = (datetime.now(UTC) - datetime.fromisoformat(iso)).total_seconds()
    except (TypeError, ValueError):
        return ""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{max(seconds, 0):.0f} s ago"


def usd(value: float | None) -> str:
    """A cost for people: `$0.0123`, or `n/a` when unknown."""
    return "n/a" if value is None else f"${value:,.4f}"


templates.env.filters["since"] = since
templates.env.filters["usd"] = usd
templates.env.filters["shown"] = readable.arguments
templates.env.filters["exact"] = readable.exact
templates.env.filters["step_status"] = lambda status: readable.STEP_STATUS.get(status, status)
templates.env.filters["state_label"] = lambda s: STATES[s].label if s in STATES else s
templates.env.filters["state_means"] = lambda s: STATES[s].means if s in STATES else ""
STATE_WORDS = {name: {"label": s.label, "means": s.means} for name, s in STATES.items()}
"""What the run page's script says of a state it hears of (`state_changed`)."""


def render(request: Request, name: str, principal: Principal | None, **context: Any) -> Response:
    """A page, with who is signed in and their CSRF token for its forms."""
    session = session_of(request)
    status = context.get("status", 200)  # error.html shows it too
    shown = {"me": principal, "csrf": session.csrf if session else "", **context}
    return templates.TemplateResponse(request, name, shown, status_code=status)


async def error_page(request: Request, status: int, detail: str) -> Response | None:
    """A refusal as a page for a browser; None for the API, or a client that asks for JSON.

    None leaves it an RFC 9457 problem document.
    """
    path, accept = request.url.path, request.headers.get("accept", "")
    wants_json = "json" in accept and "text/html" not in accept
    if path.startswith("/api/") or path.startswith("/codec") or wants_json:
        return None
    if status == 401 and request.method == "GET":
        return RedirectResponse(f"/signin?next={quote(path)}", status_code=303)
    title = readable.REFUSED.get(status, "That did not work")
    form = request.method == "POST" and path.startswith("/runs/")
    run = path.split("/")[2] if form else ""  # a refused form: the way back to the run
    context = {"title": title, "detail": detail, "status": status, "run": run}
    return render(request, "error.html", None, **context)


INBOX_PAGE = 25
"""Runs an inbox page shows: their cards stay well under 100 KB."""


INBOXES = {
    "me": "you",
    "approver": "an approver",
    "operator": "an operator",
    "anyone": "anyone",
}
"""Whom an inbox shows the waits of: the signed-in person's approvals, or runs (they may see)
waiting on a role."""
Back = Annotated[str, Query(max_length=20000, pattern=lists.BACK)]


@router.get("/", response_class=HTMLResponse)
async def inbox(
    principal: Who,
    request: Request,
    page: Annotated[str, Query(max_length=2000, pattern=lists.TOKEN)] = "",
    waiting: Annotated[Literal["me", "approver", "operator", "anyone"], Query()] = "me",
    back: Back = "",
) -> Response:
    """What waits for the person (or a role), the longest wait first, paged."""
    filters = lists.Filters(waiting=waiting, page=page, limit=INBOX_PAGE)
    found = await lists.runs_page(principal, request, filters)
    asked = {r.run: sorted(r.pending_approvals, key=lambda p: p.requested_at) for r in found.runs}
    query = {"waiting": waiting} if waiting != "me" else {}
    links = lists.page_links("/", query, found, page, back, INBOX_PAGE)
    client = console_of(request).client
    schemas = await spec.tools_of(client, {r.run: r.run_id for r in found.runs if asked[r.run]})
    context = {"found": found, "asked": asked, "links": links, "schemas": schemas}
    context |= {"waiting": waiting, "inboxes": INBOXES}
    title = "Approvals" if waiting == "me" else f"Waiting on {INBOXES[waiting]}"
    return render(request, "inbox.html", principal, title=title, **context)


@router.get("/glossary", response_class=HTMLResponse)
async def glossary(principal: Who, request: Request) -> Response:
    """What the console's technical words mean: steps, hashes, keys, and every run state."""
    return render(request, "glossary.html", principal, states=STATES, title="Glossary")


@router.get("/runs", response_class=HTMLResponse)
async def runs_list(
    principal: Who,
    request: Request,
    filters: Annotated[lists.Filters, Query()],
    back: Back = "",
) -> Response:
    """Runs the person may see, searched and paged; the address is a saved link to the view."""
    found = await lists.runs_page(principal, request, filters)
    console = console_of(request)
    base = console.ui_base
    rows = found.runs
    links = (
        {r.run: ui.run_link(base, console.client.namespace, r.run) for r in rows} if base else {}
    )
    link = filters.search.link()
    saved = f"/runs?{link}" if link else "/runs"
    query = dict(parse_qsl(link)) | ({"limit": str(filters.limit)} if filters.limit != PAGE else {})
    pages = lists.page_links("/runs", query, found, filters.page, back, filters.limit)
    context = {
        "rows": rows,
        "found": found,
        "filters": filters,
        "saved": saved,
        "links": pages,
        "states": list(STATES),
        "waits": WAITS,
        "web_ui": links,
    }
    return render(request, "runs.html", principal, title="Runs", **context)


WAITS = {
    "": "anything or nothing",
    "me": "my approval",
    "approval": "an approval",
    "approver": "an approver (approve, reject, answer)",
    "operator": "an operator (stuck)",
    "anyone": "anyone",
}
"""The runs page's waiting-on choices, as people read them."""


@router.get("/runs/{run}", response_class=HTMLResponse)
async def run_page(
    principal: Who,
    request: Request,
    run: str,
    said: Annotated[str, Query(max_length=20)] = "",
    step: Annotated[str, Query(max_length=200, pattern=NAME.pattern)] = "",
) -> Response:
    """One run: waits with their exact arguments, a waterfall of steps, the ledger, live text."""
    return await show_run(request, principal, run, said=SAID.get(said, "").format(step=step))


async def show_run(
    request: Request, principal: Principal, run: str, status: int = 200, **extra: Any
) -> Response:
    """The run's page; `extra` says what a form did, or what was wrong with it (`refused`)."""
    agent = await allowed(request, principal, "viewer", run)
    console = console_of(request)
    shown = await detail.run_detail(console.client, run)
    agent_spec = await spec.run_spec(console.client, run)
    schemas = {t.name: t.input_schema for t in agent_spec.tools} if agent_spec else {}
    link = ui.run_link(console.ui_base, console.client.namespace, run) if console.ui_base else ""
    spans = {s.index: max(s.span, 0.001) for s in shown.segments}
    context = {
        "run": shown,
        "said": "",
        "refused": {},
        "given": {},
        "can_decide": principal.can("approver", agent),
        "can_operate": principal.can("operator", agent),
        "may": {name: principal.can(v.role, agent) for name, v in VERBS.items()},
        "buttons": [
            v for v in VERBS.values() if shown.state in v.button and principal.can(v.role, agent)
        ],
        "web_ui": link,
        "steer_max": STEER_MAX_CHARS,
        "spans": spans,
        "groups": detail.grouped(shown),
        "words": "\n".join(e.words for e in shown.steps.values() if e.words),
        "answer_fields": schema_forms.fields,
        "resumable": RESUMABLE_STATES,
        "preview_chars": evidence.PREVIEW_CHARS,
        "schemas": schemas,
        "state_words": STATE_WORDS,
        "title": run,
        "status": status,
        **extra,
    }
    return render(request, "run.html", principal, **context)


SAID = {
    "approved": "approved {step}",
    "approved_not_run": (
        "approved {step}, but it was not run: what it relied on changed, or the policy in force "
        "now refuses it (its ledger line says which); the model decides again"
    ),
    "queued": "approved {step}: it goes as a signal, applied when a worker picks the run up",
    "rejected": "rejected {step}",
    "steered": "steer sent: the model reads it at its next safe point",
    **{v.name: f"{v.done} by you" for v in VERBS.values() if v.simple},
    **{name: f"{VERBS[name].done} by you" for name in ("answer", "resolve", "resume")},
    "limits": "limits raised by you: the run goes on where it stopped",
    "started": "run started by you",
}
"""What a form did, by the code its redirect carries: a link cannot make the page say more."""


def back(run: str, said: str, step: str = "") -> RedirectResponse:
    """To the run's page, saying what was done (`SAID`)."""
    query = urlencode({"said": said, **({"step": step} if step else {})})
    return RedirectResponse(f"/runs/{quote(run)}?{query}", status_code=303)


def _decision(verb: Verb) -> None:
    """The approve or reject button (a rejection needs a reason: the model reads it)."""

    async def form(
        principal: Who,
        request: Request,
        run: str,
        step_id: Annotated[str, Form(max_length=200)],
        arguments_hash: Annotated[str, Form(max_length=200)],
        reason: Annotated[str, Form(max_length=2000)] = "",
    ) -> Response:
        if verb.name == REJECT and not reason.strip():
            raise Problem(422, "a rejection needs a reason: the model reads it")
        body = api.DecisionBody(step_id=step_id, arguments_hash=arguments_hash, reason=reason)
        receipt = await api.act(principal, request, run, verb, body)
        said = "approved_not_run" if receipt.runs is False else verb.done
        return back(run, said if receipt.recorded or verb.name == REJECT else "queued", step_id)

    form.__doc__ = f"The {verb.name} button."
    router.post(f"/runs/{{run}}/{verb.name}")(form)


@router.post("/runs/{run}/steer")
async def steer_form(
    principal: Who,
    request: Request,
    run: str,
    message: Annotated[str, Form(min_length=1, max_length=STEER_MAX_CHARS)],
) -> Response:
    """The steer box."""
    await api.act(principal, request, run, VERBS[STEER], api.SteerBody(message=message))
    return back(run, "steered")


def _form(verb: Verb) -> None:
    """The button of a `Verb.simple` verb, from its `VERBS` entry (`Verb.button`: where)."""

    async def form(
        principal: Who,
        request: Request,
        run: str,
        reason: Annotated[str, Form(max_length=2000)] = "",
        confirmed: Annotated[str, Form(max_length=10)] = "",
    ) -> Response:
        if verb.confirm and not (confirmed and reason.strip()):
            await allowed(request, principal, verb.role, run)  # a viewer is refused, not asked
            why = "say why: it is recorded with the run" if confirmed else ""
            context = {"verb": verb, "run": run, "reason": reason, "refused": why}
            return render(request, "confirm.html", principal, title=run, **context,
                          status=422 if why else 200)  # fmt: skip
        await api.act(principal, request, run, verb, api.ReasonBody(reason=reason))
        return back(run, verb.name)

    form.__doc__ = f"The {verb.name} button."
    router.post(f"/runs/{{run}}/{verb.name}")(form)


for _verb in VERBS.values():
    if _verb.simple:
        _form(_verb)
_decision(VERBS[APPROVE])
_decision(VERBS[REJECT])
