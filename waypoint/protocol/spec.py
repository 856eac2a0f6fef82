"""The agent spec, snapshotted when a run starts, and the options a run is started with.

The spec holds tools, model, limits, prices and policy; the options, step timeouts and retries
and the history budget.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from pydantic import Field

from waypoint.protocol.base import ToolKind, _Frozen, _unset
from waypoint.protocol.billing import CallPrice
from waypoint.protocol.bounds import SizeLimits
from waypoint.protocol.policy import ApprovalPolicy


class ToolSpec(_Frozen):
    """What the workflow knows about a tool: no code, only its contract."""

    name: str
    description: str
    input_schema: dict[str, Any]
    kind: ToolKind
    schema_hash: str
    anthropic_type: str | None = Field(default=None, exclude_if=_unset)
    """The type of a tool whose schema Anthropic defines (`ToolOptions.anthropic_type`)."""
    approval: Literal["never", "always", "predicate"] = "never"
    """`predicate`: the worker decides from the arguments, recorded as a step."""
    approval_timeout: timedelta | None = None
    """How long a person has to decide before `on_approval_timeout` applies."""
    on_approval_timeout: Literal["reject", "escalate"] = "reject"
    """`reject`: the model is told nobody approved in time; `escalate`: notify and keep waiting."""
    escalate_with: str | None = None
    """The agent's effect tool (taking `Escalation` arguments) that notifies someone."""
    remind_every: timedelta | None = None
    """After escalating, notify again at this interval while the approval still waits."""
    timeout: timedelta | None = None
    """Start-to-close of one call of this tool; None uses the run's `StepOptions.tool_timeout`.
    For `runs_as="client"`: how long a client has to answer (None waits for ever)."""
    max_attempts: int | None = None
    """Attempts for this tool; None uses the run's `StepOptions.tool_max_attempts`."""
    runs_as: Literal["activity", "child", "client"] = Field(
        default="activity", exclude_if=lambda v: v == "activity"
    )
    """How a call runs once it passed the funnel: an activity, or a sub-agent's child
    workflow (`Agent.as_tool`), or a client's answer."""
    child_agent: str | None = Field(default=None, exclude_if=_unset)
    """With `runs_as="child"`: the agent the child workflow runs."""
    output_schema: dict[str, Any] | None = Field(default=None, exclude_if=_unset)
    """`runs_as="client"`: the JSON schema an answer must fit (checked in the workflow)."""
    fresh_for: timedelta | None = Field(default=None, exclude_if=_unset)
    """A read tool's observations go stale after this, by a recorded clock (`ToolOptions`)."""


class ToolOverride(_Frozen):
    """Options set over a tool's own for one run or one worker, without re-importing its module.

    For tests and environments: a run gets them in its input (`runs.start_run(tool_options=)`,
    `run_kill_test(tool_options=)`), a worker through `Agent.with_tool_options`. Each field left
    None keeps the tool's own; what is set is checked as the tool's own would be, applied to
    the spec the run snapshots, and recorded there, so replay, continue-as-new, a fork and a
    replan keep it.
    """

    timeout: timedelta | None = Field(default=None, gt=timedelta(0))
    """Start-to-close of one call (a client-answered tool: how long a client has to answer)."""
    max_attempts: int | None = Field(default=None, ge=1)
    """Tries of a tool that keeps raising."""
    fresh_for: timedelta | None = Field(default=None, gt=timedelta(0))
    """A `read` tool's observations go stale after this (`ToolOptions.fresh_for`)."""
    approval_timeout: timedelta | None = Field(default=None, gt=timedelta(0))
    """How long a person has to decide before `on_approval_timeout` applies."""
    remind_every: timedelta | None = Field(default=None, gt=timedelta(0))
    """After escalating, notify again at this interval."""


Durability = Literal["step", "turn"]
DURABILITIES: tuple[str, ...] = ("step", "turn")


class Limits(_Frozen):
    """Budgets for one run; reaching one parks the run until an operator raises it."""

    max_turns: int = 20
    max_tokens_per_call: int = 4096
    max_total_tokens: int | None = None
    max_cost_usd: float | None = None
    max_continue_as_new: int = 1000
    """Resume budget: how many history segments a run may chain before it parks."""


class LimitsOverride(_Frozen):
    """Limits a person set on a run's start, each over its agent's own (`RunInput.limits_override`).

    One left None keeps the agent's (so no cap can be lifted here: a whole `Limits` does that).
    Each one set is positive (a cost finite): a cap of nothing is refused, not recorded.
    """

    max_turns: int | None = Field(default=None, exclude_if=_unset, ge=1)
    max_tokens_per_call: int | None = Field(default=None, exclude_if=_unset, ge=1)
    max_total_tokens: int | None = Field(default=None, exclude_if=_unset, ge=1)
    max_cost_usd: float | None = Field(default=None, exclude_if=_unset, gt=0, allow_inf_nan=False)
    max_continue_as_new: int | None = Field(default=None, exclude_if=_unset, ge=1)

    def over(self, limits: Limits) -> Limits:
        """`limits`, with the ones set here in their place."""
        return limits.model_copy(update=self.model_dump(exclude_none=True))


