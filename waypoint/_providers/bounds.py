"""A reply's tool input is bounded before it is recorded, so a run can always read its history.

An input deeper or larger than the agent's `SizeLimits` (`waypoint.protocol.bounds`) is marked
invalid, whatever the provider: the call never runs and the model reads an error result and
may try again, as for a call cut off by `max_tokens`.
"""

from __future__ import annotations

from waypoint.protocol import ModelResponse, ToolUseBlock
from waypoint.protocol.bounds import SizeLimits, why_unbounded


def bounded(response: ModelResponse, bounds: SizeLimits) -> ModelResponse:
    """`response` with each oversized tool call marked invalid and its input dropped."""
    blocks = list(response.content)
    changed = False
    for i, block in enumerate(blocks):
        if isinstance(block, ToolUseBlock) and block.invalid is None:
            why = why_unbounded(block.input, bounds)
            if why is not None:
                blocks[i] = block.model_copy(update={"input": {}, "invalid": why})
                changed = True
    return response.model_copy(update={"content": blocks}) if changed else response
