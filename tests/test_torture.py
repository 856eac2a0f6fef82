"""The torture test's CI slice: fixed seeds that cover every event kind, invariants checked.

`python bench/torture.py --seeds A..B` is the long soak; these seeds were chosen (greedily,
from the generator alone) so that together they hold every kind of event it makes, each server
kill and new build firing; seed 1 is kept as found: its slow `pay` was written twice, because
nothing stopped the first try after its timeout (tests/test_reconcile.py keeps it small);
seed 3151 writes its slow `pay` from a thread, which no timeout stops (tests/test_effect_overlap.py
keeps it small).
Scenario files under `tests/torture_regressions/` are soak failures, each replayed by a test
(`seed128.json`, as found, only by `bench/torture.py --replay`: its shrunk file is the test's).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from bench.torture_mutants import MUTANTS
from tests.cli import ROOT
from tests.support.commands import long_command
from tests.torture_api import TortureAPI
from waypoint._torture.agent import NAME, agents
from waypoint._torture.evidence import Execution, Sent, ToolStep
from waypoint._torture.invariants import INVARIANTS
from waypoint._torture.play import replay_command
from waypoint._torture.promises import promises
from waypoint._torture.scenario import Action, Call, Reply, Scenario, generate
from waypoint._torture.shrink import shrink_candidates
from waypoint._torture.soak import Verdict, play, shrink
from waypoint._torture.starts import drawn, started_as_drawn
from waypoint.client import runs
from waypoint.demo.agent import DEMO_TASK
from waypoint.protocol import AgentSpec, AgentState, LimitsOverride, RunInput
from waypoint.stores.payloads import data_converter
from waypoint.testing.namespaces import why_not

CI_SEEDS = (1, 1806, 2194, 2963, 1364, 2333, 3444, 3151)
LATER = Scenario(
    seed=-40,
    replies=[
        Reply("calls", [Call("approval", "r1", decision="approve")]),
        Reply("calls", [Call("read", "r2")]),
    ],
    actions=[
        Action("steer", 1, 0.2, size=4096),
        Action("pause", 1, 0.25),
        Action("raise_limits", 1, 0.3),
        Action("deploy_check", 2),
        Action("rerun", 2),
        Action("deploy_spec", 2),
    ],
    signed=True,
    latency=0.1,
    console=True,
    fresh=True,
    moving=True,
    notices="flaky",
)
"""The later events at once: a large steer while the approval waits, a pause (the approval is
decided while paused, the run unpaused 1.5 s later), limits raised unprompted,
a deploy check, and a rerun of the ended run onto which the first run's signed approval is
replayed (it must be refused), every answer streamed slowly, every decision and steer sent
through a console that signs them; and a deploy of the `spec` build (prompt, policy, limits and
tools changed), which the read after it replans over: the run keeps its own prompt and policy;
and the approvers told of each wait by a receiver that fails twice before it accepts."""

NAMESPACED = Scenario(
    seed=-49,
    replies=[
        Reply("calls", [Call("effect_reconcile", "r1", fault="kill_before_commit")]),
        Reply("calls", [Call("effect_key", "r2"), Call("read", "r3")]),
    ],
    actions=[Action("kill", 2, 0.1)],
    namespaced=True,
)
"""A worker killed inside an effect and again at a moment of turn 2, each restart in a new pid
namespace with its own `/proc`, the attempt journal on one folder as a pod's volume: every
invariant holds (a live worker's step is never retried beside it). With the torture's 2 s
heartbeat timeouts a cold start here often comes after Temporal's own retry;
tests/test_journal_namespaces.py shows the journal freeing across namespaces."""


def test_ci_seeds_cover_every_event_kind_the_generator_makes() -> None:
    every: set[str] = set()
    for seed in range(1, 5000):
        every |= set(generate(seed).kinds())
    hand_written = {*LATER.kinds(), *NAMESPACED.kinds()}
    covered = {k for s in CI_SEEDS for k in generate(s).kinds()} | hand_written
    assert every - covered == set()


def test_a_scenario_file_round_trips_and_shrinks_to_smaller_scenarios() -> None:
    scenario = generate(1806)
    assert Scenario.from_json(scenario.to_json()) == scenario
    smaller = shrink_candidates(scenario)
    assert smaller and all(s != scenario for s in smaller)
    assert all(sum(s.kinds().values()) <= sum(scenario.kinds().values()) for s in smaller)


def test_started_as_drawn_holds_the_first_input_of_the_first_chain_to_the_draw() -> None:
    """Issue 52: a run started on the console's form or by the client must begin with what the
    scenario drew; a limit lost on the way breaks `started_as_drawn`, naming it; a rerun's or
    a continued execution's input is not the start judged; a run no history shows breaks it."""
    given = drawn(generate(2194))
    history = given.history_override
    assert generate(2194).form_start and history and history.max_events == 2000
    lost = given.model_copy(update={"limits_override": LimitsOverride(max_turns=99)})
    first = Execution("wf", "r1", "r1", start=1, input=given)
    assert started_as_drawn("wf", given, [first]) == []
    broke = started_as_drawn("wf", given, [Execution("wf", "r1", "r1", start=1, input=lost)])
    assert len(broke) == 1 and broke[0].startswith("started_as_drawn: wf began with limits_o")
    later = [Execution("wf", "r2", "r1", start=2, input=lost), Execution("wf", "r9", "r9", 9, lost)]
    assert started_as_drawn("wf", given, [*later, first]) == []
    assert started_as_drawn("wf", given, later[:1]) == [
        "started_as_drawn: no history of wf shows how it started"
    ]


@pytest.mark.slow
@pytest.mark.parametrize("seed", CI_SEEDS)
async def test_seeded_scenario_keeps_every_invariant(
    client: Client, tmp_path: Path, seed: int
) -> None:
    store = tmp_path / "payloads"  # what `store` scenarios' workers offload to
    folder = tmp_path / f"seed-{seed}"
    await keeps_every_invariant(stored(client, store), generate(seed), folder, store=store)


@pytest.mark.slow
async def test_steer_signed_rerun_and_latency_keep_every_invariant(
    client: Client, tmp_path: Path
) -> None:
    outcome = (await keeps_every_invariant(client, LATER, tmp_path / "later")).outcome
    assert outcome is not None
    assert outcome.reruns and not outcome.deploy_check, outcome
    assert any("signed approval replayed" in n for n in outcome.notes), outcome.notes
    assert {"steer", "raise_limits", "deploy_check", "rerun"} <= set(outcome.faults), outcome
    first = await runs.handle(client, outcome.run_ids[0]).result()
    deciders = {r.decided_by for r in first.ledger if r.kind == "tool" and r.decided_by}
    assert deciders and all(d.startswith("torture via console (signed") for d in deciders)


@pytest.mark.slow
@pytest.mark.skipif(bool(why_not()), reason=why_not() or "runs")
async def test_restarts_in_new_pid_namespaces_keep_every_invariant(
    client: Client, tmp_path: Path
) -> None:
    outcome = (await keeps_every_invariant(client, NAMESPACED, tmp_path / "namespaced")).outcome
    assert outcome is not None and outcome.restarts >= 2, outcome
    assert not any("namespace" in n for n in outcome.notes), outcome.notes
    log = (tmp_path / "namespaced" / "worker.log").read_text()
    assert log.count("worker on queue") == outcome.restarts + 1


@pytest.mark.slow
async def test_seed_92_a_paused_then_cut_off_turn_under_thinking_ends(
    client: Client, tmp_path: Path
) -> None:
    """Seed 92, shrunk: after a compaction, under adaptive thinking, a `pause_turn` reply and a
    continuation cut off at max_tokens with a call, neither with thinking. The tool loop's first
    reply opens with thinking, all the API asks; the fake asked it of the last reply too, and
    the run parked `model_unavailable` on that 400 while the driver resumed it 64 times.
    test_compaction_edges.py (the tail a compaction keeps) and test_claude_run.py
    (`request_invalid`) keep what else it showed.

    The soak's file also carried kills, drops, a 429 outage and a stale approval (14 s alone);
    without them (6 s) it still fails `stuck` when the fake checks the last assistant message
    instead of the turn's first, and it still compacts: the approvals' events fill the history.
    It plays with `crowd` off: crowded approvals (issue 52) make the run hand over as it waits,
    uncompacted, and it would end before a turn's handover compacts it.
    """
    store = tmp_path / "payloads"
    client = stored(client, store)
    verdict = await keeps_every_invariant(client, "seed92", tmp_path / "seed-92", store=store)
    assert verdict.outcome is not None
    result = await runs.handle(client, verdict.outcome.run_ids[0]).result()
    assert result.steps_archived > 0, "the run never compacted: the scenario lost its point"


def stored(client: Client, store: Path) -> Client:
    """The session's connection, with large payloads kept in `store` as the soak's were."""
    return Client(
        client.service_client, namespace=client.namespace, data_converter=data_converter(store)
    )


async def keeps_every_invariant(
    client: Client, scenario: Scenario | str, folder: Path, **options: Any
) -> Verdict:
    """Play `scenario` (a name: `torture_regressions/NAME.json`) in `folder`, `options` going to
    `play`: no invariant may break, and a break says how to replay it."""
    path = folder / "scenario.json"
    if isinstance(scenario, str):
        path = Path(__file__).parent / "torture_regressions" / f"{scenario}.json"
        scenario = Scenario.load(path)
    verdict = await play(client, scenario, folder, TortureAPI, **options)
    assert not verdict.violations, f"{verdict.violations}\nreplay: {replay_command(path)}"
    return verdict


def count_nothing(key: str) -> int:
    """A downstream that never saw anything: what `waypoint torture` must call a violation."""
    return 0


def torture_cli(
    env: WorkflowEnvironment, folder: Path, counter: str, kills: int
) -> subprocess.CompletedProcess[str]:
    return long_command(
        env,
        *["torture", "--app", "waypoint.demo:agents", "--agent", "vendor_onboarding"],
        *["--task", DEMO_TASK, "--count-effects", counter, "--seeds", "4", "--kills", str(kills)],
        WAYPOINT_DEMO_DIR=str(folder),
        WAYPOINT_SCRIPTED_LATENCY="0.3",
    )


@pytest.mark.slow
async def test_waypoint_torture_stops_a_users_own_agent_and_counts_its_effects(
    env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """Seed 4 draws two SIGKILLs and a SIGTERM; the vendor demo's effects each happen once."""
    done = torture_cli(env, tmp_path / "ok", "waypoint.demo.killtest:count_effects", 3)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "seed 4: OK, 3 stops" in done.stdout
    assert "SIGTERM after" in done.stdout and "VIOLATION" not in done.stdout

    lying = torture_cli(env, tmp_path / "lie", "tests.test_torture:count_nothing", 1)
    assert lying.returncode == 1, lying.stdout + lying.stderr
    assert "seed 4: FAILED, 1 stops" in lying.stdout and "effect happened 0 times" in lying.stdout


async def test_a_scenario_the_harness_cannot_judge_is_counted_and_the_soak_goes_on(
    client: Client, tmp_path: Path
) -> None:
    """Seen in a soak: its dev server failed under load and the whole soak died unprinted."""
    from waypoint._torture.soak import soak

    def broken_api(scenario: Scenario) -> TortureAPI:
        raise ConnectionError("the soak's server went away")

    chosen = [s for s in map(generate, range(1, 50)) if not s.own_server()][:2]
    table = await soak(client, chosen, tmp_path, broken_api, workers=2)
    assert table.scenarios == 2 and table.violations["harness"] == 2
    assert "| scenarios the harness could not judge | 2 |" in table.render()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["seed128-shrunk", "seed157", "seed227"])
async def test_soak_seeds_cancelled_during_a_model_step_bill_every_answer(
    client: Client, tmp_path: Path, name: str
) -> None:
    """Seeds 128, 157, 227 of the soak of seeds 61..288 broke `billing`: a cancel met a model
    step. In seed 128 the step took it for an outage, the run parked in `model_unavailable`,
    the driver's `resume` asked again and the first answer, billed, was in no ledger (3390
    tokens billed, 2458 in the ledger; `seed128-shrunk` is what the soak shrank it to). A cancel
    now ends the run with what its step was billed for counted, and `billing` checks a
    cancelled run too, from its memo. Timing-bound: tests/test_model_outages.py holds each way
    a cancel meets a model step deterministically. `seed128.json`, as found, is left to
    `bench/torture.py --replay`: its shrunk file holds the same meeting, and the CI slice's time
    went to seed 524101 (issue 48).
    """
    await keeps_every_invariant(stored(client, tmp_path / "payloads"), name, tmp_path / name)


@pytest.mark.slow
async def test_seed_348_a_turn_that_opens_paused_under_thinking_ends(
    client: Client, tmp_path: Path
) -> None:
    """Seed 348 of the soak of seeds 289..360: a turn whose first reply is a `pause_turn`, then
    a continuation with a call, under thinking. The fake paused without thinking where Claude
    opens a turn with it, so the tool loop's first reply had none and the next request was
    refused (`request_invalid`, "messages.1.content.0.type: Expected `thinking`"). The fake now
    opens a turn with thinking whatever the reply's stop reason; the product needed no change:
    it keeps the paused reply, thinking first, as the loop's first message."""
    client = stored(client, tmp_path / "payloads")
    await keeps_every_invariant(client, "seed348", tmp_path / "seed-348")


@pytest.mark.slow
async def test_seed_576_a_fork_racing_its_sources_compaction_breaks_nothing(
    client: Client, tmp_path: Path
) -> None:
    """Seed 576 of the soak of seeds 501..1000, as the soak shrank it: a fork after turn 2 of a
    run whose overflowing turns are compacted while its workers are killed. The source compacted
    turns 1-2 after `fork` checked them and before the fork loaded them, and the fork failed
    with `CannotFork` having run nothing: documented on `waypoint fork`, and the one failure the
    `failed` invariant excuses (for forks only). Timing-bound: the race may not recur; every
    other invariant must hold either way."""
    await keeps_every_invariant(client, "seed576", tmp_path / "seed-576")


@pytest.mark.slow
async def test_a_tool_changed_under_refuse_parks_and_the_driver_replans_it(
    client: Client, tmp_path: Path
) -> None:
    """A deploy changes the `lookup` schema after turn 1 under `on_change="refuse"`: the next
    call parks in `tool_changed` (it failed the run before), the driver says `resume --replan`,
    and every invariant holds. Generated seeds rarely call the changed tool after the deploy."""
    reads = [Reply("calls", [Call("read", f"r{i}")]) for i in range(1, 4)]
    scenario = Scenario(
        seed=-30, replies=reads, actions=[Action("deploy_schema", at_turn=1)], on_change="refuse"
    )
    verdict = await keeps_every_invariant(client, scenario, tmp_path / "changed")
    assert verdict.outcome is not None
    assert verdict.outcome.faults.get("resume_replan_tool_changed", 0) >= 1, verdict.outcome


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.invariant)
def test_each_mutant_still_finds_the_line_it_breaks(mutant) -> None:
    """`bench/torture_mutants.py` shows each invariant failing by editing one line; a refactor
    that moves the line would leave the mutant unplayable (as the refusal's move to
    _workflows/output.py once did), so each line must still occur exactly once."""
    assert (ROOT / mutant.path).read_text().count(mutant.old) == 1, mutant.name


