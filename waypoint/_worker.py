"""Build a worker from agents: `WaypointPlugin` on a `Worker` for the shared queue.

What it connects to and which stores it uses come from `waypoint.settings`.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from waypoint._agent import Agent, with_children
from waypoint._notify.config import NotifyConfig, load_notify
from waypoint._notify.links import load_secret
from waypoint._operations.deploys import deployment_config
from waypoint._plugin import WaypointPlugin, WorkerOptions
from waypoint._plugin import workflow_runner as workflow_runner
from waypoint._providers.scripted import ScriptedModel
from waypoint._security.redaction import route_warnings
from waypoint.errors import AgentNotFoundError, SettingsError
from waypoint.settings import DEFAULT_TASK_QUEUE, Settings, transcript_store


def load_agents(app: str) -> list[Agent]:
    """Import `module:attribute` and return the agents it names."""
    module_name, _, attr = app.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = getattr(importlib.import_module(module_name), attr or "agents")
    except (ImportError, AttributeError) as err:
        raise AgentNotFoundError(f"cannot load agents from {app!r}: {err}") from err
    except Exception as err:  # the module itself failed, e.g. a setting it reads is missing
        raise AgentNotFoundError(
            f"cannot load agents from {app!r}: importing it raised {type(err).__name__}: {err}"
        ) from err
    if callable(target) and not isinstance(target, Agent):
        try:
            target = target()
        except TypeError as err:
            raise AgentNotFoundError(f"cannot call {app!r} to get its agents: {err}") from err
    try:
        agents = [target] if isinstance(target, Agent) else list(target)
    except TypeError:
        agents = [target]
    if not agents or not all(isinstance(a, Agent) for a in agents):
        raise AgentNotFoundError(
            f"{app!r} names a {type(target).__name__}, not an Agent, a list of Agents or a "
            "function returning them"
        )
    return agents


def notice_activities(target: str) -> list[Any]:
    """Import `module:attribute`, a function, and call it: the notice activities it returns."""
    module_name, _, attr = target.partition(":")
    try:
        return list(getattr(importlib.import_module(module_name), attr)())
    except (ImportError, AttributeError, TypeError) as err:
        raise SettingsError(f"WAYPOINT_NOTICE_ACTIVITIES={target!r}: {err}") from err


def build_worker(
    client: Client,
    agents: Sequence[Agent],
    *,
    task_queue: str = DEFAULT_TASK_QUEUE,
    options: WorkerOptions | None = None,
    **worker_options: Any,
) -> Worker:
    """A worker that runs `AgentWorkflow` on `task_queue`, and these agents' steps.

    Runs, queries and decisions are served from `task_queue` by any worker; each agent's steps
    come from its own queue (`waypoint.protocol.queues`), which the worker polls too, so workers
    on one queue may host different agents and a run still never reaches a worker without its
    agent. It is `Worker(client, task_queue=..., plugins=[WaypointPlugin(agents, options)])`.

    Args:
        client: A client connected with the pydantic data converter (`waypoint.connect`).
        agents: The agents this worker can run.
        task_queue: The queue runs are started on.
        options: How it calls Claude, where it keeps what, whom it trusts (`WorkerOptions`).
        worker_options: Passed to `temporalio.worker.Worker` (e.g. `max_cached_workflows`,
            `graceful_shutdown_timeout` to let running tools finish when the worker stops, as
            `waypoint worker` does, or `deployment_config` from
            `waypoint._operations.deploys.deployment_config` to version it); `workflows`
            replaces `AgentWorkflow` and `LiveStreamWorkflow` (`[]`: steps only).
    """
    plugin = WaypointPlugin(agents, options, workflows=worker_options.pop("workflows", None))
    return Worker(client, task_queue=task_queue, plugins=[plugin], **worker_options)


def worker_from_settings(
    client: Client, agents: Sequence[Agent], settings: Settings, notify: NotifyConfig | None = None
) -> Worker:
    """`build_worker` configured from `Settings` (what `waypoint worker` runs).

    `notify`: channels and routes in place of the notifications file's (`waypoint demo`).

    Raises:
        NotifyConfigError: The notifications file does not read or fit these agents.
    """
    from waypoint._providers.pricing import (
        use_price_file,  # not at the top: keep it out of the sandbox
    )

    route_warnings()  # through the log's handlers (and, with encryption on, its redaction)
    use_price_file(settings.prices_file)
    worker_options: dict[str, Any] = {
        "max_cached_workflows": settings.max_cached_workflows,
        "graceful_shutdown_timeout": timedelta(seconds=settings.drain_seconds),
    }
    if version := deployment_config(settings.deployment, settings.build_id):
        worker_options["deployment_config"] = version
    if settings.notice_activities:
        worker_options["activities"] = notice_activities(settings.notice_activities)
    scripts = {a.name: a.script for a in with_children(agents) if a.script is not None}
    keys = {}
    if settings.decision_keys:
        from waypoint._security.signing import load_public_keys  # cryptography: not in the sandbox

        keys = load_public_keys(settings.decision_keys)
    if notify is None:
        notify = load_notify(settings.notify_file, os.environ, with_children(agents))
    secret = load_secret(settings.console_secret_file) if notify.console_url else ""
    options = WorkerOptions(
        claude=settings.claude_backend if settings.use_anthropic else None,
        model_timeout=settings.model_timeout,
        scripted=ScriptedModel(scripts, latency=settings.scripted_latency),
        step_log=settings.step_log,
        transcripts=transcript_store(settings),
        decision_keys=keys,
        refuse_plaintext=settings.refuse_plaintext,
        attempt_journal=settings.attempt_journal,
        notify=notify,
        console_secret=secret,
    )
    return build_worker(
        client, agents, task_queue=settings.task_queue, options=options, **worker_options
    )
