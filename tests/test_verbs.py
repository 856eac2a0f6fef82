"""Every verb is defined once (`waypoint.protocol.verbs.VERBS`) and every surface holds to it.

The workflow's signals and updates, the client's functions, the CLI's commands, the console's
routes and OpenAPI document, and `docs/verbs.md` each fail here when a verb is missing from
them (the torture generator's coverage is `tests/test_torture_coverage.py`, built from the same
table). `python tests/test_verbs.py` rewrites `docs/verbs.md` after a change to the table.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import typer
from fastapi.routing import APIRoute
from temporalio import workflow

from waypoint._cli import app
from waypoint._cli.verbs import OWN
from waypoint._console import api
from waypoint._console.access import Console
from waypoint._console.app import build_app
from waypoint._console.sessions import Sessions
from waypoint._workflows import AgentWorkflow
from waypoint.client import runs
from waypoint.protocol.verbs import HANDLERS, VERBS, Receipt

PAGE = Path(__file__).parent.parent / "docs" / "verbs.md"
SHARED = ("reviewer", "timeout")
"""What every verb sent to a run takes by name, whatever it is about."""


def test_every_handler_of_the_workflow_is_a_verb_and_every_verb_a_handler() -> None:
    definition = workflow._Definition.must_from_class(AgentWorkflow)  # noqa: SLF001
    assert set(definition.signals) - {None} == set(HANDLERS)
    assert set(definition.updates) - {None} == {h for h, v in HANDLERS.items() if v.update}


def test_every_verb_is_a_client_function_with_the_same_names_for_the_same_things() -> None:
    for verb in VERBS.values():
        if verb.role == "viewer":
            continue  # a reader's lease: `runs.events` sends it
        send = getattr(runs, verb.name, None)
        assert inspect.iscoroutinefunction(send), f"waypoint.client.runs.{verb.name}"
        params = inspect.signature(send).parameters
        assert list(params)[:2] == ["client", "run"], verb.name
        if verb.handler and verb.name not in ("correct", "resolve"):  # these take their payload
            assert all(p in params for p in SHARED if verb.update), (verb.name, list(params))
        assert "signing_key" in params, verb.name  # every verb can be signed
        assert "sender" not in params, verb.name  # one word for who sends it: reviewer
        hint = str(send.__annotations__.get("return", ""))
        assert verb.name == "fork" or hint == "Receipt", (verb.name, hint)


def test_every_verb_is_a_cli_command() -> None:
    commands = typer.main.get_group(app).commands  # type: ignore[attr-defined]
    assert {v.command for v in VERBS.values()} - set(commands) == set()


def test_every_verbs_cli_command_and_api_route_is_made_from_its_entry() -> None:
    """Not written by hand: `verb_command` and `api._route` made each from its `VERBS` entry,
    and a verb's own code is only the hook its entry names."""
    commands = [c for c in app.registered_commands if hasattr(c.callback, "verb")]
    made = {c.name: c.callback.verb for c in commands}  # type: ignore[union-attr]
    routes = {r.path: r.endpoint for r in api.router.routes if isinstance(r, APIRoute)}
    for verb in VERBS.values():
        assert made[verb.command] is VERBS[made[verb.command].name], verb.name
        assert made[verb.command] is verb or not verb.hook, verb.name  # raise_limits: resume's
        if verb.api:
            assert routes[f"/api/runs/{{run}}/{verb.name}"].verb is verb, verb.name  # type: ignore[attr-defined]
    hooks = {v.hook for v in VERBS.values()} - {""}
    assert set(OWN) <= hooks and set(api.HOOKS) <= hooks, (set(OWN), set(api.HOOKS))
    assert {v.hook for v in VERBS.values() if v.hook and not v.simple} <= set(OWN)


def test_every_verb_for_the_console_is_a_route_and_in_the_openapi_document(
    tmp_path: Path,
) -> None:
    routes = {r.path: r for r in api.router.routes if isinstance(r, APIRoute)}
    console = Console(client=None, people_file=tmp_path / "u", sessions=Sessions("s" * 32))  # type: ignore[arg-type]
    document = build_app(console).openapi()["paths"]
    for verb in VERBS.values():
        path = f"/api/runs/{{run}}/{verb.name}"
        assert (path in routes) == verb.api, verb.name
        if verb.api:
            assert "post" in document[path], verb.name
            assert routes[path].response_model is Receipt, verb.name


def test_the_verbs_page_is_rendered_from_the_table() -> None:
    assert PAGE.read_text() == page(), "run `python tests/test_verbs.py` to render it again"


def page() -> str:
    """`docs/verbs.md`: every verb, who may send it, how it travels, what it leaves."""
    lines = [
        "# Verbs: what people send a run",
        "",
        "Every verb is defined once, in `waypoint.protocol.verbs.VERBS`: its payload, the",
        "[console role](console.md) it needs, how it reaches the run, its receipt and its ledger",
        "line. The client has a function of each verb's name (`waypoint.client.runs.<verb>`,",
        "taking the run, what it is about, then `reviewer=`, `reason=`, `timeout=` by name, and",
        "answering with one `Receipt`); the CLI command, the console route and the torture",
        "generator are built from the same entry, and this page is rendered from it (a test",
        "holds them equal). A verb sent while no worker is up goes as a signal: the receipt",
        "says `recorded=False`, and the run applies it (or records why not) when a worker picks",
        "it up.",
        "",
        "Every verb can be signed: with a reviewer's key (`signing_key=`, `WAYPOINT_DECISION_KEY`",
        "for the CLI, the console's own key) it carries the reviewer's signature",
        "([signed decisions](approvals.md#decisions)), and an agent with",
        "`signed_decisions=True` refuses it unsigned or badly signed: a verb sent to the run is",
        "checked by a worker against the reviewers' public keys before it applies, and a",
        "refusal is recorded under `ignored_signals` (an Update's sender hears it too). Two",
        "verbs are not messages to the run, so signed means something of their own:",
        "",
        "- `cancel` is Temporal's cancel, which a run cannot refuse (anyone with namespace",
        "  access can send one with `temporal workflow cancel`; Temporal's authorization guards",
        "  that). Waypoint's client signs it and puts the signature in the cancel's reason",
        "  (`cancelled by grace: why [signed at T: SIGNATURE]`), which Temporal records in the",
        "  run's history, where anyone holding the reviewer's public key can check it; the",
        "  client, CLI and console refuse to send an unsigned cancel to a run whose memo says",
        "  its agent takes signed decisions only.",
        "- `fork` starts a new run. Its `ForkSource` carries the reviewer and a signature made",
        "  for the fork's own workflow id (no chain: the fork has not started when it is",
        "  signed); the fork checks it on a worker, once it has loaded the source's spec and",
        "  before it takes anything from it, and fails `CannotFork` unsigned or badly signed.",
        "  Its first ledger line names the reviewer (`forked from R after turn N by grace",
        "  (signed)`).",
        "",
        "| verb | does | role | payload | sent as | receipt says | ledger | CLI | API |",
        "|---" * 9 + "|",
    ]
    for v in VERBS.values():
        sent = f"`{v.handler}` " + ("update, or signal" if v.update else "signal")
        sent = sent if v.handler else ("Temporal's cancel" if v.name == "cancel" else "a new run")
        route = f"`POST /api/runs/{{run}}/{v.name}`" if v.api else ""
        cells = [f"`{v.name}`", v.does, v.role, f"`{v.payload.__name__}`", sent]
        cells += [v.done, v.ledger, f"`waypoint {v.command}`", route]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    PAGE.write_text(page())
    sys.exit(0)
