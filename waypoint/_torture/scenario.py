"""A scenario from a seed: the model's replies, what operators do, faults and deploys.

Everything is plain data that round-trips through JSON, so a failing seed is written to a
file and replayed from it (`python bench/torture.py --replay FILE`), and shrunk by dropping
events one at a time while the failure persists.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from waypoint._torture.verbs import TORTURE

CALL_KINDS = ("pure", "read", "effect_key", "effect_reconcile", "approval", "client")
"""Tool calls a reply can make: `effect_key` deduplicates downstream on its key;
`effect_reconcile` does not (a blind retry would count twice) and reconciles instead."""
LATE_CALL_KINDS = ("subagent", "mcp")
"""A sub-agent (a child run that pays) and an MCP server's transfer (reconciled by a lookup
tool on the server). Drawn after everything else, so seeds kept their earlier events."""
REPLY_KINDS = ("calls", "max_tokens", "pause_turn", "thinking", "overflow")
"""What a model reply is before the last: a reply of text alone ends the run, so text ends a
scenario (`ending`), or a refusal does."""
OUTAGES = (429, 529, 401)
EFFECT_FAULTS = ("kill_before_commit", "kill_after_commit", "drop_after_commit", "slow")
"""Faults inside an effect tool: SIGKILL of the worker before or after the row is written,
the reply lost after the commit, a downstream slower than the tool timeout."""
THREAD_SHARE = 0.5
"""Of the `slow` effects, the share made `slow_thread`: the slow write runs in a thread
(`asyncio.to_thread`), which a timeout cannot stop. Drawn last, so seeds kept the rest."""
DECISIONS = ("approve", "stale_then_approve", "reject")
ANSWERS = ("answer", "bad_then_answer")
ACTIONS = (
    "kill",
    "term",
    "deploy_prompt",
    "deploy_description",
    "deploy_schema",
    "cancel",
    "correct",
    "policy_set",
    "watch",
    "fork",
    "server_kill",
    "deploy_build",
)
"""Things that happen at a moment of the run (once it has reached `at_turn`): worker SIGKILL
and SIGTERM, a deploy (the worker restarted on changed code), operator commands, the Temporal
server SIGKILLed and restarted on its state folder (the scenario then gets a server of its own),
a new build under worker versioning (a second worker, made current, the run moved onto it).
"""
SERVER_ACTIONS = ("server_kill", "deploy_build")
"""Drawn after the others, so adding them left every seed's earlier events as they were."""
LATER_ACTIONS = ("steer", "raise_limits", "deploy_check", "rerun")
"""A steer (sometimes of several KB), limits raised unprompted, `waypoint deploy check` of the
running build (it must find nothing broken), and once the run has ended a rerun of its
workflow id, driven to its end too. Drawn after everything else, so seeds kept the rest."""
LATER_SHARES = {"steer": 0.15, "raise_limits": 0.1, "deploy_check": 0.1, "rerun": 0.08}
ACTIONS += LATER_ACTIONS
STEER_SIZES = (4096, 16384)
"""The sizes of a large steer, in bytes: past the payload store's threshold and a turn's."""
PROMISE_ACTIONS = ("deploy_spec",)
"""A deploy of the `spec` build (prompt, policy, limits and every tool changed), so a replan
meets a changed build. Drawn after everything else (issue 48), as are forks after a
compaction and, in `turn` scenarios, a slow read beside a fresh one."""
ACTIONS += PROMISE_ACTIONS
NOTICE_SHARE = 0.3
"""Of the scenarios, those whose approvers are told of waits (`waypoint.testing.notices`):
drawn after everything else, the receiver `ok`, `flaky` (fails twice first) or `down`."""
RECEIVERS = ("ok", "flaky", "down")
FORM_START_SHARE = 0.3
"""Of the scenarios, those whose run a person starts on the console's start form (signed in,
with the session's CSRF token); the rest start it through the client. Drawn last of all, so
every seed keeps its earlier events."""
PROMISE_SHARES = {
    "deploy_spec": 0.1,
    "fork_after_compaction": 0.5,
    "slow_beside_fresh": 0.5,
    "moving": 0.6,
}
"""`fork_after_compaction` of the scenarios that compact; `slow_beside_fresh` of the `turn`
ones; `moving` of the `fresh` ones (the world moves)."""


