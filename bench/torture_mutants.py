"""Each torture invariant can fail: break the product on purpose and see which invariant says so.

    python bench/torture_mutants.py [--only NAME ...] [--workers 2] [--control]

Every mutant is one small edit to a copy of this checkout (the product is never touched), and a
scenario that reaches the edited line. The scenario is played with `bench/torture.py --replay`
against the copy; the table says which invariants reported a violation. `--control` also plays
each scenario against an unedited copy, which must report none. Exits non-zero when a mutant
escapes its invariant (or a control fails).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from waypoint._torture.scenario import Action, Call, Reply, Scenario  # noqa: E402

COPIED = ("waypoint", "tests", "bench")
VIOLATION = re.compile(r"^\| violations of (\w+) \| (\d+) \|$", re.MULTILINE)


@dataclass
class Mutant:
    """One deliberate defect, the invariant meant to catch it, and a scenario that reaches it."""

    name: str
    invariant: str
    path: str
    old: str
    new: str
    scenario: Scenario


def _one(*calls: Call, **reply: int) -> list[Reply]:
    return [Reply("calls", list(calls), **reply)]


KILL_AFTER_PAY = _one(Call("effect_reconcile", "r1", fault="kill_after_commit"))
LOST_REPLY = _one(Call("effect_reconcile", "r1", fault="drop_after_commit"))
READ = _one(Call("read", "r1"))


def _reads(n: int, first: int = 1) -> list[Reply]:
    return [Reply("calls", [Call("read", f"r{i}")]) for i in range(first, first + n)]


PAYS_AFTER_POLICY = [
    *_reads(2),
    *(Reply("calls", [Call("effect_reconcile", f"r{i}")]) for i in (3, 4, 5)),
    *_reads(1, 6),
]
"""Two reads, then a pay a turn: a fork after turn 2, 3 or 4 meets a pay first."""

SLOW_BESIDE_FRESH = [
    Reply("calls", [Call("read", "r1"), Call("slow_read", "r2")]),
    Reply("calls", [Call("effect_reconcile", "r3")]),
]
"""A fresh read beside a slow one, then a pay: with a slow answer between them (latency), the
pay comes past the window of the read its model step refreshed."""

MUTANTS = [
    Mutant(
        "a retried effect runs without asking downstream first",
        "effect_once",
        "waypoint/_activities/tools.py",
        'if tool.kind == "effect" and (ctx.attempt > 1 or call.reconcile_first):',
        "if False:",
        Scenario(seed=-1, replies=KILL_AFTER_PAY),
    ),
    Mutant(
        "a reconciled effect is reported as an error",
        "told_failed",
        "waypoint/_activities/tools.py",
        "content=_rendered(tool, found), attempt=ctx.attempt, reconciled=True\n",
        "content=_rendered(tool, found), attempt=ctx.attempt, reconciled=True, is_error=True\n",
        Scenario(seed=-2, replies=LOST_REPLY),
    ),
    Mutant(
        'a reconciled effect is reported "not run" (text, not marked an error)',
        "told_failed",
        "waypoint/_workflows/tool_steps.py",
        "outcome.reconciled\n                    return finish(outcome.content, "
        "outcome.is_error)\n",
        "outcome.reconciled\n                    return finish("
        '"It was not run." if outcome.reconciled else outcome.content, outcome.is_error)\n',
        Scenario(seed=-3, replies=LOST_REPLY),
    ),
    Mutant(
        "a stale approval signal raises instead of being refused",
        "workflow_task_failed",
        "waypoint/_workflows/decisions.py",
        'return "stale approval: the arguments have changed since they were reviewed"',
        'raise ValueError("stale approval")',
        Scenario(seed=-4, replies=_one(Call("approval", "r1", decision="stale_then_approve"))),
    ),
    Mutant(
        "the resume signal is recorded but does not resume",
        "stuck",
        "waypoint/_workflows/gates.py",
        "        self.s.resumes += 1\n",
        "        pass\n",
        Scenario(seed=-5, replies=_one(Call("read", "r1"), outage=529, outage_times=3)),
    ),
    Mutant(
        "a refusal fails the run instead of ending it refused",
        "failed",
        "waypoint/_workflows/output.py",
        'self.gates.set_state("refused", f"refusal: {s.stop_details}")',
        'raise ApplicationError(f"refusal: {s.stop_details}", non_retryable=True)',
        Scenario(seed=-6, replies=READ, ending="refusal"),
    ),
    Mutant(
        "one output token too many is recorded per model call",
        "billing",
        "waypoint/_providers/claude/convert.py",
        "output_tokens=usage.output_tokens or 0,",
        "output_tokens=(usage.output_tokens or 0) + 1,",
        Scenario(seed=-7, replies=READ),
    ),
    Mutant(
        "one output token too many, in a run whose worker was killed inside an effect",
        "billing",
        "waypoint/_providers/claude/convert.py",
        "output_tokens=usage.output_tokens or 0,",
        "output_tokens=(usage.output_tokens or 0) + 1,",
        Scenario(seed=-8, replies=KILL_AFTER_PAY),
    ),
    Mutant(
        "the cost budget is not checked before a call, in a run cancelled before it ends",
        "budget",
        "waypoint/_workflows/budget.py",
        "        if s.cost_usd + cost > budget:\n",
        "        if False:\n",
        Scenario(seed=-11, replies=_reads(8), actions=[Action("cancel", 7)], max_cost_usd=0.003),
    ),
    Mutant(
        "a reader follows the run by the stream's long-poll Update, recorded in its history",
        "read_wrote",
        "waypoint/client/events.py",
        "                result: PollResult = await handle.query(",
        "                result: PollResult = await handle.execute_update(",
        Scenario(seed=-19, replies=_reads(4), actions=[Action("watch", 2)]),
    ),
    Mutant(
        "a fork starts its totals at zero, dropping what its source spent up to the fork",
        "fork_billing",
        "waypoint/_workflows/operator.py",
        "total_tokens=archived.tokens + sum(r.tokens for r in ledger),",
        "total_tokens=archived.tokens,",
        Scenario(seed=-12, replies=_reads(4), actions=[Action("fork", 3)]),
    ),
    Mutant(
        "a fork drops the policy its source had in force at the fork point",
        "approval_gate",
        "waypoint/_workflows/operator.py",
        "policy=policy.at_fork(s, ledger),",
        "policy=type(s.policy)(),",
        Scenario(
            seed=-13,
            replies=PAYS_AFTER_POLICY,
            actions=[Action("policy_set", 1), Action("fork", 3)],
        ),
    ),
    Mutant(
        "an effect runs on its reads without reading the stale ones again",
        "fresh_reads",
        "waypoint/_workflows/freshness.py",
        "        self.untold += await self.refresh()\n",
        "        self.untold += []\n",
        Scenario(seed=-15, replies=SLOW_BESIDE_FRESH, fresh=True, latency=0.6),
    ),
    Mutant(
        "a fork holds none of its source's reads, so it never reads them again",
        "fork_reads",
        "waypoint/_workflows/operator.py",
        "observations=_reads_at(s, messages, after_turn),",
        "observations=[],",
        Scenario(
            seed=-16,
            replies=[*READ, *_one(Call("effect_reconcile", "r2")), *_reads(1, 3)],
            actions=[Action("fork", 2)],
            fresh=True,
            latency=0.3,
        ),
    ),
    Mutant(
        "the model is sent another prompt than the run's own from turn 2",
        "replan_keeps_spec",
        "waypoint/_workflows/model_steps.py",
        "            system=system,\n",
        '            system=system + (" Changed." if s.turn > 1 else ""),\n',
        Scenario(seed=-17, replies=_reads(2)),
    ),
    Mutant(
        "the run's own policy (its snapshot's) is ignored",
        "approval_gate",
        "waypoint/_workflows/policy.py",
        "    return s.spec.policy if s.spec is not None else None\n",
        "    return None\n",
        Scenario(
            seed=-18,
            replies=[*_one(Call("effect_key", "r1")), *_reads(1, 2)],
            actions=[Action("deploy_spec", 99)],  # never reached: the agent gets its policy
        ),
    ),
    Mutant(
        "the spend a model call reports when the run's cancel cuts it is not counted",
        "cancelled_spend",
        "waypoint/_workflows/cancel.py",
        "            s.total_tokens += spend.usage.total\n",
        "            pass\n",
        Scenario(seed=-14, replies=_reads(3), actions=[Action("cancel", 2, 1.0)], latency=0.3),
    ),
    Mutant(
        "a tool's activity id differs when the history is replayed",
        "replay",
        "waypoint/_workflows/tool_steps.py",
        '"activity_id": act_id,',
        '"activity_id": act_id + ("~r" if workflow.unsafe.is_replaying() else ""),',
        Scenario(seed=-9, replies=READ),
    ),
    Mutant(
        "a SIGTERMed worker exits 1",
        "worker_exit",
        "waypoint/_cli/server.py",
        "        await stop.wait()\n",
        "        await stop.wait()\n        raise SystemExit(1)\n",
        Scenario(seed=-10, replies=[*READ, *READ], actions=[Action("term", 1)]),
    ),
    Mutant(
        "a paused run goes on taking steps",
        "paused_still",
        "waypoint/_workflows/gates.py",
        "        if simple.holding(self.s) is not None:\n            self.settle()\n",
        "        if False:\n            self.settle()\n",
        Scenario(seed=-21, replies=_reads(8), actions=[Action("pause", 1)]),
    ),
    Mutant(
        "an approved call waits for the notices in flight",
        "notice_beside",
        "waypoint/_workflows/gates.py",
        "        return self.notices.approved(record, s.decisions.pop(step_id))\n",
        "        await workflow.wait_condition(lambda: all(t.done() for n, t in "
        "self.notices._tasks.items() if '.notice.' in n))\n"
        "        return self.notices.approved(record, s.decisions.pop(step_id))\n",
        Scenario(
            seed=-22, replies=_one(Call("approval", "r1", decision="approve")), notices="down"
        ),
    ),
    Mutant(
        "an approve's receipt says its approved call was not run, though it runs",
        "approval_receipt",
        "waypoint/_workflows/tool_gate.py",
        'self.settled_call(record.step_id, True, f"approved; the call runs {later}")',
        'self.settled_call(record.step_id, False, f"approved; the call runs {later}")',
        Scenario(seed=-23, replies=_one(Call("approval", "r1", decision="approve"))),
    ),
]


def copy_with(mutant: Mutant | None, into: Path) -> Path:
    """A copy of the checkout's code with the mutant's edit (which must match exactly once)."""
    for name in COPIED:
        shutil.copytree(
            ROOT / name, into / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    if mutant is not None:
        path = into / mutant.path
        text = path.read_text()
        if text.count(mutant.old) != 1:
            raise SystemExit(
                f"mutant {mutant.name!r}: {mutant.old!r} occurs {text.count(mutant.old)} times "
                f"in {mutant.path}, not once; update the mutant to the current code"
            )
        path.write_text(text.replace(mutant.old, mutant.new))
    return into


async def play(mutant: Mutant | None, scenario: Scenario, timeout: float) -> tuple[set[str], str]:
    """The invariants that reported a violation, and the soak's output."""
    folder = Path(tempfile.mkdtemp(prefix="waypoint-mutant-"))
    code = copy_with(mutant, folder / "code")
    file = folder / "scenario.json"
    file.write_text(scenario.to_json())
    env = {**os.environ, "PYTHONPATH": str(code)}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "bench/torture.py",
        *("--replay", str(file), "--workdir", str(folder / "run")),
        *("--timeout", str(timeout)),
        cwd=code,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    text = out.decode(errors="replace")
    caught = {name for name, n in VIOLATION.findall(text) if int(n)}
    if process.returncode and not caught and "violations of" not in text:
        (folder / "output.txt").write_text(text)  # what the crashed play printed
        caught.add(f"(crashed: see {folder / 'output.txt'})")
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return caught, text


