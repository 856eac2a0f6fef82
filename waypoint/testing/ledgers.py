"""Two runs' ledgers compared, as the kill test does: the same steps, in order, ending alike."""

from __future__ import annotations

from waypoint.protocol import RunResult


def shape(result: RunResult) -> list[tuple[str, str, str | None, str]]:
    """Each ledger line as compared: step, kind, tool and how it ended."""
    return [(r.step_id, r.kind, r.tool, r.status) for r in result.ledger]


def first_difference(ref: RunResult, got: RunResult) -> str:
    """The first ledger line where the runs part, both sides shown; '' when they match."""
    want, have = shape(ref), shape(got)
    for i, (a, b) in enumerate(zip(want, have, strict=False)):
        if a != b:
            return f"ledger differs at line {i + 1}: {_line(b)} vs {_line(a)} uninterrupted"
    if len(want) != len(have):
        i = min(len(want), len(have))
        extra = have[i] if len(have) > i else want[i]
        side = "only the killed run" if len(have) > i else "only the uninterrupted run"
        return (
            f"ledger differs at line {i + 1}: {side} has {_line(extra)} "
            f"({len(have)} lines vs {len(want)})"
        )
    return ""


def _line(shape: tuple[str, str, str | None, str]) -> str:
    step, _, _, status = shape
    return f"{step} {status}"