@dataclass
class Call:
    """One tool call of a reply, and what happens to it."""

    kind: str
    ref: str
    """Unique in the scenario; the effect tools record it downstream next to the effect key."""
    decision: str = ""
    """For `approval`: one of DECISIONS. For `client`: one of ANSWERS."""
    fault: str = ""
    """For effects: one of EFFECT_FAULTS or `slow_thread`, or empty."""


@dataclass
class Reply:
    """One model reply (one position of the conversation)."""

    kind: str
    calls: list[Call] = field(default_factory=list)
    outage: int = 0
    """An HTTP status the API answers first, `outage_times` times."""
    outage_times: int = 0


@dataclass
class Action:
    """An operator action, fault or deploy once the run has reached `at_turn`."""

    kind: str
    at_turn: int
    delay: float = 0.0
    """Seconds after the turn is seen, so the moment falls anywhere inside the turn."""
    size: int = 0
    """For `steer`: the message's length in bytes (0: a short one)."""


FLAGS = {
    "store": "store:objects",
    "signed": "signed:decisions",
    "latency": "latency:streamed",
    "server": "server:web_search",
    "console": "console:http",
    "turn": "durability:turn",
    "fresh": "fresh:lookup",
    "moving": "world:moving",
    "namespaced": "worker:new_namespace",
    "form_start": "start:form",
}
"""A scenario's on-or-off features, by the event kind each counts as in the soak's table."""


@dataclass
class Scenario:
    """What one seed plays; `run_scenario` runs it, `check` judges it."""

    seed: int
    replies: list[Reply]
    actions: list[Action] = field(default_factory=list)
    ending: str = "text"
    """The last reply: `text` (end_turn) or `refusal`."""
    on_change: str = "refuse"
    max_turns: int | None = None
    """A turn limit below the scenario's length parks the run; the runner raises it."""
    max_cost_usd: float | None = None
    history_events: int | None = None
    """A small history budget: the run continues-as-new (and compacts) often."""
    crowd: bool = True
    """With a budget, each waiting approval and each park (an unclear effect, an outage, a
    changed tool, a limit) is first crowded with refused decisions, so the run hands over as it
    waits; a regression saved for its compaction turns it off."""
    store: bool = False
    """Payloads above a small threshold go to the object store, so history holds references."""
    signed: bool = False
    """The agent accepts signed decisions only; the driver signs its own, and replays the first
    run's signed approvals onto a rerun, which must refuse them."""
    latency: float = 0.0
    """Seconds between the streamed events of every model answer, so operator actions land
    while a call is in flight."""
    server: bool = False
    """Claude searched the web in every reply with calls (a `server_tool_use` and its
    `web_search_tool_result`) and paused mid-search in a `pause_turn`: the blocks must survive
    kills, continue-as-new, compaction and forks, sent back as they came."""
    turn: bool = False
    """The run's durability is `turn`: a reply's ungated pure and read calls run as local
    activities, saved together, under every kill and restart."""
    fresh: bool = False
    """The agent's `lookup` holds for 2 s (`fresh_for`): an effect after a kill, an outage or
    a slow approval reads it again as a step of its own."""
    moving: bool = False
    """In a `fresh` scenario, the world moves: `lookup`'s quote rises every few seconds, so a
    read again after a wait may differ, and a fork meets its source's later values."""
    console: bool = False
    """The driver decides, answers, resolves and steers through a real `waypoint console` over
    HTTP (`waypoint._torture.console_channel`), which signs for it in a `signed` scenario."""
    namespaced: bool = False
    """The worker, and each restart of it, runs in a pid namespace of its own with its own
    `/proc`, as a container restarted in its pod does, the attempt journal on the folder they
    share (`waypoint.testing.namespaces`); where this machine cannot (not root), a plain
    process, and the outcome says so."""
    notices: str = ""
    """One of RECEIVERS: the approvers' and the lead's channels get the run's notices, one of
    them from a receiver that accepts, fails twice first, or never accepts; '': no plan."""
    form_start: bool = False
    """The run is started on the console's start form (`waypoint._torture.starts`), with the
    limits, history budget and durability drawn; else through the client."""

    def kinds(self) -> dict[str, int]:
        """How many events of each kind the scenario holds, for the soak's table."""
        counts: Counter[str] = Counter()
        for r in self.replies:
            counts[f"reply:{r.kind}"] += 1
            if r.outage:
                counts[f"outage:{r.outage}"] += 1
            for c in r.calls:
                counts[f"call:{c.kind}"] += 1
                if c.decision:
                    counts[f"decision:{c.decision}"] += 1
                if c.fault:
                    counts[f"fault:{c.fault}"] += 1
        counts[f"ending:{self.ending}"] += 1
        for a in self.actions:
            counts[f"action:{a.kind}"] += 1
            if a.size:
                counts["action:steer_large"] += 1
        compacts = self.history_events is not None
        on = {
            "limit:max_turns": self.max_turns is not None,
            "limit:max_cost_usd": self.max_cost_usd is not None,
            "long:continue_as_new": compacts,
            **{kind: bool(getattr(self, flag)) for flag, kind in FLAGS.items()},
            "notices:receiver": bool(self.notices),
            "fork:after_compaction": compacts and any(a.kind == "fork" for a in self.actions),
            f"on_change:{self.on_change}": True,
        }
        counts.update(kind for kind, held in on.items() if held)
        return dict(counts)

    def to_json(self) -> str:
        """The scenario as a file's text."""
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> Scenario:
        """Read a scenario written by `to_json`."""
        raw: dict[str, Any] = json.loads(text)
        replies = [
            Reply(**{**r, "calls": [Call(**c) for c in r["calls"]]}) for r in raw.pop("replies")
        ]
        actions = [Action(**a) for a in raw.pop("actions")]
        return cls(replies=replies, actions=actions, **raw)

    @classmethod
    def load(cls, path: Path) -> Scenario:
        """Read a scenario file."""
        return cls.from_json(path.read_text())

    def calls(self) -> list[Call]:
        """Every call of every reply."""
        return [c for r in self.replies for c in r.calls]

    def own_server(self) -> bool:
        """A scenario that kills the Temporal server runs on a server of its own."""
        return any(a.kind == "server_kill" for a in self.actions)

    def versioned(self) -> bool:
        """A scenario that deploys a new build runs its workers under worker versioning."""
        return any(a.kind == "deploy_build" for a in self.actions)


