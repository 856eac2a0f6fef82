"""A run: its input, ledger, status, memo and result, and the state it carries onward.

The state (`AgentState`) is what continue-as-new hands the next run of the chain.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from temporalio.contrib.workflow_streams import WorkflowStreamState

from waypoint.protocol.base import OutputT, RunState, StepStatus, _Frozen, _unset
from waypoint.protocol.decisions import (
    ApprovalDecision,
    ClientAnswer,
    IgnoredSignal,
    PendingApproval,
    PendingQuestion,
    PendingSteer,
    Resolution,
    Unresolved,
)
from waypoint.protocol.handover import WaitingTurn
from waypoint.protocol.messages import Message, RichBlock
from waypoint.protocol.notice_state import NoticeWait
from waypoint.protocol.policy import PolicyState
from waypoint.protocol.reads import FreshReads, Observation
from waypoint.protocol.signatures import Signed
from waypoint.protocol.spec import (
    AgentSpec,
    Durability,
    HistoryLimits,
    HistoryOverride,
    Limits,
    LimitsOverride,
    StepOptions,
    ToolOverride,
    ToolSpec,
)


class ReplacedPlan(_Frozen):
    """The tools a run had until a replan in `turn` adopted a new build's (`Steps.replan`)."""

    turn: int
    plan_version: int
    tools: list[ToolSpec]


class ParentLink(_Frozen):
    """Set on a sub-agent's run: the parent step it serves."""

    workflow_id: str
    step_id: str
    effect_key: str
    """The parent step's effect key: the child's effect keys extend it, so they stay the same
    across retries of the parent step and the parent's continue-as-new."""
    max_cost_usd: float | None = None
    """What remained of the parent's cost budget when the child started: the child's cap."""
    max_total_tokens: int | None = Field(default=None, exclude_if=_unset)
    """What remained of the parent's token budget when the child started: the child's cap."""


class ForkSource(_Frozen):
    """The run a fork starts from: the fork asks that run for its state itself (`waypoint fork`)."""

    workflow_id: str
    after_turn: int
    note: str | None = None
    """A note the model reads on the fork's first model step."""
    reviewer: str = Field(default="", exclude_if=_unset)
    """Who forks, named on the fork's first ledger line."""
    signature: Signed = None
    """The reviewer's signature over the source, turn, note and reviewer, for the fork's own
    workflow id; a fork of a `signed_decisions` agent checks it before it loads anything."""


class RunInput(_Frozen):
    """What `waypoint start` sends: the agent's name and the task."""

    agent: str
    task: str
    attachments: list[RichBlock] = []
    """Images or PDFs sent with the task (`waypoint start --attach FILE`)."""
    limits: Limits | None = None
    """Replaces the agent's limits whole for this run (one not given: its default)."""
    limits_override: LimitsOverride | None = Field(default=None, exclude_if=_unset)
    """The limits a person set for this run, each over the agent's own (`waypoint start`);
    the run's ledger records them (`t0.limits.1`)."""
    options: StepOptions = StepOptions()
    history: HistoryLimits | None = Field(default=None, exclude_if=_unset)
    """Replaces the agent's history budget whole for this run (`AgentState.history_budget`)."""
    history_override: HistoryOverride | None = Field(default=None, exclude_if=_unset)
    """The parts of the history budget a person set for this run, each over the agent's."""
    resume: AgentState | None = None
    """Set only by continue-as-new: the whole state of the previous history segment. A run
    that Temporal says did not continue from itself is refused with it (`ForgedResume`)."""
    stream: WorkflowStreamState | None = Field(default=None, exclude_if=_unset)
    """Set only by continue-as-new: the event stream's recent past (`waypoint.protocol.events`)."""
    parent: ParentLink | None = Field(default=None, exclude_if=_unset)
    """Set only on a sub-agent's run (`Agent.as_tool`): the parent step it serves."""
    fork: ForkSource | None = Field(default=None, exclude_if=_unset)
    """Set only on a fork's start: the run whose recorded steps it loads, then resumes from."""
    durability: Durability | None = Field(default=None, exclude_if=_unset)
    """Overrides the agent's durability for this run (`waypoint start --durability`)."""
    tool_options: dict[str, ToolOverride] = Field(default={}, exclude_if=lambda v: not v)
    """Per-tool options over the agent's own for this run, by tool name (`ToolOverride`);
    a name the agent has no tool for, or an option its tool cannot take, fails the run at
    its start, saying which."""


class Container(_Frozen):
    """The code-execution container a reply used: later calls reuse it until it expires."""

    id: str
    expires_at: str
    """ISO 8601, as the API gives it."""


class EarlyResume(BaseModel):
    """`resume`s that came while the run was still running, and in which workflow task."""

    at: str
    """`workflow.now()` of that task, ISO 8601: only a park in the same task takes them."""
    replans: list[bool] = []
    """Each one's `replan`, in the order they came."""
    woke: bool = False
    """Whether they woke a park: if not, they are refused once their task ends."""
    was: str = "running"
    """The run's state when the first came."""

    def refusal(self) -> str:
        """Why they are refused, once their task ended with nothing woken."""
        return f"nothing to resume: the run was {self.was}"