DOCS = ROOT / "docs"
SAYS_NEVER = re.compile(r"\bnever\b|at most once", re.IGNORECASE)
OF_EFFECTS = re.compile(r"effect|approv|\bread|re-read", re.IGNORECASE)


def _words(text: str) -> str:
    return " ".join(text.split())


def _table(name: str) -> list[list[str]]:
    """The rows of a table of docs/torture.md under `<!-- promises: NAME -->`."""
    text = (DOCS / "torture.md").read_text()
    block = text.split(f"<!-- promises: {name} -->", 1)[1].strip().split("\n\n", 1)[0]
    return [
        [c.strip() for c in line.strip().strip("|").split("|")] for line in block.splitlines()[2:]
    ]


def test_every_promise_the_docs_make_of_effects_approvals_and_reads_is_held_by_an_invariant() -> (
    None
):
    """Issue 48.5: docs/torture.md's table names, for each promise, the invariant that holds it
    and the scenario kinds that exercise it; each quote is still in its page, each invariant is
    one `check` judges, each kind one the generator draws. Every sentence of docs/ that says
    "never" or "at most once" of an effect, an approval or a read holds a quote of that table
    or of the one naming why no scenario can break it (and where it is held instead)."""
    drawn: set[str] = set()
    for seed in range(1, 3000):
        drawn |= set(generate(seed).kinds())
    held, other = _table("held"), _table("not a scenario's")
    assert len(held) >= 20 and all(len(row) == 4 for row in held + other), held + other
    for page, promise, invariants, kinds in held:
        assert _words(promise) in _words((DOCS / page).read_text()), (page, promise)
        named = set(re.findall(r"`(\w+)`", invariants))
        assert named and named <= set(INVARIANTS), (promise, named - set(INVARIANTS))
        exercised = {k.strip() for k in kinds.split(",")}
        assert exercised <= drawn, (promise, exercised - drawn)
    for page, sentence, _, where in other:
        assert _words(sentence) in _words((DOCS / page).read_text()), (page, sentence)
        assert (ROOT / where).exists(), where
    quotes = [(page, _words(q)) for page, q, *_ in held + other]
    for path in sorted(DOCS.glob("*.md")):
        if path.name == "torture.md":
            continue
        for sentence in re.split(r"(?<=[.;:!?])\s+(?=[A-Z`*(])", _words(path.read_text())):
            if SAYS_NEVER.search(sentence) and OF_EFFECTS.search(sentence):
                assert any(p == path.name and q in sentence for p, q in quotes), (
                    f"{path.name}: a promise docs/torture.md's tables do not hold: {sentence[:200]}"
                )