class ModelSettings(_Frozen):
    """How the Messages API is called for an agent; fixed at start like the rest of the spec."""

    thinking: Literal["off", "adaptive", "enabled"] = "off"
    """`adaptive`: Claude decides how much to think; `enabled`: think up to `thinking_budget`."""
    thinking_budget: int = 4096
    """Tokens of thinking with `thinking="enabled"` (at least 1,024, below max_tokens)."""
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    """The API's `output_config.effort`; None leaves the model's default."""
    cache: Literal["5m", "1h", "off"] = "5m"
    """Prompt caching: breakpoints on tools + system and on the newest message."""
    tool_choice: str = "auto"
    """`auto`, `any`, `none`, or a tool's name to force that tool."""
    parallel_tool_calls: bool = True
    """False sends `disable_parallel_tool_use`: at most one tool call per reply."""
    max_parallel_tools: int | None = None
    """At most this many of a reply's tool calls run at once (the workflow enforces it)."""
    compact_at: float = 0.7
    """Compact the transcript when a step's input passes this share of the context window."""
    context_window: int = 200_000
    """Tokens the model reads at most; filled from the model's known window at start."""
    max_output_tokens: int = 32_000
    """The model's full output budget: a reply cut off at `max_tokens` is re-asked with it."""


class HistoryLimits(_Frozen):
    """When a run hands over to a fresh history (continue-as-new), and what it keeps verbatim.

    Defaults sit far below Temporal's limits (51,200 events / 50 MB, warnings at 10,240 / 10 MB).
    """

    max_events: int = Field(default=2000, ge=1)
    """Continue-as-new once a history segment holds this many events."""
    max_bytes: int = Field(default=2 * 1024 * 1024, ge=1)
    """Continue-as-new once a history segment holds this many bytes."""
    keep_recent_turns: int = Field(default=3, ge=1)
    """Turns kept verbatim; older ones are summarised by a recorded model step."""
    keep_events: int = Field(default=256, ge=0)
    """Events of the run's stream handed to the next segment: where a late reader starts."""
    keep_ignored_signals: int = Field(default=20, ge=0)
    """Refused signals the state lists (the latest); older ones are only counted (their
    signals stay in history)."""
    keep_remembered: int = Field(default=50, ge=1)
    """Remembered approvals a run holds: remembering one more forgets the oldest, whose calls
    then ask again (remembering the same scope again only refreshes it)."""


class HistoryOverride(_Frozen):
    """A history budget set on a run's start, part by part over its agent's own.

    One part left None keeps the agent's (`RunInput.history_override`); bounded as `HistoryLimits`.
    """

    max_events: int | None = Field(default=None, ge=1, exclude_if=_unset)
    max_bytes: int | None = Field(default=None, ge=1, exclude_if=_unset)
    keep_recent_turns: int | None = Field(default=None, ge=1, exclude_if=_unset)
    keep_events: int | None = Field(default=None, ge=0, exclude_if=_unset)
    keep_ignored_signals: int | None = Field(default=None, ge=0, exclude_if=_unset)
    keep_remembered: int | None = Field(default=None, ge=1, exclude_if=_unset)

    def over(self, history: HistoryLimits) -> HistoryLimits:
        """`history`, with the parts set here in their place."""
        return history.model_copy(update=self.model_dump(exclude_none=True))


HISTORY_UNREADABLE = "HistorySizeUnreadable"
"""`waypoint.history_size`'s error type when the server refuses to say (not retried)."""


class HistorySize(_Frozen):
    """How large a run's history segment is, as the server said in a recorded activity."""

    events: int = Field(ge=0)
    bytes: int = Field(ge=0)


class ServerToolSpec(_Frozen):
    """One of Claude's server tools (`waypoint.server_tools`): run by the API, not a worker."""

    type: str
    """The versioned tool type the Messages API documents, e.g. `web_search_20250305`."""
    name: str
    options: dict[str, Any] = {}
    """The tool's own settings as the API takes them (`max_uses`, `allowed_domains`, ...)."""

    def param(self) -> dict[str, Any]:
        """The tool definition as the request carries it."""
        return {"type": self.type, "name": self.name, **self.options}


