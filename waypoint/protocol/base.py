"""What every protocol type shares: frozen models, fields added late, the state names."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, PrivateAttr

from waypoint.protocol.states import RunState as RunState  # defined with what each means

OutputT = TypeVar("OutputT", bound=BaseModel)

ToolKind = Literal["pure", "read", "effect"]
"""`pure`: deterministic and cheap; `read`: an external read; `effect`: changes the world."""

StepStatus = Literal[
    "scheduled",
    "completed",
    "error",
    "awaiting_approval",
    "awaiting_answer",
    "rejected",
    "needs_reconciliation",
    "aborted",
    "cancelled",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class _Sent(_Frozen):
    """What a person's client sends a run (a decision, an answer, a note, a policy)."""

    _plaintext: bool = PrivateAttr(default=False)
    """It arrived unencrypted to a worker that encrypts (`waypoint._security.plaintext`);
    never dumped."""

    def __eq__(self, other: object) -> bool:
        """Equal by fields, as any other model: how a value arrived is not part of it."""
        if type(other) is not type(self):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = _Frozen.__hash__


class _WaitingCall(_Frozen):
    """A tool call that waits on a person: its step, its tool, the arguments they look at."""

    step_id: str
    tool: str
    arguments: dict[str, Any]


def _unset(value: object) -> bool:
    """Whether a late-added field is unset, and so left out of dumps.

    Leaving it out keeps the hashes of messages recorded before the field existed (and so the
    activity ids of running runs) unchanged.
    """
    return value is None or value == "" or value == [] or value is False
