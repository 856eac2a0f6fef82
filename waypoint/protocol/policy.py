"""Approval policies as data: rules over a tool and its arguments that allow, deny or ask.

A policy is a plain pydantic value, so it is snapshotted into the spec, hashed, and replaced on
a live run by an Update or signal. Matching is pure (no I/O, no eval): workflow code calls it.

How a decision combines with a tool's own `requires_approval`:
- `deny`: the call is refused and never runs; the model is told which rule denied it.
- `ask`: a person must approve, whatever the tool says.
- `allow`: no approval, unless the tool requires approval always (`requires_approval=True`).
- no rule matched and no `default`: the tool's `requires_approval` decides, as without a policy.
A remembered approval ("approve and remember for this run") turns what would be asked into
`allow`; it never lifts a `deny`. A run holds the latest `HistoryLimits.keep_remembered` of
them: one more forgets the oldest, and the calls it covered ask a person again.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from fnmatch import fnmatchcase
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from waypoint.protocol.base import _Sent
from waypoint.protocol.hashing import sha256_hex
from waypoint.protocol.signatures import DecisionId, Signed

Action = Literal["allow", "deny", "ask"]
Op = Literal["eq", "ne", "gt", "ge", "lt", "le", "in", "not_in", "glob"]

_SYMBOLS = {"eq": "==", "ne": "!=", "gt": ">", "ge": ">=", "lt": "<", "le": "<="}
_MISSING = object()
_ORDERS: dict[str, Callable[[Any, Any], Any]] = {
    "gt": operator.gt,
    "ge": operator.ge,
    "lt": operator.lt,
    "le": operator.le,
}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Condition(_Frozen):
    """One test of an argument: `amount gt 1000`, `country in [...]`, `payee glob "acme-*"`.

    `field` is a dotted path into the arguments (`invoice.total`). A missing field, or a value
    of the wrong type for the operator, never matches (a rule cannot fire on a guess). A NaN or
    infinite number has no order: compared with a threshold it matches an `ask` or `deny` rule
    and never an `allow` rule, so it cannot slip past an ask (a run never sees one: the model
    boundary refuses such calls; this guards direct callers and hand-made payloads).
    """

    field: str = Field(min_length=1)
    op: Op
    value: Any = None

    @field_validator("value")
    @classmethod
    def _fits(cls, value: Any, info: Any) -> Any:
        op = info.data.get("op")
        if op in ("in", "not_in") and not isinstance(value, list):
            raise ValueError(f"{op} needs a list value")
        if op == "glob" and not isinstance(value, str):
            raise ValueError("glob needs a string pattern")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("a threshold must be a finite number")
        return value

    def matches(self, arguments: dict[str, Any], unordered: bool = False) -> bool:
        """Whether the arguments pass this test; `unordered`: the answer for a NaN or infinity."""
        found = _lookup(arguments, self.field)
        if found is _MISSING:
            return False
        if self.op in _ORDERS and isinstance(found, float) and not math.isfinite(found):
            return unordered
        try:
            return _compare(self.op, found, self.value)
        except TypeError:
            return False

    def label(self) -> str:
        """`amount > 1000`, for ledger lines."""
        symbol = _SYMBOLS.get(self.op, self.op.replace("_", " "))
        return f"{self.field} {symbol} {_short(self.value)}"


class Rule(_Frozen):
    """When a call matches (tool name glob, tool kind, every condition), take `action`."""

    action: Action
    tool: str = "*"
    """A tool name or a glob over names (`pay`, `crm_*`)."""
    kind: Literal["pure", "read", "effect"] | None = None
    """Match only tools of this class: `kind="read"` is "allow reads"."""
    when: list[Condition] = []
    """Every condition must hold (and); write two rules for or."""
    name: str = ""
    """A label for the ledger; else one is made from the rule."""

    def matches(self, tool: str, kind: str, arguments: dict[str, Any]) -> bool:
        """Whether this rule applies to a call of `tool` (of class `kind`) with `arguments`."""
        if not fnmatchcase(tool, self.tool):
            return False
        if self.kind is not None and kind != self.kind:
            return False
        unordered = self.action != "allow"  # conservative: a NaN asks or is denied
        return all(c.matches(arguments, unordered) for c in self.when)

    def label(self) -> str:
        """`pay amount > 1000 and currency == 'EUR' -> ask`."""
        if self.name:
            return self.name
        parts = [self.tool] if self.tool != "*" else []
        if self.kind:
            parts.append(f"kind {self.kind}")
        parts.append(" and ".join(c.label() for c in self.when))
        return f"{' '.join(p for p in parts if p) or 'any call'} -> {self.action}"


class ApprovalPolicy(_Frozen):
    """Rules tried in order (the first that matches decides), then `default`."""

    rules: list[Rule] = []
    default: Action | None = None
    """What no rule decides; None leaves it to the tool's own `requires_approval`."""

    def judge(self, tool: str, kind: str, arguments: dict[str, Any]) -> Verdict | None:
        """The first matching rule's verdict, the default's, or None."""
        for number, rule in enumerate(self.rules, start=1):
            if rule.matches(tool, kind, arguments):
                return Verdict(action=rule.action, by=f"policy: rule {number} ({rule.label()})")
        if self.default is not None:
            return Verdict(action=self.default, by=f"policy: default {self.default}")
        return None

    def digest(self) -> str:
        """The policy's sha256, to tell versions apart in the ledger."""
        return sha256_hex(self.model_dump(mode="json"))


