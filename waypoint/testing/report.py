"""What a kill test imposes and what it found: its timeouts, each kill, the report."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from waypoint.protocol import RunResult, StepOptions

KILL_TEST_OPTIONS = StepOptions(
    model_timeout=timedelta(seconds=2),
    model_heartbeat_timeout=timedelta(seconds=2),
    tool_timeout=timedelta(seconds=2),
    retry_initial_interval=timedelta(milliseconds=100),
    retry_max_interval=timedelta(milliseconds=500),
)
"""Short timeouts: a killed worker's activity is retried seconds later, not minutes.

A tool slower than `tool_timeout` fails its try and is retried; give the harness
`options=KILL_TEST_OPTIONS.model_copy(update={"tool_timeout": ...})` (`--tool-timeout`) for
a tool that is slow by nature, such as an MCP server's first call. A tool's own `timeout`
wins over it.
"""
TASK_TIMEOUT = timedelta(seconds=2)
"""The workflow task timeout the harness's runs get: a killed worker's task moves on quickly."""


def imposed(options: StepOptions) -> str:
    """The timeouts a kill test imposes, in one line, for its report."""
    seconds = options.model_timeout.total_seconds(), options.tool_timeout.total_seconds()
    return (
        f"timeouts imposed: model call {seconds[0]:g}s, tool {seconds[1]:g}s (a tool's own "
        f"timeout wins), workflow task {TASK_TIMEOUT.total_seconds():g}s"
    )


@dataclass
class Kill:
    """What one kill interrupted."""

    label: str
    completed: set[str]
    in_flight: set[str]
    exit_code: int | None = None
    """The worker's exit code after a SIGTERM; None after a SIGKILL."""


@dataclass
class KillReport:
    """The verdict: same result, same ledger, every effect once, only in-flight work re-ran."""

    reference: RunResult
    result: RunResult
    run_id: str
    kills: list[Kill] = field(default_factory=list)
    effect_counts: dict[str, int] = field(default_factory=dict)
    """How often the downstream saw each effect step of the killed run, whatever its ledger
    line says (rejected, failed, completed), by step (a sub-agent's as `parent step > child
    step`)."""
    reference_effect_counts: dict[str, int] = field(default_factory=dict)
    """The same of the uninterrupted run: the killed run's must match it, step by step."""
    executions: dict[str, int] = field(default_factory=dict)
    """How many times the killed run started each step (its attempts, across workers)."""
    attempts: dict[str, list[int]] = field(default_factory=dict)
    """The attempt numbers each step ran as, in both runs (the uninterrupted run's keyed
    `reference STEP`): a retry has the next number; a number twice is a step run again."""
    violations: list[str] = field(default_factory=list)
    unreached: list[str] = field(default_factory=list)
    """Kill points (moments in time) that had not come when the run ended."""
    options: StepOptions = KILL_TEST_OPTIONS

    @property
    def ok(self) -> bool:
        """True when every promise held."""
        return not self.violations

    @property
    def re_executed(self) -> dict[str, int]:
        """Steps the killed run started more than once, with how often (kills and retries)."""
        return {s: n for s, n in self.executions.items() if n > 1}

    @property
    def retried(self) -> dict[str, int]:
        """Steps that ran past their first attempt, with their last one, in either run.

        A retry the uninterrupted run made too has a cause other than a kill: often a
        timeout the harness imposes (`imposed`).
        """
        return {s: max(a) for s, a in self.attempts.items() if max(a) > 1}

    @property
    def failed(self) -> dict[str, str]:
        """Steps either run recorded as errors (every try failed), with what the ledger says."""
        return {
            r.step_id: r.summary
            for r in [*self.reference.ledger, *self.result.ledger]
            if r.status == "error"
        }

    def summary(self, timeouts: bool = True) -> str:
        """A few lines for a terminal or a closing note (`timeouts`: the ones imposed)."""
        lines = [f"{len(self.kills)} kills, {'OK' if self.ok else 'FAILED'}"]
        for k in self.kills:
            lines.append(f"  {k.label}: in flight {sorted(k.in_flight) or 'nothing'}")
        lines += [f"  {label}: not reached, the run had ended" for label in self.unreached]
        lines.append(f"  re-executed: {self.re_executed or 'nothing'}")
        if self.retried:
            lines.append(f"  retried (last attempt): {self.retried}")
        lines += [f"  failed on every try: {step}: {said}" for step, said in self.failed.items()]
        lines += [f"  {imposed(self.options)}"] if timeouts or self.failed else []
        lines.append(f"  effects: {self.effect_counts}")
        lines += [f"  VIOLATION {v}" for v in self.violations]
        return "\n".join(lines)