async def test_the_shrinker_keeps_a_smaller_scenario_only_if_it_fails_every_replay(
    tmp_path: Path,
) -> None:
    """Seed 524101's shrink kept a smaller file that had failed once and then passed most
    times: a candidate must now break the same invariant in three plays in a row."""
    scenario = Scenario(seed=-60, replies=[Reply("calls", [Call("read", f"r{i}")]) for i in (1, 2)])
    plays: list[Scenario] = []
    broke = ["approval_gate: ran pay"]

    async def flaky(client: object, candidate: Scenario, *_: object, **__: object) -> Verdict:
        plays.append(candidate)  # a smaller one fails every other play
        return Verdict(candidate, broke if len(plays) % 2 else [])

    async def steady(client: object, candidate: Scenario, *_: object, **__: object) -> Verdict:
        plays.append(candidate)
        return Verdict(candidate, broke)

    start = Verdict(scenario, broke)
    nobody = cast(Client, None)  # the players never reach a server
    kept = await shrink(nobody, start, tmp_path, TortureAPI, player=flaky)
    assert kept.scenario == scenario and len(plays) == 4, "a candidate that passed was kept"
    plays.clear()
    kept = await shrink(nobody, start, tmp_path, TortureAPI, player=steady)
    assert len(kept.scenario.replies) == 1 and len(plays) == 3