def generate(seed: int, *, size: int | None = None) -> Scenario:
    """The scenario of `seed`: a few replies with parallel calls, actions, faults, limits."""
    rng = random.Random(seed)
    n = size or rng.randint(2, 6)
    replies: list[Reply] = []
    refs = 0
    for _ in range(n):
        kind = rng.choices(REPLY_KINDS, weights=(8, 1, 1, 1, 1))[0]
        reply = Reply(kind)
        if kind in ("calls", "max_tokens", "thinking", "overflow"):
            for _ in range(rng.choices((1, 2, 3), weights=(3, 3, 2))[0]):
                refs += 1
                call = Call(rng.choice(CALL_KINDS), f"r{refs}")
                if call.kind == "approval":
                    call.decision = rng.choice(DECISIONS)
                elif call.kind == "client":
                    call.decision = rng.choice(ANSWERS)
                if call.kind.startswith("effect") or call.kind == "approval":
                    call.fault = rng.choice(("",) * 3 + EFFECT_FAULTS)
                reply.calls.append(call)
        if rng.random() < 0.25:
            reply.outage = rng.choice(OUTAGES)
            reply.outage_times = 1 if reply.outage == 401 else rng.randint(1, 3)
        replies.append(reply)
    first = tuple(a for a in ACTIONS if a not in SERVER_ACTIONS + LATER_ACTIONS + PROMISE_ACTIONS)
    actions = [
        Action(rng.choice(first), rng.randint(1, n), round(rng.uniform(0, 0.6), 2))
        for _ in range(rng.choices((0, 1, 2, 3), weights=(2, 4, 3, 1))[0])
    ]
    scenario = Scenario(
        seed=seed,
        replies=replies,
        actions=actions,
        ending=rng.choices(("text", "refusal"), weights=(9, 1))[0],
        on_change=rng.choice(("refuse", "replan")),
    )
    if rng.random() < 0.2:
        scenario.max_turns = rng.randint(1, n)
    if rng.random() < 0.2:
        scenario.max_cost_usd = round(rng.uniform(0.02, 0.08), 3)
    if rng.random() < 0.2:
        scenario.history_events = rng.choice((60, 120))
    scenario.store = rng.random() < 0.25
    if rng.random() < 0.1:
        scenario.actions.append(Action("server_kill", rng.randint(1, n), round(rng.random(), 2)))
    calling = [r for r in replies if r.calls]
    for kind in LATE_CALL_KINDS:
        if calling and rng.random() < 0.2:
            refs += 1
            rng.choice(calling).calls.append(Call(kind, f"r{refs}"))
    if rng.random() < 0.1:
        scenario.actions.append(Action("deploy_build", rng.randint(1, n), round(rng.random(), 2)))
    for call in scenario.calls():
        if call.fault == "slow" and rng.random() < THREAD_SHARE:
            call.fault = "slow_thread"
    for kind, share in LATER_SHARES.items():
        if rng.random() < share:
            action = Action(kind, rng.randint(1, n), round(rng.random(), 2))
            if kind == "steer" and rng.random() < 0.3:
                action.size = rng.choice(STEER_SIZES)
            scenario.actions.append(action)
    scenario.signed = rng.random() < 0.15
    if rng.random() < 0.3:
        scenario.latency = round(rng.uniform(0.05, 0.25), 2)
    scenario.server = rng.random() < 0.2
    scenario.console = rng.random() < 0.2
    scenario.turn = rng.random() < 0.4
    scenario.fresh = rng.random() < 0.3
    _promises(rng, scenario, refs)  # drawn after the rest: every seed keeps its earlier events
    scenario.namespaced = rng.random() < 0.15  # drawn after the rest: seeds keep their events
    for verb in (v for v in TORTURE if v.share):  # drawn last: seeds keep their earlier events
        if rng.random() < verb.share:
            scenario.actions.append(Action(verb.kind, rng.randint(1, n), round(rng.random(), 2)))
    if rng.random() < NOTICE_SHARE:  # after the verbs: every seed keeps its earlier events
        scenario.notices = rng.choice(RECEIVERS)
    scenario.form_start = rng.random() < FORM_START_SHARE  # last: seeds keep their events
    return scenario


