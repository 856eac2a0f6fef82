"""What a person starting a run may choose (`POST /api/runs` and the start form), and what not.

Beside the agent, the task and an id: the run's limits (max turns, max cost, max total
tokens), its durability, and its history budget, each optional and bounded. Each one set
takes the agent's own place for this run; each left blank keeps the agent's (the run sets them
over its agent's when it loads it, as for `waypoint start`'s flags). Step timeouts and retries
are not a person's: one too short retries a step that is still running, so they are the
console's own (`Console.start_options`, set in code where it is served; `waypoint console`
serves the defaults). Those, and what only a program or the run itself sets, are refused with
a 422 that says why.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from waypoint._console.people import NAME
from waypoint.protocol import HistoryOverride, LimitsOverride, StepOptions

LIMITS = ("max_turns", "max_cost_usd", "max_total_tokens")
HISTORY = {"history_events": "max_events", "keep_turns": "keep_recent_turns"}
"""The form's history fields, by the `HistoryLimits` field each sets."""
STEPS = (
    "step timeouts and retries are the console's own (set where it is served, for every run "
    "it starts), not a person's: one too short retries a step that is still running"
)
NOT_A_PERSONS = {
    **dict.fromkeys(("options", "task_timeout", *StepOptions.model_fields), STEPS),
    "tool_options": "a tool's timeouts, tries and freshness are its author's, not a start's",
    "rerun": (
        "a rerun does a finished run's work again under new effect keys (a payment is made "
        "again): it is not offered here; `waypoint start --rerun` does it on purpose"
    ),
    "queue_anyway": "the console starts only agents a worker on its queue hosts",
    "attachments": "the console's start takes no attachments; `waypoint start --attach` does",
    **dict.fromkeys(("resume", "parent", "fork", "stream"), "only the run itself sets it"),
    "limits": f"name each limit ({', '.join(LIMITS)})",
    "history": f"name each part of the history budget ({', '.join(HISTORY)})",
}
"""What a start may not set, and why: each refused by name."""
KEEPS = "Blank: the agent's."
LABELS = {
    "max_turns": (
        "Max turns",
        f"Model turns before the run parks for an operator. {KEEPS}",
    ),
    "max_cost_usd": (
        "Max cost (USD)",
        f"Dollars the run may spend before it parks. {KEEPS}",
    ),
    "max_total_tokens": (
        "Max total tokens",
        f"Tokens the run may use before it parks. {KEEPS}",
    ),
    "durability": (
        "Durability",
        "step: every call saved before the next; turn: a reply's pure and read calls saved "
        f"together (faster; a crash may read them again). {KEEPS}",
    ),
    "history_events": (
        "History budget (events)",
        f"Hand over to a fresh history once one holds this many events. {KEEPS}",
    ),
    "keep_turns": (
        "Turns kept verbatim",
        f"Turns a handed-over run keeps whole; older ones are summarised. {KEEPS}",
    ),
}
"""Each optional field's label on the form and its help, by name."""


def _blank(name: str, **bounds: Any) -> Any:
    """The optional field `name`: None when left blank, labelled, checked when given."""
    title, description = LABELS[name]
    return Field(default=None, title=title, description=description, **bounds)


class StartBody(BaseModel):
    """Start a run of `agent` on `task`, under the limits and settings given."""

    model_config = ConfigDict(extra="forbid", str_max_length=100_000)

    agent: str = Field(min_length=1, max_length=200, pattern=NAME.pattern)
    task: str = Field(min_length=1, json_schema_extra={"format": "multiline"})
    workflow_id: str | None = Field(default=None, max_length=200, pattern=NAME.pattern)
    max_turns: int | None = _blank("max_turns", ge=1, le=100_000)
    max_cost_usd: float | None = _blank("max_cost_usd", gt=0, le=1_000_000, allow_inf_nan=False)
    max_total_tokens: int | None = _blank("max_total_tokens", ge=1, le=10**12)
    durability: Literal["step", "turn"] | None = _blank("durability")
    history_events: int | None = _blank("history_events", ge=50, le=10_000)
    keep_turns: int | None = _blank("keep_turns", ge=1, le=100)

    @model_validator(mode="before")
    @classmethod
    def _not_a_persons(cls, data: Any) -> Any:
        """Refuse by name what a person starting a run may not set, saying why."""
        if isinstance(data, dict):
            for name in data:
                if name in NOT_A_PERSONS:
                    raise ValueError(f"{name} cannot be set on a start: {NOT_A_PERSONS[name]}")
        return data

    def chosen(self) -> dict[str, Any]:
        """The `runs.start_run` arguments the person chose: limits, history budget, durability."""
        limits = self.model_dump(include=set(LIMITS), exclude_none=True)
        history = {HISTORY[k]: v for k, v in self.model_dump(include=set(HISTORY)).items() if v}
        return {
            "limits": LimitsOverride(**limits) if limits else None,
            "history": HistoryOverride(**history) if history else None,
            "durability": self.durability,
        }

    def audited(self) -> dict[str, str]:
        """The settings chosen, for the audit line (numbers and a choice: nothing typed freely)."""
        chosen = self.model_dump(include={*LIMITS, *HISTORY, "durability"}, exclude_none=True)
        return {k: str(v) for k, v in chosen.items()}