class Verdict(_Frozen):
    """What a policy decided about one call, and which rule decided it."""

    action: Action
    by: str
    remembered: bool = False
    """An approval a reviewer remembered: it also covers tools that always ask."""


class Remembered(_Frozen):
    """An approval a reviewer asked to remember for the rest of the run."""

    tool: str
    arguments: dict[str, Any] | None = None
    """None: every call of the tool; else only calls with exactly these arguments."""
    by: str
    """Who remembered it, and on which step."""

    def matches(self, tool: str, arguments: dict[str, Any]) -> bool:
        """Whether this remembered approval covers the call."""
        return tool == self.tool and (self.arguments is None or self.arguments == arguments)


class PolicySet(_Frozen):
    """A policy set on a run, with the ledger line that set it (`t1.policy.1`)."""

    step_id: str
    policy: ApprovalPolicy


class PolicyState(BaseModel):
    """A run's live policy: what it was changed to (if it was), and what was remembered."""

    policy: ApprovalPolicy | None = None
    changes: int = 0
    """How many times the policy was changed on this run; 0: the spec's policy applies."""
    kept: list[PolicySet] = Field(default=[], exclude_if=lambda v: not v)
    """The latest policies set, oldest first, each with its ledger line: a fork applies the
    one its fork point's ledger put in force (`workflows.policy.at_fork`)."""
    remembered: list[Remembered] = []
    """The latest `HistoryLimits.keep_remembered`, oldest first."""
    forgotten: int = 0
    """Remembered approvals dropped for newer ones: their calls ask again."""


class PolicyView(_Frozen):
    """What the `policy` query answers (`waypoint policy RUN show`)."""

    policy: ApprovalPolicy | None
    source: Literal["spec", "changed"]
    """`spec`: the policy the run started with; `changed`: one set on the live run."""
    changes: int = 0
    digest: str = ""
    remembered: list[Remembered] = []
    forgotten: int = 0


class PolicyChange(_Sent):
    """The payload of the `set_policy` update and signal: a new policy for a live run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: ApprovalPolicy
    reviewer: str = "unknown"
    reason: str = ""
    identity: str = ""
    """The sending Temporal client's identity, recorded with the change."""
    decision_id: DecisionId = ""
    signature: Signed = None


def verdict_for(
    policy: ApprovalPolicy | None,
    remembered: list[Remembered],
    tool: str,
    kind: str,
    arguments: dict[str, Any],
    tool_asks: bool,
) -> Verdict | None:
    """The call's verdict: the policy's, then a remembered approval for what would be asked.

    `tool_asks` says whether the tool itself would ask (its `requires_approval`), for when no
    rule decides. None: no policy decided and nothing was remembered; the tool decides alone.
    """
    verdict = policy.judge(tool, kind, arguments) if policy is not None else None
    if verdict is not None and verdict.action == "deny":
        return verdict
    asks = verdict.action == "ask" if verdict is not None else tool_asks
    if asks:
        memory = next((m for m in remembered if m.matches(tool, arguments)), None)
        if memory is not None:
            return Verdict(action="allow", by=f"remembered: {memory.by}", remembered=True)
    return verdict


def _lookup(arguments: dict[str, Any], path: str) -> Any:
    value: Any = arguments
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _compare(op: str, found: Any, expected: Any) -> bool:
    if op in _ORDERS:
        numeric = all(_number(v) for v in (found, expected))
        if not numeric and not (isinstance(found, str) and isinstance(expected, str)):
            return False
        return bool(_ORDERS[op](found, expected))
    if op == "eq":
        return found == expected
    if op == "ne":
        return found != expected
    if op == "in":
        return found in expected
    if op == "not_in":
        return found not in expected
    return isinstance(found, str) and fnmatchcase(found, str(expected))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
