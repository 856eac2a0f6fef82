"""The types workflow code may import: stdlib, pydantic and each other, nothing with I/O.

Every pydantic type that crosses a Temporal boundary is here; Anthropic's SDK types are
converted to and from them only inside the model activity, so history never depends on an SDK
version. The package is split by what a type is about:

- `messages`: content blocks and messages;
- `spec`: the agent spec snapshotted at start, and the options a run is started with;
- `run`: a run's input, ledger, status, memo, result and carried state;
- `decisions`: what people send a run and what it waits for them on;
- `steps`: activity inputs and results;
- `verbs`: every verb people send a run, its payload, role, handler and receipt;
- `policy`, `output`, `events`, `signatures`, `hashing`, `queues`, `answer_schema`,
  `search_attributes`: the pure rules and names the loop and its clients share.

`from waypoint.protocol import RunInput` reaches every type of the first five.
"""

from __future__ import annotations

import warnings
from typing import Any

from waypoint.protocol.base import (
    OutputT,
    RunState,
    StepStatus,
    ToolKind,
)
from waypoint.protocol.billing import CallPrice, PriceTier, Usage
from waypoint.protocol.bounds import SizeLimits
from waypoint.protocol.decisions import (
    APPROVED_NOT_RUN,
    ApprovalDecision,
    ClientAnswer,
    Correction,
    Escalation,
    IgnoredSignal,
    PendingApproval,
    PendingQuestion,
    PendingSteer,
    Resolution,
    ResumeRequest,
    Steer,
    Unresolved,
)
from waypoint.protocol.messages import (
    ContentBlock,
    DocumentBlock,
    ImageBlock,
    Message,
    RedactedThinkingBlock,
    RichBlock,
    SearchResultBlock,
    ServerBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    text_of,
)
from waypoint.protocol.run import (
    MEMO_KEY,
    AgentState,
    ApprovalOutcome,
    Container,
    ForkSource,
    FreshReads,
    LedgerArchive,
    ParentLink,
    RunInput,
    RunMemo,
    RunResult,
    RunStatus,
    StepRecord,
)
from waypoint.protocol.spec import (
    AgentSpec,
    HistoryLimits,
    HistoryOverride,
    Limits,
    LimitsOverride,
    ModelSettings,
    ServerToolSpec,
    StepOptions,
    ToolOverride,
    ToolSpec,
)
from waypoint.protocol.steps import (
    LoadSpecInput,
    ModelRequest,
    ModelResponse,
    OutputCheck,
    OutputVerdict,
    PartialSpend,
    ToolCall,
    ToolOutcome,
    ToolPreparation,
)
from waypoint.protocol.verbs import VERBS, DecisionReceipt, Receipt, Verb

__all__ = [
    "APPROVED_NOT_RUN",
    "AgentSpec",
    "AgentState",
    "ApprovalDecision",
    "ApprovalOutcome",
    "CallPrice",
    "ClientAnswer",
    "Container",
    "ContentBlock",
    "Correction",
    "DecisionReceipt",
    "DocumentBlock",
    "Escalation",
    "ForkSource",
    "FreshReads",
    "SizeLimits",
    "HistoryLimits",
    "HistoryOverride",
    "IgnoredSignal",
    "ImageBlock",
    "LedgerArchive",
    "Limits",
    "LimitsOverride",
    "LoadSpecInput",
    "MEMO_KEY",
    "Message",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "OutputCheck",
    "OutputT",
    "OutputVerdict",
    "ParentLink",
    "PartialSpend",
    "PendingApproval",
    "PendingQuestion",
    "PendingSteer",
    "PriceTier",
    "ServerToolSpec",
    "RedactedThinkingBlock",
    "Resolution",
    "Receipt",
    "ResumeRequest",
    "RichBlock",
    "SearchResultBlock",
    "ServerBlock",
    "RunInput",
    "RunMemo",
    "RunResult",
    "RunState",
    "RunStatus",
    "StepOptions",
    "StepRecord",
    "StepStatus",
    "Steer",
    "TextBlock",
    "ThinkingBlock",
    "ToolCall",
    "ToolKind",
    "ToolOutcome",
    "ToolPreparation",
    "ToolOverride",
    "ToolResultBlock",
    "ToolSpec",
    "ToolUseBlock",
    "Unresolved",
    "Usage",
    "VERBS",
    "Verb",
    "text_of",
]

_RENAMED = {"Bounds": "SizeLimits", "HistoryBudget": "HistoryLimits"}
"""Old names a user may have imported: each warns once, then goes at the first release."""


def __getattr__(name: str) -> Any:
    """An old name: warn, then keep it here so the warning comes once."""
    new = _RENAMED.get(name)
    if new is None:
        raise AttributeError(f"module 'waypoint.protocol' has no attribute {name!r}")
    warnings.warn(
        f"waypoint.protocol.{name} is now {new}; the old name goes at the first release",
        DeprecationWarning,
        stacklevel=2,
    )
    globals()[name] = value = globals()[new]
    return value
