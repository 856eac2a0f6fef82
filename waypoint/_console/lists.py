"""The console's runs list in the API (`GET /api/runs`): filters, pages, the true total.

The client reads (`waypoint.client.listing` builds the checked query, `waypoint.client.paging`
pages it); this only narrows it to the agents the caller may see and answers. The inbox and
the runs page (`waypoint._console.pages`) render the same pages.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field

from waypoint._console.access import console_of, who
from waypoint._console.people import Principal
from waypoint._console.problems import Problem, responses
from waypoint.client import listing, paging
from waypoint.protocol.states import STATES

router = APIRouter(prefix="/api", tags=["runs"], responses=responses(401, 403, 422, 503))
Who = Annotated[Principal, Depends(who)]
When = date | datetime | Literal[""]
ID_OR_BLANK = r"^[A-Za-z0-9_.:@-]{0,200}$"
TOKEN = r"^[A-Za-z0-9_=-]{0,2000}$"
"""A page token as `waypoint.client.paging` writes them."""


class Filters(BaseModel):
    """A runs list's filters, as the query string carries them (a saved link is one)."""

    run: str = Field(default="", pattern=ID_OR_BLANK, description="a run id, or its start")
    agent: str = Field(default="", pattern=ID_OR_BLANK)
    state: str = Field(default="", max_length=40, json_schema_extra={"enum": ["", *STATES]})
    waiting: Literal["", "me", "approval", "approver", "operator", "anyone"] = Field(
        default="",
        description="me: approvals the caller may give; or what the run waits on (oldest first)",
    )
    started_from: When = Field(default="", description="a date, or a time (UTC unless it says)")
    started_to: When = Field(default="", description="a date (through its end), or a time")
    closed_from: When = ""
    closed_to: When = ""
    page: str = Field(default="", pattern=TOKEN, description="the last page's `next_page`")
    limit: int = Field(default=paging.PAGE, ge=1, le=paging.MAX_PAGE)

    @property
    def search(self) -> listing.Search:
        """The filters without the paging."""
        fields = self.model_dump(exclude={"page", "limit"})
        return listing.Search(
            **{k: v.isoformat() if isinstance(v, date) else v or "" for k, v in fields.items()}
        )


class RunsPage(paging.Page):
    """A page of runs the caller may see, the true total, and the next page's token."""


BACK_PAGES = 8
"""Earlier pages a page's links remember for its "Previous page" (further back: "First page")."""
BACK = r"^[A-Za-z0-9_=.-]{0,20000}$"
"""The `back` a page's links carry: the tokens of the pages before it, oldest first, by dots."""


def page_links(
    path: str, query: dict[str, str], found: RunsPage, page: str, back: str, size: int
) -> dict[str, str]:
    """A list page's `first`, `previous` and `next` links ('' where there is none).

    A page token only goes forward, so each link carries the tokens of the pages before the
    one it opens (`back`, at most `BACK_PAGES`): "previous" opens the last of them. A page
    opened from a saved link, or further back than that, offers the first page instead.
    """
    trail = [token for token in back.split(".") if token]

    def at(token: str, earlier: list[str]) -> str:
        shown = {**query, **({"page": token} if token else {})}
        shown |= {"back": ".".join(earlier)} if earlier else {}
        return f"{path}?{urlencode(shown)}" if shown else path

    ahead = ([*trail, page] if page else trail)[-BACK_PAGES:]
    first = at("", []) if found.first else ""
    previous = at(trail[-1], trail[:-1]) if trail else first if found.first <= size else ""
    return {
        "first": first,
        "previous": previous,
        "next": at(found.next_page, ahead) if found.next_page else "",
    }


async def runs_page(principal: Principal, request: Request, filters: Filters) -> RunsPage:
    """The page `filters` ask for of the runs `principal` may see (the route's, and the pages')."""
    need = "approver" if filters.waiting == "me" else "viewer"
    search = filters.search
    agents = principal.agents(need)
    below = {a for a in principal.roles if agents is None and not principal.can(need, a)}
    try:
        q = listing.query(agents=agents, excluded=below, search=search)
        found = await paging.page(
            console_of(request).client,
            q,
            size=filters.limit,
            token=filters.page,
            waiting=search.waits,
        )
    except ValueError as err:
        raise Problem(422, str(err)) from None
    return RunsPage(**found.model_dump(exclude={"runs"}), runs=found.runs)


@router.get("/runs")
async def list_runs(
    principal: Who, request: Request, filters: Annotated[Filters, Query()]
) -> RunsPage:
    """Runs the caller may see, a page at a time, with how many match in all.

    Newest first; with `waiting`, the longest wait first. `waiting=me`: runs whose approvals
    the caller may give; `approval`, `approver` (approvals and answers), `operator` (stuck
    runs), `anyone`: among the runs the caller may see. Pass `next_page` as `page` for the
    next page; the same query string is a saved link to the same view.
    """
    return await runs_page(principal, request, filters)
