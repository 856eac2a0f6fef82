"""Waypoint's exceptions, each saying how to fix the problem.

```
WaypointError
├── ToolDefinitionError      a tool cannot be made safe or is declared wrongly (at import time)
├── AgentNotFoundError       the worker has no agent of that name
├── ModelNotConfiguredError  no API key and no script for the agent's model
├── ServerNotReachableError  no Temporal server at the configured address
├── ProfileError             the Temporal connection profile cannot be loaded
├── DevServerError           the embedded dev server cannot start (waypoint._operations.dev_server)
│   ├── TemporalBinaryNotFoundError, ServerStartError
│   ├── ServerAlreadyRunningError
│   └── PortInUseError
├── RunNotFoundError         no run with that id
├── RunStuckError            the run's workflow task fails (e.g. non-determinism after a deploy)
├── RunClosedError           the run has ended: nothing can be approved, resumed or corrected
├── RunIdTakenError          a start names the id of a running run, or of one that already ran
├── AgentNotHostedError      a start names an agent no polling worker on the queue hosts
├── StepNotPendingError      an approval names a step that is not waiting for one
├── DecisionRefusedError     the run refused a decision (stale hash, already decided)
├── SearchAttributesMissingError  the server lacks Waypoint's search attributes
├── DeployError              a worker deployment or build is unknown or misconfigured
├── ContentError             an image or document Claude cannot read: unknown type, too big
├── EncryptionKeyError       key material is malformed, or a payload names an unknown key
├── DecisionKeyError         a reviewer's signing key or the worker's public keys are malformed
├── PriceFileError           the negotiated-prices file (WAYPOINT_PRICES) cannot be used
├── StoreConfigError         WAYPOINT_STORE is not s3://bucket/prefix, or boto3 is missing
├── SettingsError            another WAYPOINT_* setting has a value that cannot be used
├── NotifyConfigError        the notifications file (WAYPOINT_NOTIFY) does not read or fit
├── StoreUnavailableError    the bucket denies access or keeps throttling after retries
├── EffectNotApplied         raised BY an effect tool: it is certain nothing happened downstream
├── ToolReportedError        raised BY a tool: answer the model with this error (e.g. MCP isError)
├── PayloadDecryptionError   a payload fails authentication: wrong key or altered data
└── StoredPayloadError       a storage reference is refused: not a digest, not a regular file,
                             missing, or its blob does not match its digest
```
"""

from __future__ import annotations


class WaypointError(Exception):
    """Base class for every error Waypoint raises on purpose."""


class ToolDefinitionError(WaypointError):
    """A tool is declared in a way Waypoint cannot run safely."""


class AgentNotFoundError(WaypointError):
    """The worker was asked for an agent it does not have."""


class ModelNotConfiguredError(WaypointError):
    """The agent's model cannot be called: no API key and no offline script."""


class ServerNotReachableError(WaypointError):
    """No Temporal server answers at the configured address."""


class ProfileError(WaypointError):
    """The Temporal connection profile (TEMPORAL_CONFIG_FILE, TEMPORAL_PROFILE) cannot be used."""


class RunNotFoundError(WaypointError):
    """No workflow run with the given id exists."""


class RunStuckError(WaypointError):
    """The run's workflow task keeps failing, so it cannot answer or make progress."""


class RunClosedError(WaypointError):
    """The run has ended, so it cannot take a decision, a correction or a resume."""


class RunIdTakenError(WaypointError):
    """A start names a run id that is running, or that already ran (a rerun must say so)."""


class AgentNotHostedError(WaypointError):
    """A start names an agent that no worker polling the queue hosts, so the run would wait.

    A misspelt name, or a worker still being deployed: `start_run(..., queue_anyway=True)`
    (`waypoint start --queue-anyway`) starts the run all the same, and it waits for one.
    """

    def __init__(self, message: str, *, agent: str, task_queue: str, hosted: list[str]) -> None:
        super().__init__(message)
        self.agent = agent
        self.task_queue = task_queue
        """The shared queue the start named."""
        self.hosted = hosted
        """The agents workers on that queue host now, of those that have had runs there."""


class DecisionRefusedError(WaypointError):
    """The run refused an approve, reject or resolve; the message is the run's reason."""


class SearchAttributesMissingError(WaypointError):
    """The Temporal namespace lacks Waypoint's search attributes (`waypoint setup` adds them)."""


class StepNotPendingError(WaypointError):
    """An approval or rejection names a step that is not awaiting approval."""


class ContentError(WaypointError, ValueError):
    """An image or document is missing, of a type Claude does not read, or over an API limit."""


class StoreConfigError(WaypointError, ValueError):
    """`WAYPOINT_STORE` cannot be used: not an `s3://bucket/prefix` URL, or boto3 is missing."""


class SettingsError(WaypointError, ValueError):
    """A `WAYPOINT_*` environment variable has a value Waypoint cannot use."""


class NotifyConfigError(WaypointError, ValueError):
    """The notifications file does not read or fit: `file:line: where: what`, never a secret."""


class StoreUnavailableError(WaypointError):
    """The store's bucket denied a request or kept throttling it after boto3's own retries."""


class EncryptionKeyError(WaypointError, ValueError):
    """Key material is malformed, or a payload names a key this process does not have."""


class DecisionKeyError(WaypointError, ValueError):
    """A decision signing key (WAYPOINT_DECISION_KEY) or public key list is malformed."""


class PriceFileError(WaypointError, ValueError):
    """The file of negotiated prices is missing, unparsable or has a malformed entry."""


class PayloadDecryptionError(WaypointError):
    """An encrypted payload failed authentication: the wrong key for its id, or altered data."""


class EffectNotApplied(WaypointError):
    """Raise this from an effect tool only when you are sure the effect did not happen.

    The model is then told the call failed, and may try again. Any other exception from an
    effect tool means "it may have happened": Waypoint reconciles by the effect key and, if it
    still cannot tell, parks the step for an operator. Never the model's guess.
    """


class ToolReportedError(WaypointError):
    """Raise this from a tool to answer the model with an error result; the step completes.

    The tool's system answered, with an error (an MCP `isError` result): recorded, not retried.
    """


class StoredPayloadError(WaypointError, ValueError):
    """A payload's storage reference was refused or its blob is missing or fails verification."""


class DeployError(WaypointError):
    """A worker deployment or build is unknown, or worker versioning is half configured."""