class AgentSpec(_Frozen):
    """Everything a run depends on, fixed when it starts so a deploy changes new runs only."""

    name: str
    model: str
    provider: Literal["anthropic", "scripted"]
    system: str
    tools: list[ToolSpec]
    limits: Limits = Limits()
    on_change: Literal["refuse", "replan"] = "refuse"
    plan_version: int = 1
    approval_hash: Literal["required", "optional"] = "optional"
    """Whether an approval must name the arguments hash it reviewed (new agents: required)."""
    settings: ModelSettings = ModelSettings()
    price_known: bool = True
    """False when no price is known for `model`: a run with `max_cost_usd` is refused."""
    price: CallPrice | None = Field(default=None, exclude_if=_unset)
    """The model's worst-case rates, so a call reserves its cost before it is made."""
    output_schema: dict[str, Any] | None = None
    """The JSON schema of the agent's `output_type`: the run ends by a valid `final_answer`."""
    output_name: str = ""
    """The name of the output type, for messages."""
    max_output_retries: int = 2
    """Invalid final answers the model may correct before the run parks in `output_invalid`."""
    hash_salt: str = ""
    """Secret salt of the step input hashes that reach history in activity ids (and of
    argument hashes), drawn by the worker at start; encrypted with the spec when keys are set."""
    policy: ApprovalPolicy | None = Field(default=None, exclude_if=_unset)
    """The agent's approval policy as it was at start (`waypoint.protocol.policy`)."""
    signed_decisions: bool = Field(default=False, exclude_if=_unset)
    """Every verb people send the run must be signed by the reviewer it names
    (`waypoint._security.signing`, `docs/verbs.md`); unsigned or badly signed ones are refused
    and recorded."""
    decision_max_age: timedelta = timedelta(days=1)
    """A signed decision is refused once its signature is older than this, when it is
    verified (a signal sent with no worker up is verified when a worker picks it up)."""
    history: HistoryLimits | None = Field(default=None, exclude_if=_unset)
    """The agent's history budget (`Agent.history`); a run's own `RunInput.history` wins."""
    bounds: SizeLimits | None = Field(default=None, exclude_if=_unset)
    """Limits on tool inputs, results and client answers (`Agent.bounds`); None: the defaults."""
    server_tools: list[ServerToolSpec] = Field(default=[], exclude_if=_unset)
    """Claude's server tools the agent may use (`Agent.server_tools`), sent with every call."""
    durability: Durability = Field(default="step", exclude_if=lambda v: v == "step")
    """`step` or `turn` (`Agent.durability`): how a reply's pure and read calls are saved."""
    tool_options: dict[str, ToolOverride] = Field(default={}, exclude_if=lambda v: not v)
    """The run's own per-tool options (`RunInput.tool_options`), applied over `tools` at
    start and again over a replan's tools."""
    refuse_plaintext: bool = Field(default=False, exclude_if=_unset)
    """Set by an encrypting worker: what a person sends unencrypted is refused and recorded
    (`waypoint._security.plaintext`). Snapshotted, so a history replays the same way wherever it
    runs."""


class StepOptions(_Frozen):
    """Timeouts and retry policies for every step, in one place."""

    model_timeout: timedelta = timedelta(minutes=10)
    """Start-to-close of one Messages API call, streaming included."""
    model_heartbeat_timeout: timedelta = timedelta(seconds=60)
    """A model step whose worker stops heartbeating this long (killed, or its event loop
    blocked) is retried elsewhere; a live step heartbeats every second, stream or no stream."""
    model_max_attempts: int = 10
    """Retryable API errors (429, 5xx, 529, network) are retried this many times."""
    tool_timeout: timedelta = timedelta(minutes=5)
    """Start-to-close of one tool call (a tool's own `timeout` wins)."""
    tool_heartbeat_timeout: timedelta = timedelta(seconds=10)
    """Tool activities heartbeat on their own while they run: a killed worker's step is
    retried after this long, not after `tool_timeout`. The quick steps (a tool's argument check,
    loading the spec or a fork, checking the final answer or a signed decision, the clock) get
    it too: one a worker took from the queue but died before it started (so no attempt journal
    knows it) is retried after this long, not after its 30 s timeout."""
    effect_overrun: timedelta = timedelta(hours=1)
    """How long past its timeout an effect's attempt may run before the server gives it up.
    The worker stops the tool at its timeout, but a thread it started cannot be stopped: the
    attempt waits for it, heartbeating, and reports only then, so no retry overlaps it. A dead
    worker takes its threads with it; the heartbeat timeout covers that."""
    tool_max_attempts: int = 3
    """Tries of a tool that keeps raising (a tool's own `max_attempts` wins). An effect whose
    tries run out is reconciled once more, and parked if nobody can tell what happened."""
    retry_initial_interval: timedelta = timedelta(seconds=1)
    """First retry delay; doubles each attempt up to `retry_max_interval`."""
    retry_max_interval: timedelta = timedelta(seconds=60)
    """Longest delay between retries."""
    spec_timeout: timedelta = timedelta(seconds=30)
    """Start-to-close of loading the agent spec from the worker."""
    notice_timeout: timedelta = Field(
        default=timedelta(seconds=30), exclude_if=lambda v: v == timedelta(seconds=30)
    )
    """Start-to-close of one notice's delivery to one channel (`waypoint.notify`)."""
    notice_max_attempts: int = Field(default=5, exclude_if=lambda v: v == 5)
    """Tries of one delivery, with the run's backoff; the last one reports `failed`."""
    notice_drain: timedelta = Field(
        default=timedelta(seconds=10), exclude_if=lambda v: v == timedelta(seconds=10)
    )
    """How long a finished run waits for deliveries still in flight before it records them
    as not confirmed and ends (they never hold a step, only the run's close)."""