class StepRecord(BaseModel):
    """One line of the ledger: what a step consumed, what it did, what it cost."""

    step_id: str
    kind: Literal["spec", "model", "tool", "operator", "notice"]
    """`notice`: one notice's delivery to one channel (`workflows/notices.py`), beside the run."""
    tool: str | None = None
    input_hash: str
    status: StepStatus = "scheduled"
    attempt: int = 0
    effect_key: str | None = None
    summary: str = ""
    tokens: int = 0
    cost_usd: float | None = None
    reconciled: bool = False
    """The effect was found already done downstream after a crash, and not run again."""
    stop_reason: str | None = Field(default=None, exclude_if=_unset)
    """A model step's stop reason, as the API gave it."""
    decided_by: str | None = Field(default=None, exclude_if=_unset)
    """Who approved, rejected, resolved or corrected this step: reviewer (client identity)."""
    decided_at: str | None = Field(default=None, exclude_if=_unset)
    rule: str | None = Field(default=None, exclude_if=_unset)
    """The approval-policy rule that matched this call: it allowed or denied it, or asked a
    person (who is then `decided_by`)."""
    child_workflow_id: str | None = Field(default=None, exclude_if=_unset)
    """A sub-agent step's child run (`waypoint ledger CHILD_ID` shows its own ledger)."""
    child_run_id: str | None = Field(default=None, exclude_if=_unset)
    made_in: int | None = Field(default=None, exclude_if=_unset)
    """The turn a refresh (`t1.tool.1.quote.fresh2`) was made in: its id names the read's."""


class _Glance(BaseModel):
    """The run at a glance: what its status and its memo both say."""

    state: RunState
    detail: str = ""
    turn: int = 0
    model: str = ""
    provider: str = ""
    pending_approvals: list[PendingApproval] = []
    pending_questions: list[PendingQuestion] = []
    unresolved: list[Unresolved] = []
    total_tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True
    last_stop_reason: str = ""
    ignored_signals: list[IgnoredSignal] = []
    ignored_dropped: int = 0
    """Refused signals older than those listed in `ignored_signals`."""
    policy: str = ""
    """The approval policy in force, in one line: the spec's or which ledger line set it;
    '' when the run has none (each tool's `requires_approval` decides)."""
    fresh: FreshReads | None = None
    """None when the run holds no `fresh_for` read and has read none again."""


class RunStatus(_Glance):
    """What `waypoint status` shows: the run at a glance."""

    agent: str
    plan_version: int = 1
    continues: int = 0
    steps_archived: int = 0
    """Finished steps of earlier history segments not carried (`waypoint ledger` shows them)."""


MEMO_KEY = "waypoint"
"""The memo entry holding a `RunMemo`."""


class RunMemo(_Glance):
    """What a run keeps in its memo (key `waypoint`), so `describe` answers with no worker up.

    Refreshed when the run's state or what it waits for changes, not every step. Its
    `ignored_signals` are the latest, reasons shortened (still there once the run has ended);
    its `fresh` has its `last` cut short.
    """

    model_config = ConfigDict(frozen=True)

    last_steps: list[StepRecord] = []
    updated_at: str = ""
    signed: bool = Field(default=False, exclude_if=_unset)
    """The agent takes signed decisions only: a client signs, or is refused, before it sends."""


class RunResult(_Frozen):
    """What a finished run returns."""

    agent: str
    output: str
    stop_reason: str
    """The last model step's stop reason (`end_turn`, `refusal`, `max_tokens`, ...)."""
    stop_details: str = ""
    """What the API said about a refusal, when it said anything."""
    state: RunState = "done"
    turns: int
    total_tokens: int
    cost_usd: float
    cost_known: bool
    ledger: list[StepRecord]
    """The steps the last history segment carried: every effect step, the recent turns' steps."""
    output_json: dict[str, Any] | None = None
    """The validated final answer of an agent with an `output_type`, as JSON."""
    steps_archived: int = 0
    """Earlier finished steps left out of `ledger`, read back by `runs.whole_ledger`."""

    def output_as(self, output_type: type[OutputT]) -> OutputT:
        """The typed final answer, e.g. `result.output_as(Invoice)`.

        Raises:
            ValueError: The run has no typed output (its agent has no `output_type`).
        """
        if self.output_json is None:
            raise ValueError(f"run of {self.agent!r} has no typed output ({self.state})")
        return output_type.model_validate(self.output_json)


class ApprovalOutcome(_Frozen):
    """A person's decision on one pending approval."""

    approved: bool
    decision: ApprovalDecision


