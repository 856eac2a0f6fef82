"""`build_agent`: the vendor-onboarding agent, its prompt and where its downstream lives."""

from __future__ import annotations

import os
from pathlib import Path

from waypoint._agent import Agent
from waypoint.demo.script import SCRIPT
from waypoint.demo.tools import build_tools

NAME = "vendor_onboarding"
DEFAULT_MODEL = "claude-sonnet-4-6"
DEMO_TASK = "Onboard Northwind Components GmbH as a new supplier from the documents they sent."

SYSTEM_PROMPT = """\
You onboard a new supplier into the vendor registry. Use only the tools, in this order:

1. Call list_documents, then read every document the supplier sent (request them together).
2. Extract the supplier's legal name, country of incorporation, tax id (for EU suppliers the VAT
   identification number) and bank details (IBAN and BIC), exactly as the documents state them.
   If a value is missing, or the documents disagree (say the bank account is held in another
   name), stop and explain what is wrong instead of guessing.
3. Call screen_sanctions with the legal name and country. If anything matches, stop: create
   nothing and report the matched entries.
4. Call create_vendor with the extracted name, tax id, IBAN and BIC. A compliance officer must
   approve this call before it runs. If it is rejected, do not retry or work around it: stop
   and report who rejected it and why.
5. Call send_welcome_email to the contact address from the supplier's documents: a short,
   friendly note that the company is now set up as a vendor. Never put bank details or tax ids
   in an email.
6. Finish with a short summary: the supplier, the extracted details, the screening result, the
   vendor record and the email.

Call each of create_vendor and send_welcome_email at most once.
"""


def demo_dir_from_env() -> Path:
    """Where the downstream SQLite files live: `$WAYPOINT_DEMO_DIR`, else `.waypoint/demo`."""
    return Path(os.environ.get("WAYPOINT_DEMO_DIR") or Path(".waypoint") / "demo").absolute()


def build_agent(
    demo_dir: Path | None = None,
    model: str | None = None,
    *,
    barrier_dir: Path | None = None,
) -> Agent:
    """The agent over one downstream folder; the demo's environment is read here and only here.

    Args:
        demo_dir: Folder of the downstream SQLite files; defaults to `$WAYPOINT_DEMO_DIR`, else
            `.waypoint/demo` under the current directory. Created on first write.
        model: Claude model id; defaults to `$WAYPOINT_DEMO_MODEL`, else `claude-sonnet-4-6`.
        barrier_dir: Crash-test barrier folder (see `barriers.py`); defaults to
            `$WAYPOINT_DEMO_BARRIER_DIR`, else none.
    """
    env = os.environ
    if demo_dir is None:
        demo_dir = demo_dir_from_env()
    if barrier_dir is None and env.get("WAYPOINT_DEMO_BARRIER_DIR"):
        barrier_dir = Path(env["WAYPOINT_DEMO_BARRIER_DIR"])
    return Agent(
        name=NAME,
        model=model or env.get("WAYPOINT_DEMO_MODEL") or DEFAULT_MODEL,
        system=SYSTEM_PROMPT,
        tools=build_tools(
            demo_dir.absolute(), barrier_dir=barrier_dir.absolute() if barrier_dir else None
        ),
        script=SCRIPT,
    )
