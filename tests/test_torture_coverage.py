"""The torture test grows with the product: every handler and CLI verb is sent or excused.

`waypoint._torture.coverage` maps each signal and update of `AgentWorkflow`, each query and
each `waypoint` verb to the scenario event that exercises it (or why none does). A new
handler or verb fails here until the generator draws an event for it, or it is excused.
"""

from __future__ import annotations

import typer
from temporalio import workflow

from waypoint._cli.app import app
from waypoint._torture.coverage import CLI, CLI_NOT_SENT, QUERIES, SENT
from waypoint._torture.invariants import INVARIANTS
from waypoint._torture.scenario import generate
from waypoint._torture.verbs import TORTURE
from waypoint._workflows import AgentWorkflow
from waypoint.protocol.verbs import VERBS

SEEDS = 2000
"""`generate` is pure: two thousand seeds take about a second."""


def verbs(cli: typer.Typer, prefix: str = "") -> set[str]:
    """Every command of the app, a sub-app's as `group verb`."""
    found = {prefix + (c.name or c.callback.__name__) for c in cli.registered_commands}  # type: ignore[union-attr]
    for group in cli.registered_groups:
        assert group.typer_instance is not None and group.name
        found |= verbs(group.typer_instance, f"{prefix}{group.name} ")
    return found


def test_every_signal_and_update_of_the_workflow_is_sent_by_the_driver() -> None:
    definition = workflow._Definition.must_from_class(AgentWorkflow)  # noqa: SLF001
    handlers = {n for n in (*definition.signals, *definition.updates) if n}
    assert handlers - SENT.keys() == set(), "map each new handler in waypoint/_torture/coverage.py"
    assert SENT.keys() - handlers == set(), "a mapped handler the workflow no longer has"
    queries = {n for n in definition.queries if n}
    assert queries ^ QUERIES.keys() == set()


def test_every_cli_verb_is_exercised_or_excused() -> None:
    found = verbs(app)
    assert CLI.keys() & CLI_NOT_SENT.keys() == set()
    assert found - CLI.keys() - CLI_NOT_SENT.keys() == set(), (
        "map each new verb in waypoint/_torture/coverage.py"
    )
    assert (CLI.keys() | CLI_NOT_SENT.keys()) - found == set(), "a mapped verb the CLI lost"


def test_every_mapped_event_is_drawn_by_the_generator() -> None:
    drawn: set[str] = set()
    for seed in range(1, SEEDS + 1):
        drawn |= set(generate(seed).kinds())
    assert {*SENT.values(), *CLI.values()} - drawn == set()


def test_every_simple_verb_is_driven_from_its_torture_entry() -> None:
    """A simple verb's draw, driver and invariant are its `waypoint._torture.verbs` entry."""
    simple = {v.torture for v in VERBS.values() if v.simple}
    assert simple == {t.event for t in TORTURE}, "add an entry to waypoint/_torture/verbs.py"
    judged = [t.invariant for t in TORTURE if t.judge]
    assert judged and set(judged) <= set(INVARIANTS)
