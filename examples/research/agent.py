"""A researcher: Claude searches the web itself (a server tool) and answers with citations.

With ANTHROPIC_API_KEY set the worker calls Claude, which runs the searches at Anthropic (billed
per search, at most 3 a call here). Offline the scripted model plays one labelled search.
"""

from __future__ import annotations

from waypoint import Agent, Limits
from waypoint.server_tools import web_search
from waypoint.testing import reply
from waypoint.testing import web_search as scripted_search

SCRIPT = [
    reply(
        *scripted_search(
            "Ada Lovelace first program",
            ("https://example.org/ada-notes", "Notes by the translator (scripted)"),
            cite="Ada Lovelace's Note G holds what is called the first program (scripted).",
        )
    ),
]

researcher = Agent(
    name="researcher",
    model="claude-sonnet-4-6",
    system="Answer from what you find on the web, and cite it.",
    server_tools=[web_search(max_uses=3, blocked_domains=["example.com"])],
    limits=Limits(max_turns=5, max_cost_usd=0.50),
    script=SCRIPT,
)

agents = [researcher]