def _promises(rng: random.Random, scenario: Scenario, refs: int) -> None:
    """Issue 48's meetings: a changed build replanned, forks after compactions, slow reads.

    A `spec` deploy restarts the worker on a build whose prompt, policy, limits and tools all
    changed; a scenario that compacts (a small history budget) forks late, after a compacted
    turn, and holds fresh reads; a `turn` scenario's reply reads slowly beside a fresh read,
    and a later reply pays on it.
    """
    n = len(scenario.replies)
    if rng.random() < PROMISE_SHARES["deploy_spec"]:
        scenario.actions.append(Action("deploy_spec", rng.randint(1, n), round(rng.random(), 2)))
    calling = [i for i, r in enumerate(scenario.replies) if r.calls]
    compacts = scenario.history_events is not None
    if compacts and calling and rng.random() < PROMISE_SHARES["fork_after_compaction"]:
        # A read to compact, a late fork (of a turn a compaction left), an effect after it.
        scenario.fresh = True
        scenario.latency = max(scenario.latency, 0.2)  # the fork's effect comes past the window
        scenario.replies[calling[0]].calls.insert(0, Call("read", f"r{refs + 1}"))
        scenario.replies[calling[-1]].calls.append(Call("effect_reconcile", f"r{refs + 2}"))
        refs += 2
        at = max(2, calling[-1] + 1)
        scenario.actions.append(Action("fork", at, round(rng.uniform(0, 0.3), 2)))
    calling = [i for i, r in enumerate(scenario.replies) if r.calls and i < n - 1]
    if scenario.turn and calling and rng.random() < PROMISE_SHARES["slow_beside_fresh"]:
        scenario.fresh = True
        at = rng.choice(calling)
        fresh, slow = Call("read", f"r{refs + 1}"), Call("slow_read", f"r{refs + 2}")
        scenario.replies[at].calls += [fresh, slow]
        scenario.replies[at + 1].calls.append(Call("effect_reconcile", f"r{refs + 3}"))
    scenario.moving = scenario.fresh and rng.random() < PROMISE_SHARES["moving"]