class LedgerArchive(BaseModel):
    """Finished steps left out of the ledger a run carries across continue-as-new, summed up.

    Only a step already handed over once is left out, so each is whole in the input (first
    history event) of a closed run of the chain, where `runs.whole_ledger` reads it back.
    Effect steps, what people did (operator steps), waiting steps and steps of turns still in
    the transcript are always carried.
    """

    steps: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True


class AgentState(BaseModel):
    """Everything a run carries, one model, so it can be handed whole to continue-as-new."""

    input: RunInput
    spec: AgentSpec | None = None
    limits: Limits | None = None
    messages: list[Message] = []
    transcript_hash: str = ""
    """Chained hash of the messages, so a model step's input hash costs O(1) per turn."""
    turn: int = 0
    state: RunState = "starting"
    detail: str = ""
    paused: str = Field(default="", exclude_if=_unset)
    """Who paused the run, and why ('' when it is not): it starts no step until unpaused."""
    ledger: list[StepRecord] = []
    pending: dict[str, PendingApproval] = {}
    decisions: dict[str, ApprovalOutcome] = {}
    unresolved: dict[str, Unresolved] = {}
    resolutions: dict[str, Resolution] = {}
    questions: dict[str, PendingQuestion] = {}
    """Calls of client-answered tools waiting for their answer."""
    answers: dict[str, ClientAnswer] = {}
    ignored_signals: list[IgnoredSignal] = []
    total_tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True
    output: str = ""
    continues: int = 0
    """How many times this run has continued-as-new."""
    notes: list[str] = []
    """Operator notes waiting for the next model step."""
    container: Container | None = Field(default=None, exclude_if=lambda v: v is None)
    """The code-execution container the run's calls share (`workflows/containers.py`)."""
    stored_hash: str = ""
    """Chain head the transcript store holds (sent with the last model step)."""
    stored_len: int = 0
    compacted_turns: int = 0
    """Turns folded into a summary so far."""
    resumes: int = 0
    """How many times an operator said `resume`: a parked model step retries on each."""
    replaced_plans: list[ReplacedPlan] = Field(default=[], exclude_if=_unset)
    """The tools each replan replaced, so a fork before it starts on the plan it had then."""
    limit_changes: int = Field(default=0, exclude_if=lambda v: not v)
    """Limits an operator put in force, each a ledger line (`t3.limits.1`)."""
    resume_replans: bool = False
    """Whether the last `resume` of a `tool_changed` step asked to replan, not run it again."""
    early_resume: EarlyResume | None = Field(default=None, exclude_if=_unset)
    """A `resume` just ahead of the park it was sent for (`Gates.parked`)."""
    tool_changed: dict[str, str] = {}
    """Steps parked in `tool_changed`, with what changed: `settle` keeps the state showing them
    while a parallel call's approval or answer comes and goes."""
    last_model_error: str = ""
    """The error that parked the run in `model_unavailable` or `request_invalid`, in one line."""
    last_context_tokens: int = 0
    """Prompt plus reply tokens of the last model step: what the next one reads, at least."""
    stop_details: str = ""
    output_json: dict[str, Any] | None = None
    """The validated final answer, once the model gave one that fits `output_type`."""
    output_retries: int = 0
    """Invalid final answers since the run started or was last resumed."""
    policy: PolicyState = PolicyState()
    """The approval policy set on the live run, and approvals remembered for it."""
    decision_ids: dict[str, str] = {}
    """Ids of the decisions applied, each with the step it decided: a repeat is a no-op."""
    archived: LedgerArchive = LedgerArchive()
    """What the ledger no longer carries (`HistoryLimits` bounds what state a run carries)."""
    ignored_dropped: int = 0
    """Refused signals beyond `HistoryLimits.keep_ignored_signals`, no longer listed."""
    observations: list[Observation] = Field(default=[], exclude_if=_unset)
    """Reads of `fresh_for` tools in play, the newest of each tool and arguments: refreshed
    before an effect acts on them."""
    earlier_reads: list[Observation] = Field(default=[], exclude_if=_unset)
    """Copies the reads in play replaced, kept while a fork could start before they were
    (`Observation.superseded`), so a fork acts on what the run held at its fork point."""
    steers: list[PendingSteer] = []
    """Steers accepted and not yet delivered: they go in front of the next model step."""
    notices: dict[str, NoticeWait] = Field(default={}, exclude_if=lambda v: not v)
    """By step id: the notices of its waits, for the people the run waits on."""
    waiting_turn: WaitingTurn | None = Field(default=None, exclude_if=lambda v: v is None)
    """Set when the run continued-as-new while it waited: where the next segment goes on."""

    def history_budget(self) -> HistoryLimits:
        """The run's whole history budget, else its agent's, else the defaults.

        With the parts a person set at its start (`history_override`) in their place.
        """
        agents = self.spec.history if self.spec is not None else None
        budget = self.input.history or agents or HistoryLimits()
        override = self.input.history_override
        return override.over(budget) if override is not None else budget


RunInput.model_rebuild()