async def main_async(args: argparse.Namespace) -> int:
    mutants = [m for m in MUTANTS if not args.only or any(o in m.name for o in args.only)]
    gate = asyncio.Semaphore(args.workers)

    async def one(mutant: Mutant | None, scenario: Scenario) -> tuple[set[str], float]:
        async with gate:
            started = time.monotonic()
            caught, text = await play(mutant, scenario, args.timeout)
            if args.verbose:
                print(text)
            return caught, time.monotonic() - started

    jobs = [one(m, m.scenario) for m in mutants]
    if args.control:
        jobs += [one(None, m.scenario) for m in mutants]
    results = await asyncio.gather(*jobs)
    failed = 0
    print("| mutation | meant for | caught by | | seconds |\n|---|---|---|---|---|")
    for mutant, (caught, seconds) in zip(mutants, results, strict=False):
        ok = mutant.invariant in caught
        failed += not ok
        print(
            f"| {mutant.name} | {mutant.invariant} | {', '.join(sorted(caught)) or 'nothing'} "
            f"| {'caught' if ok else 'ESCAPED'} | {seconds:.0f} |"
        )
    for mutant, (caught, seconds) in zip(mutants, results[len(mutants) :], strict=False):
        failed += bool(caught)
        verdict = ", ".join(sorted(caught)) or "no violation"
        print(
            f"| control: scenario {mutant.scenario.seed} unedited | none | {verdict} | "
            f"| {seconds:.0f} |"
        )
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="mutants whose name contains one of these")
    parser.add_argument("--workers", type=int, default=2, help="mutants played at once")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds per scenario")
    parser.add_argument("--control", action="store_true", help="also play each unedited")
    parser.add_argument("--verbose", action="store_true", help="print each soak's output")
    sys.exit(asyncio.run(main_async(parser.parse_args())))


if __name__ == "__main__":
    main()
