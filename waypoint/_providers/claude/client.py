"""The SDK client that reaches Claude: Anthropic's API, Amazon Bedrock or Google Vertex AI.

Credentials, regions and projects are each SDK's own environment variables
(`ANTHROPIC_API_KEY` or `ANTHROPIC_AUTH_TOKEN`, and `ANTHROPIC_BASE_URL`; `AWS_REGION` and the
AWS credential chain or `AWS_BEARER_TOKEN_BEDROCK`; `CLOUD_ML_REGION`,
`ANTHROPIC_VERTEX_PROJECT_ID` and Google's application default credentials), so no secret
passes through Waypoint. The SDK never retries: Temporal owns retries.
"""

from __future__ import annotations

from typing import TypeAlias

import anthropic
from anthropic.lib.bedrock import AsyncAnthropicBedrock
from anthropic.lib.vertex import AsyncAnthropicVertex

from waypoint._providers.claude.backends import DEFAULT_TIMEOUT, require_backend

AnthropicClient: TypeAlias = anthropic.AsyncAnthropic | AsyncAnthropicBedrock | AsyncAnthropicVertex


def build_client(backend: str = "anthropic", timeout: float = DEFAULT_TIMEOUT) -> AnthropicClient:
    """A client for the backend, retries off, configured from its SDK's environment.

    Raises:
        ModelNotConfiguredError: The backend is unknown or its extra is missing.
        ValueError: The SDK found no region (Bedrock, Vertex).
    """
    require_backend(backend)
    if backend == "bedrock":
        return AsyncAnthropicBedrock(max_retries=0, timeout=timeout)
    if backend == "vertex":
        return AsyncAnthropicVertex(max_retries=0, timeout=timeout)
    return anthropic.AsyncAnthropic(max_retries=0, timeout=timeout)
