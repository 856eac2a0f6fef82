"""Clients of the session's dev server that keep large payloads in a store, as a worker does."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from waypoint.stores.payloads import DEFAULT_THRESHOLD, data_converter


async def store_client(
    env: WorkflowEnvironment, store: Path, threshold: int = 512, keys: str | None = None
) -> Client:
    """A client whose payloads above `threshold` go to `store`, as the worker and CLI do."""
    return await Client.connect(
        env.client.service_client.config.target_host,
        namespace=env.client.namespace,
        data_converter=data_converter(store, threshold, keys),
    )


async def default_store_client(
    env: WorkflowEnvironment, store: Path, keys: str | None = None
) -> Client:
    """A client with the store as a deployment has it: the default threshold."""
    return await store_client(env, store, DEFAULT_THRESHOLD, keys)
