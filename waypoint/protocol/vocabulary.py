"""Words more than one room writes: Claude's stop reasons and the loop's failure types.

A stop reason is what the provider says and the workflow acts on; a failure type is the
`ApplicationError.type` one room raises (an activity, the provider, an MCP tool) and another
reads (the workflow, which decides what the step becomes, and the harnesses that judge it).
"""

from __future__ import annotations

# Stop reasons (`ModelResponse.stop_reason`) the loop acts on.
END_TURN = "end_turn"
TOOL_USE = "tool_use"
MAX_TOKENS = "max_tokens"
"""Cut off: a call in the reply is never executed."""
PAUSE_TURN = "pause_turn"
"""A server tool's long turn paused: the reply is sent back to go on."""
REFUSAL = "refusal"
"""The run ends `refused`."""
CONTEXT_FULL = "model_context_window_exceeded"
"""The transcript fills the context window: compacted, or the run parks."""

# Failure types the workflow handles rather than retries.
NEEDS_RECONCILIATION = "NeedsReconciliation"
"""An effect may have happened and could not be confirmed: the run parks."""
TOOL_CHANGED = "ToolChanged"
"""A tool's contract changed under the run (a deploy, an MCP server): `on_change` decides."""
EFFECT_NOT_APPLIED = "EffectNotApplied"
"""The tool says its effect did not happen: the model may be told it failed."""
TRANSCRIPT_MISSING = "TranscriptMissing"
"""The stored transcript a model step starts from is gone or forged: the step resends it."""
CONTEXT_WINDOW_EXCEEDED = "ContextWindowExceeded"
"""The API refused the prompt as too long: compacted, or the run parks."""
INVALID_REQUEST = "InvalidRequest"
"""The API rejected the request itself: the run parks in `request_invalid`."""
UNKNOWN_MODEL = "UnknownModel"
"""The model (or a server tool on it) is not one the API serves: the run parks."""
MODEL_NOT_CONFIGURED = "ModelNotConfigured"
"""No API key and no script: the worker cannot call any model for the agent."""
CANNOT_FORK = "CannotFork"
"""A fork's source cannot be forked at the turn asked for."""
API_ERROR = "AnthropicAPIError"
"""The API answered a status no other type names (a 5xx, a 529, a 429 with no retry)."""
AUTH_ERROR = "AnthropicAuthError"
"""The API refused the key (401, 403): the run parks until the worker's credentials change."""
API_REFUSED = frozenset({API_ERROR, AUTH_ERROR, INVALID_REQUEST, CONTEXT_WINDOW_EXCEEDED})
"""Failure types of a call the API answered with an error status, which it does not bill; a
transport error or timeout may follow a billed answer."""