@pytest.mark.slow
async def test_seed_524101_a_policy_set_while_reads_are_read_again_gates_the_pay(
    client: Client, tmp_path: Path
) -> None:
    """Seed 524101 (issue 48.1), as generated: a run holding fresh reads parks at its turn
    limit, is raised, and gets a `policy set` that makes `pay` ask 0.13 s into turn 5 while its
    reads are read again; `t5.tool.1.pay` ran with no approval (`approval_gate`), in about half
    the plays on the commit that found it. The gate must decide after the last wait."""
    store = tmp_path / "payloads"
    client = stored(client, store)
    await keeps_every_invariant(client, "seed524101", tmp_path / "seed-524101", store=store)


def _spec_of(folder: Path, build: str = "") -> AgentSpec:
    folder.mkdir(parents=True, exist_ok=True)
    scenario = Scenario(seed=-61, replies=[], fresh=True, actions=[Action("deploy_spec", 9)])
    (folder / "scenario.json").write_text(scenario.to_json())
    return agents(folder, build)[0].spec("anthropic")


def _sent(step_id: str, at: float, spec: AgentSpec) -> Sent:
    settings = spec.settings.model_dump(mode="json")
    return Sent(step_id, at, "turn", spec.system, spec.model, settings)


def test_the_promises_judge_what_an_effect_acted_on_and_what_a_replan_took(
    tmp_path: Path,
) -> None:
    """`waypoint._torture.promises` on evidence made by hand: a pay 4 s after the quote it holds
    (2 s window, never read again) breaks `fresh_reads`; read again unchanged it passes; read
    again changed it breaks; a fork that pays on its source's quote, read again against a value
    its source read after the fork point, breaks `fork_reads`; a model call sent the changed
    build's prompt after a replan breaks `replan_keeps_spec`."""
    spec = _spec_of(tmp_path / "run")
    start = Execution("wf", "c1", "c1", start=1, specs=[("t0.spec", spec)])
    start.sent = [_sent("t1.model", 100.0, spec), _sent("t2.model", 101.0, spec)]
    start.tools = [
        ToolStep(1, "t1.tool.1.lookup", "lookup", {}, True, 100.2, 100.3),
        ToolStep(2, "t2.tool.1.pay", "pay", {}, True, 104.3, 104.4),
    ]
    quote = ("wf", "c1", "t1.tool.1.lookup", "lookup", "x", "at 100", 100.3)
    keys = ["wf/c1/t2.tool.1.pay"]
    written = {keys[0]: [104.35]}
    stale = promises([start], [quote], written, keys)
    assert len(stale) == 1 and stale[0].startswith("fresh_reads: wf t2.tool.1.pay was sched")
    again = ("wf", "c1", "t1.tool.1.lookup.fresh1", "lookup", "x", "at 100", 104.2)
    assert promises([start], [quote, again], written, keys) == []
    # A killed worker's task was lost after the clock the run judged its reads by (104.0): the
    # refresh it made after that clock (104.2) is what the pay acted on (soak seed 90006).
    start.clocks, start.lost_tasks = [104.0], [104.25]
    assert promises([start], [quote, again], written, keys) == []
    start.clocks, start.lost_tasks = [], []
    changed = (*again[:5], "at 120", 104.2)
    assert promises([start], [quote, changed], written, keys)[0].startswith("fresh_reads: wf t2")

    source_later = ("wf", "c1", "t1.tool.1.lookup.fresh1", "lookup", "x", "at 120", 101.5)
    fork_id = "wf-fork1-abcdef"
    fork = Execution(fork_id, "f1", "f1", start=2, sent=[_sent("t2.model", 102.0, spec)])
    fork.fork_state = AgentState(input=RunInput(agent=NAME, task="t"), spec=spec)
    fork.tools = [ToolStep(3, "t2.tool.1.pay", "pay", {}, True, 102.5, 102.6)]
    refresh = (fork_id, "f1", "t1.tool.1.lookup.fresh2", "lookup", "x", "at 120", 102.4)
    start.tools = start.tools[:1]  # the source paid nothing
    found = promises(
        [start, fork], [quote, source_later, refresh], {}, [f"{fork_id}/f1/t2.tool.1.pay"]
    )
    assert [f.split(":")[0] for f in found] == ["fork_reads"], found
    # The source could not read the quote again before the fork point and the model was told
    # (the note is in the fork's transcript): a fork paying on it unread acted knowing. Told
    # after the fork point, the fork was not (soak seed 90378).
    late = Execution(fork_id, "f1", "f1", start=2, sent=[_sent("t2.model", 102.0, spec)])
    late.fork_state, late.tools = fork.fork_state, [replace(fork.tools[0], scheduled=105.0)]
    for when, judged in ((100.6, []), (101.4, ["fork_reads"])):
        failed = ToolStep(5, "t1.tool.1.lookup.fresh1", "lookup", {}, False, when, 0.0)
        start.tools = [start.tools[0], failed]
        found = promises([start, late], [quote], {}, [f"{fork_id}/f1/t2.tool.1.pay"])
        assert [f.split(":")[0] for f in found] == judged, (when, found)
    start.tools = start.tools[:1]

    changed_build = _spec_of(tmp_path / "spec", "spec")
    start.specs.append(("t1.replan.2", changed_build))
    start.sent.append(_sent("t2.model", 103.0, changed_build))
    found = promises([start], [], {}, [])
    assert found and found[0].startswith("replan_keeps_spec: wf t2.model was sent a prompt"), found
