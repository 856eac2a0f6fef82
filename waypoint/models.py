"""Every pydantic type that crosses a Temporal boundary.

These are Waypoint's own message models: Anthropic's SDK types are converted to and from them
only inside the model activity, so history never depends on an SDK version.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from temporalio.contrib.workflow_streams import WorkflowStreamState

from waypoint.policy import ApprovalPolicy, PolicyState
from waypoint.signing import Signature

OutputT = TypeVar("OutputT", bound=BaseModel)

ToolKind = Literal["pure", "read", "effect"]
"""`pure`: deterministic and cheap; `read`: an external read; `effect`: changes the world."""

RunState = Literal[
    "starting",
    "running",
    "awaiting_approval",
    "awaiting_answer",
    "needs_reconciliation",
    "limit_reached",
    "model_unavailable",
    "output_invalid",
    "refused",
    "done",
    "failed",
    "cancelled",
]

StepStatus = Literal[
    "scheduled",
    "completed",
    "error",
    "awaiting_approval",
    "awaiting_answer",
    "rejected",
    "needs_reconciliation",
    "aborted",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


def _unset(value: object) -> bool:
    """Whether a late-added field is unset, and so left out of dumps.

    Leaving it out keeps the hashes of messages recorded before the field existed (and so the
    activity ids of running runs) unchanged.
    """
    return value is None or value == "" or value == [] or value is False


# --- Messages -------------------------------------------------------------------------------


class TextBlock(_Frozen):
    """Text written by the model or the user."""

    type: Literal["text"] = "text"
    text: str


class ImageBlock(_Frozen):
    """An image for the model (a tool's result or an attachment), base64-encoded."""

    type: Literal["image"] = "image"
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str


class DocumentBlock(_Frozen):
    """A PDF (or plain text) document for the model, base64-encoded."""

    type: Literal["document"] = "document"
    media_type: Literal["application/pdf", "text/plain"] = "application/pdf"
    data: str
    title: str | None = Field(default=None, exclude_if=_unset)


RichBlock = Annotated[TextBlock | ImageBlock | DocumentBlock, Field(discriminator="type")]
"""What a tool may return, and what a task may carry, beyond plain text."""


class ThinkingBlock(_Frozen):
    """Claude's thinking, kept verbatim: the API needs it back, signature included."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str


class RedactedThinkingBlock(_Frozen):
    """Thinking the API encrypted; sent back byte for byte, never shown."""

    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: str


class ToolUseBlock(_Frozen):
    """A tool call the model asked for."""

    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]
    invalid: str | None = Field(default=None, exclude_if=_unset)
    """Why this call must not run (its input was cut off, or was not a JSON object); it gets
    an error result instead. Never sent to the API."""


class ToolResultBlock(_Frozen):
    """The answer to one tool call, sent back to the model."""

    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str | list[RichBlock]
    is_error: bool = False


ContentBlock = Annotated[
    TextBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | ImageBlock
    | DocumentBlock,
    Field(discriminator="type"),
]


class Message(_Frozen):
    """One turn of the conversation."""

    role: Literal["user", "assistant"]
    content: list[ContentBlock]


def text_of(content: str | list[RichBlock] | list[ContentBlock]) -> str:
    """The plain text of a result or reply (images and documents named, thinking left out)."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ImageBlock | DocumentBlock):
            parts.append(f"[{block.type} {block.media_type}]")
    return "\n".join(parts)


# --- The agent spec, snapshotted at start ---------------------------------------------------


class ToolSpec(_Frozen):
    """What the workflow knows about a tool: no code, only its contract."""

    name: str
    description: str
    input_schema: dict[str, Any]
    kind: ToolKind
    schema_hash: str
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


class Limits(_Frozen):
    """Budgets for one run; reaching one parks the run until an operator raises it."""

    max_turns: int = 20
    max_tokens_per_call: int = 4096
    max_total_tokens: int | None = None
    max_cost_usd: float | None = None
    max_continue_as_new: int = 1000
    """Resume budget: how many history segments a run may chain before it parks."""


class PriceTier(_Frozen):
    """A model's rates, USD per million tokens, for a prompt of at least `from_tokens` tokens."""

    from_tokens: int = 0
    input: float
    """A prompt token at its dearest: the input rate or the cache write rate, whichever is more."""
    output: float


class CallPrice(_Frozen):
    """What the run's model costs at worst, snapshotted at start so a call can reserve it.

    The workflow cannot look prices up (no I/O); `waypoint.pricing.call_price` fills this in.
    """

    tiers: list[PriceTier]
    """Ascending by `from_tokens`; a prompt that reaches a tier pays its rates on all tokens."""


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
    """The agent's approval policy as it was at start (`waypoint.policy`)."""
    signed_decisions: bool = Field(default=False, exclude_if=_unset)
    """Approve, reject, resolve and policy changes must be signed by the reviewer they name
    (`waypoint.signing`); unsigned or badly signed ones are refused and recorded."""


# --- Workflow input, state and results ------------------------------------------------------


class StepOptions(_Frozen):
    """Timeouts and retry policies for every step, in one place."""

    model_timeout: timedelta = timedelta(minutes=10)
    """Start-to-close of one Messages API call, streaming included."""
    model_heartbeat_timeout: timedelta = timedelta(seconds=60)
    """A streaming call that sends no event for this long is presumed dead and retried."""
    model_max_attempts: int = 10
    """Retryable API errors (429, 5xx, 529, network) are retried this many times."""
    tool_timeout: timedelta = timedelta(minutes=5)
    """Start-to-close of one tool call (a tool's own `timeout` wins)."""
    tool_heartbeat_timeout: timedelta = timedelta(seconds=10)
    """Tool activities heartbeat on their own while they run: a killed worker's step is
    retried after this long, not after `tool_timeout`."""
    tool_max_attempts: int = 3
    """Tries of a tool that keeps raising (a tool's own `max_attempts` wins). An effect whose
    tries run out is reconciled once more, and parked if nobody can tell what happened."""
    retry_initial_interval: timedelta = timedelta(seconds=1)
    """First retry delay; doubles each attempt up to `retry_max_interval`."""
    retry_max_interval: timedelta = timedelta(seconds=60)
    """Longest delay between retries."""
    spec_timeout: timedelta = timedelta(seconds=30)
    """Start-to-close of loading the agent spec from the worker."""


class HistoryBudget(_Frozen):
    """When a run hands over to a fresh history (continue-as-new), and what it keeps verbatim.

    Defaults sit far below Temporal's limits (51,200 events / 50 MB, warnings at 10,240 / 10 MB).
    """

    max_events: int = 2000
    max_bytes: int = 2 * 1024 * 1024
    keep_recent_turns: int = 3
    """Turns kept verbatim; older ones are summarised by a recorded model step."""
    keep_events: int = Field(default=256, ge=0)
    """Events of the run's stream handed to the next segment: where a late reader starts."""
    keep_ignored_signals: int = Field(default=20, ge=0)
    """Refused signals the state lists (the latest); older ones are only counted (their
    signals stay in history)."""
    keep_remembered: int = Field(default=50, ge=1)
    """Remembered approvals a run holds: remembering one more forgets the oldest, whose calls
    then ask again (remembering the same scope again only refreshes it)."""


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


class RunInput(_Frozen):
    """What `waypoint start` sends: the agent's name and the task."""

    agent: str
    task: str
    attachments: list[RichBlock] = []
    """Images or PDFs sent with the task (`waypoint start --attach FILE`)."""
    limits: Limits | None = None
    """Overrides the agent's limits for this run."""
    options: StepOptions = StepOptions()
    history: HistoryBudget = HistoryBudget()
    resume: AgentState | None = None
    """Set only by continue-as-new: the whole state of the previous history segment. A run
    that Temporal says did not continue from itself is refused with it (`ForgedResume`)."""
    stream: WorkflowStreamState | None = Field(default=None, exclude_if=_unset)
    """Set only by continue-as-new: the event stream's recent past (`waypoint.events`)."""
    parent: ParentLink | None = Field(default=None, exclude_if=_unset)
    """Set only on a sub-agent's run (`Agent.as_tool`): the parent step it serves."""
    fork: ForkSource | None = Field(default=None, exclude_if=_unset)
    """Set only on a fork's start: the run whose recorded steps it loads, then resumes from."""


class Usage(_Frozen):
    """Tokens billed for one model call."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    """Cache writes of both TTLs; the 1-hour part is also in the field below."""
    cache_creation_1h_input_tokens: int = 0
    """The part of the cache writes made with the 1-hour TTL (priced higher)."""
    cache_read_input_tokens: int = 0

    @property
    def context_tokens(self) -> int:
        """What the model read: the size of the prompt, cached or not."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    @property
    def total(self) -> int:
        """All tokens of the call, cached or not."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_creation_input_tokens
            + self.cache_read_input_tokens
        )


class StepRecord(BaseModel):
    """One line of the ledger: what a step consumed, what it did, what it cost."""

    step_id: str
    kind: Literal["spec", "model", "tool", "operator"]
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


class Escalation(_Frozen):
    """The arguments an escalation tool receives when an approval waits too long."""

    step_id: str
    tool: str
    arguments: dict[str, Any]
    waited_seconds: float
    reminder: int
    """0 for the first escalation, then 1, 2, ... for each reminder."""


class PendingApproval(_Frozen):
    """A tool call waiting for a person, bound to the exact arguments they review."""

    step_id: str
    tool: str
    arguments: dict[str, Any]
    arguments_hash: str
    requested_at: str


class PendingQuestion(_Frozen):
    """A call of a client-answered tool, waiting for a client to answer it."""

    step_id: str
    tool: str
    arguments: dict[str, Any]
    asked_at: str


class ClientAnswer(_Frozen):
    """The payload of the `answer` signal and update: a client's result for a pending question."""

    step_id: str
    result: dict[str, Any]
    """Must fit the tool's output schema, or the answer is refused and the run keeps waiting."""
    sender: str = "unknown"
    identity: str = ""
    """The sending Temporal client's identity, recorded with the answer."""
    decision_id: str = Field(default="", exclude_if=_unset)
    """Made by the sender: a second arrival of the same id is a no-op, recorded as a duplicate."""


class ApprovalDecision(_Frozen):
    """The payload of the `approve` and `reject` signals and updates."""

    step_id: str
    reviewer: str = "unknown"
    reason: str = ""
    arguments_hash: str | None = None
    """Must match the pending approval's hash (the CLI fills it in): a stale or blind
    approval is refused, unless the agent opted out with `approval_hash="optional"`."""
    identity: str = ""
    """The sending Temporal client's identity (`Client.identity`), recorded with the decision."""
    remember: Literal["", "tool", "args"] = ""
    """Approve and remember for this run: every later call of the tool, or of these arguments."""
    decision_id: str = Field(default="", exclude_if=_unset)
    """Made by the sender: a second arrival of the same id is a no-op, recorded as a duplicate
    (an Update whose answer was lost, sent again as a signal)."""
    signature: Signature | None = Field(default=None, exclude_if=_unset)
    """The reviewer's signature (`waypoint.signing`); required by `signed_decisions` agents."""


class DecisionReceipt(_Frozen):
    """What the `approve`, `reject` and `resolve` updates answer once the decision is recorded."""

    step_id: str
    decision: str
    decided_by: str
    decided_at: str
    refused: str = Field(default="", exclude_if=_unset)
    """Why the run refused the decision after accepting the update (a signature that does not
    hold can only be checked by an activity, after validation); recorded as an ignored signal."""


class WatchRequest(_Frozen):
    """The payload of the `watch` signal: a reader wants Claude's words live for a while."""

    seconds: int = 600


class ResumeRequest(_Frozen):
    """The payload of the `resume` signal: retry a model step parked in `model_unavailable`."""

    reviewer: str = "unknown"
    reason: str = ""


class Unresolved(_Frozen):
    """An effect step whose outcome nobody can tell; the run waits for an operator."""

    step_id: str
    tool: str
    effect_key: str | None
    reason: str


class Resolution(_Frozen):
    """The payload of the `resolve` signal: what an operator decided about an unclear effect."""

    step_id: str
    action: Literal["result", "retry", "abort"]
    """`result`: record `result` as the step's outcome; `retry`: reconcile then run again;
    `abort`: tell the model the step was abandoned."""
    result: str = ""
    reviewer: str = "unknown"
    reason: str = ""
    identity: str = ""
    decision_id: str = Field(default="", exclude_if=_unset)
    """Made by the sender: a second arrival of the same id is a no-op, recorded as a duplicate."""
    signature: Signature | None = Field(default=None, exclude_if=_unset)
    """The reviewer's signature (`waypoint.signing`); required by `signed_decisions` agents."""


class Correction(_Frozen):
    """The payload of the `correct` signal: fix a recorded tool result, or tell the model something.

    Applied before the next model step and recorded in the ledger as an operator step.
    """

    step_id: str | None = None
    """A completed tool step whose recorded result `result` replaces."""
    result: str | None = None
    note: str | None = None
    """Text for the model, added to the conversation before its next turn."""
    reviewer: str = "unknown"
    reason: str = ""
    identity: str = ""
    decision_id: str = Field(default="", exclude_if=_unset)
    """Made by the sender: a second arrival of the same id (an Update whose answer was lost,
    sent again as a signal) is a recorded no-op, so a note never reaches the model twice."""


class IgnoredSignal(_Frozen):
    """A signal the workflow could not apply, kept so an operator can see why."""

    signal: str
    step_id: str
    reason: str


class RunStatus(BaseModel):
    """What `waypoint status` shows: the run at a glance."""

    agent: str
    state: RunState
    turn: int
    model: str
    provider: str
    pending_approvals: list[PendingApproval] = []
    pending_questions: list[PendingQuestion] = []
    unresolved: list[Unresolved] = []
    ignored_signals: list[IgnoredSignal] = []
    plan_version: int = 1
    continues: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True
    detail: str = ""
    last_stop_reason: str = ""
    steps_archived: int = 0
    """Finished steps of earlier history segments not carried (`waypoint ledger` shows them)."""
    ignored_dropped: int = 0
    """Refused signals older than those listed in `ignored_signals`."""


MEMO_KEY = "waypoint"
"""The memo entry holding a `RunMemo`."""


class RunMemo(_Frozen):
    """What a run keeps in its memo (key `waypoint`), so `describe` answers with no worker up.

    Refreshed when the run's state or what it waits for changes, not every step.
    """

    state: RunState
    detail: str = ""
    turn: int = 0
    model: str = ""
    provider: str = ""
    pending_approvals: list[PendingApproval] = []
    pending_questions: list[PendingQuestion] = []
    unresolved: list[Unresolved] = []
    last_steps: list[StepRecord] = []
    total_tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True
    last_stop_reason: str = ""
    updated_at: str = ""


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


# --- Activity inputs and results ------------------------------------------------------------


class LoadSpecInput(_Frozen):
    """Ask the worker for the current definition of an agent."""

    agent: str
    provider: Literal["anthropic", "scripted"] | None = None
    """On a replan, keep the provider the run started with."""


class ModelRequest(_Frozen):
    """One Messages API call."""

    purpose: Literal["turn", "compact"] = "turn"
    """`compact`: summarise the older transcript before a continue-as-new."""
    step_id: str
    turn: int
    model: str
    provider: Literal["anthropic", "scripted"]
    agent: str
    system: str
    tools: list[ToolSpec]
    messages: list[Message]
    """Only the messages after `prefix_hash` when a prefix is named; else the whole transcript."""
    max_tokens: int
    prefix_hash: str = ""
    """Chain head of the messages the worker's transcript store already holds."""
    prefix_len: int = 0
    settings: ModelSettings = ModelSettings()
    live: bool = False
    """Someone is watching the run: stream Claude's words as they are generated."""


class ModelResponse(_Frozen):
    """The model's answer with what it cost."""

    content: list[ContentBlock]
    stop_reason: str
    stop_sequence: str | None = None
    """Which of the request's stop sequences ended the reply, for `stop_sequence`."""
    stop_details: str = ""
    """The API's explanation of a refusal (category and text), when it gives one."""
    usage: Usage = Usage()
    cost_usd: float | None = None
    """None when the model id is not in the price table."""
    model: str
    attempt: int = 1


class ToolCall(_Frozen):
    """One tool step as the workflow schedules it."""

    agent: str
    step_id: str
    tool: str
    schema_hash: str
    arguments: dict[str, Any]
    effect_key: str | None = None
    run_id: str = ""
    workflow_id: str = ""
    reconcile_first: bool = False
    """Ask downstream before running even on attempt 1 (an operator's `retry`)."""
    reconcile_only: bool = False
    """Only ask downstream, never run: the effect's attempts ran out."""


class OutputCheck(_Frozen):
    """A `final_answer` call to validate against the agent's `output_type` on the worker."""

    agent: str
    step_id: str
    schema_hash: str
    """The hash of the output schema the run began with: a changed type is refused."""
    value: dict[str, Any]


class OutputVerdict(_Frozen):
    """The validated, normalised value, or what was wrong with it."""

    valid: bool
    value: dict[str, Any] | None = None
    errors: str = ""


class ToolPreparation(_Frozen):
    """Arguments checked and coerced before the policy, a person or the tool sees them."""

    valid: bool
    error: str = ""
    needs_approval: bool = False
    arguments: dict[str, Any] | None = None
    """The validated, coerced arguments the policy, the approval and the tool all see; None
    from a worker that predates them (the model's arguments stand)."""


class ToolOutcome(_Frozen):
    """A tool step's result, as it goes back to the model."""

    content: str | list[RichBlock]
    is_error: bool = False
    attempt: int = 1
    reconciled: bool = False
    """True when the effect was found already done downstream and not executed again."""


# --- Workflow state -------------------------------------------------------------------------


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
    stored_hash: str = ""
    """Chain head the transcript store holds (sent with the last model step)."""
    stored_len: int = 0
    compacted_turns: int = 0
    """Turns folded into a summary so far."""
    resumes: int = 0
    """How many times an operator said `resume`: a parked model step retries on each."""
    last_model_error: str = ""
    """The error that parked the run in `model_unavailable`, in one line."""
    watched_until: str = ""
    """A reader's lease (`watch` signal): until then model steps stream their words live."""
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
    """What the ledger no longer carries (`HistoryBudget` bounds what state a run carries)."""
    ignored_dropped: int = 0
    """Refused signals beyond `HistoryBudget.keep_ignored_signals`, no longer listed."""


RunInput.model_rebuild()
