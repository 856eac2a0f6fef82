"""OpenTelemetry traces: Temporal's spans, plus one GenAI span per model step and tool step.

Off unless configured (see `Settings`): then `connect` puts one `StepTracing` on the client,
and every worker built on that client inherits it. A run started by a traced client is one
trace::

    StartWorkflow:AgentWorkflow                 (the client that started the run)
      RunWorkflow:AgentWorkflow                 (zero-length, as Temporal makes them)
      StartActivity:waypoint.call_model
        RunActivity:waypoint.call_model         (one per attempt)
          chat claude-sonnet-4-6                (the step: gen_ai.* and waypoint.* attributes)
      StartActivity:waypoint.run_tool
        RunActivity:waypoint.run_tool
          execute_tool create_vendor

Replay safety: Temporal's `TracingInterceptor` makes no workflow span while a workflow
replays. Step spans wrap the activity itself, which runs once per attempt and never on replay.
An attempt cut off by a crash exports nothing (its span never ends); a retry's span carries
its `waypoint.attempt`. Temporal's own `StartActivity` span can still appear twice when a
workflow task is cut off by a crash, or when a query replays a run not in the worker's cache
(seen with `max_cached_workflows=0`); the step spans cannot.

Needs the `otel` extra (`opentelemetry-sdk`, `opentelemetry-exporter-otlp-proto-http`); this
module imports the SDK only when tracing is configured.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import opentelemetry.trace
from opentelemetry.trace import Status, StatusCode
from opentelemetry.util.types import AttributeValue
from temporalio import activity
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput

from waypoint._security.private import append_private, private_dir
from waypoint._security.scrub import scrub
from waypoint.protocol import ModelRequest, ModelResponse, ToolCall, ToolOutcome

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

logger = logging.getLogger(__name__)

Attributes = dict[str, AttributeValue]


def model_request_attributes(request: ModelRequest) -> Attributes:
    """What a model step asks for, in GenAI semantic-convention names."""
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": "anthropic",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": request.model,
        "gen_ai.request.max_tokens": request.max_tokens,
        "waypoint.step_id": request.step_id,
        "waypoint.turn": request.turn,
        "waypoint.agent": request.agent,
        "waypoint.provider": request.provider,
        "waypoint.purpose": request.purpose,
    }


def model_response_attributes(response: ModelResponse) -> Attributes:
    """What a model step got and cost.

    `gen_ai.usage.input_tokens` counts cached tokens too, as the convention asks; the cache
    reads and writes are also given on their own.
    """
    usage = response.usage
    attributes: Attributes = {
        "gen_ai.response.model": response.model,
        "gen_ai.response.finish_reasons": [response.stop_reason],
        "gen_ai.usage.input_tokens": usage.context_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_input_tokens,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_creation_input_tokens,
    }
    if response.cost_usd is not None:
        attributes["waypoint.cost_usd"] = response.cost_usd
    return attributes


def tool_call_attributes(call: ToolCall) -> Attributes:
    """Which tool a tool step runs, and the effect key downstream deduplicates on."""
    attributes: Attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.tool,
        "gen_ai.tool.type": "function",
        "waypoint.step_id": call.step_id,
        "waypoint.agent": call.agent,
    }
    if call.effect_key:
        attributes["waypoint.effect_key"] = call.effect_key
    if call.reconcile_only:
        attributes["waypoint.reconcile_only"] = True
    return attributes


def tool_outcome_attributes(outcome: ToolOutcome) -> Attributes:
    """How a tool step ended: an error the model reads, or an effect found already done."""
    return {"waypoint.tool.is_error": outcome.is_error, "waypoint.reconciled": outcome.reconciled}


class StepTracing(TracingInterceptor):
    """Temporal's tracing interceptor, with a GenAI span around each model and tool attempt."""

    provider: Any = None
    """The SDK's tracer provider behind it, when `configured_tracing` built it (to flush)."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        """Nest the step span inside Temporal's `RunActivity` span."""
        return super().intercept_activity(_StepSpans(next, self.tracer))


class _StepSpans(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, tracer: opentelemetry.trace.Tracer):
        super().__init__(next)
        self.tracer = tracer

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        arg = input.args[0] if input.args else None
        if isinstance(arg, ModelRequest):
            name, attributes = f"chat {arg.model}", model_request_attributes(arg)
        elif isinstance(arg, ToolCall) and activity.info().activity_type == "waypoint.run_tool":
            name, attributes = f"execute_tool {arg.tool}", tool_call_attributes(arg)
        else:
            return await super().execute_activity(input)
        info = activity.info()
        attributes["waypoint.attempt"] = info.attempt
        attributes["waypoint.workflow_id"] = info.workflow_id or ""
        with self.tracer.start_as_current_span(
            name,
            kind=opentelemetry.trace.SpanKind.CLIENT,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                result = await super().execute_activity(input)
            except BaseException as err:
                span.set_attribute("error.type", type(err).__name__)
                span.set_status(Status(StatusCode.ERROR, f"{type(err).__name__}: {err}"))
                raise
            if isinstance(result, ModelResponse):
                span.set_attributes(model_response_attributes(result))
            elif isinstance(result, ToolOutcome):
                span.set_attributes(tool_outcome_attributes(result))
            return result


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """One finished span as a JSON-able dict (the trace file's line format)."""
    parent = span.parent
    context = span.get_span_context()
    return {
        "name": span.name,
        "trace_id": f"{context.trace_id:032x}" if context else "",
        "span_id": f"{context.span_id:016x}" if context else "",
        "parent_id": f"{parent.span_id:016x}" if parent else None,
        "start": span.start_time,
        "end": span.end_time,
        "status": span.status.status_code.name,
        "status_description": span.status.description,
        "attributes": dict(span.attributes or {}),
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
    }


def read_trace_file(path: Path) -> list[dict[str, Any]]:
    """The spans a trace file holds, in the order they ended."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _file_exporter(path: Path) -> SpanExporter:
    """Appends each span as one JSON line as soon as it ends: what a SIGKILL cannot lose."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class JsonLinesExporter(SpanExporter):
        def __init__(self) -> None:
            self.lock = threading.Lock()

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            lines = "".join(json.dumps(span_record(s)) + "\n" for s in spans)
            with self.lock:
                append_private(path, lines)
            return SpanExportResult.SUCCESS

    private_dir(path.parent)
    return JsonLinesExporter()


_KEPT = ("name", "parent", "resource", "attributes", "links", "kind", "start_time", "end_time")
_KEPT += ("instrumentation_scope",)
"""What a span sent on keeps as it is (its status and exception events are scrubbed)."""


def _filtered(exporter: SpanExporter, *, withhold: bool) -> SpanExporter:
    """`exporter`, sent spans whose error text is scrubbed (`_security.scrub`), or withheld.

    An exception's text can hold what the run holds (an IBAN in a bank's refusal) and what a
    transport quoted (a URL's credentials, a request body): Temporal's interceptor writes it
    into the span status and records an exception event with the message and the stack trace;
    the step span writes it into its status. History is encrypted; spans are not, so with
    `withhold` (encryption on) they keep the type, the step and its ids, and no text.
    """
    # Imported here, not where a span ends: workflow spans end inside the replay sandbox.
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter

    def event_of(event: Event) -> Event:
        if event.name != "exception":
            return event
        attributes = dict(event.attributes or {})
        if withhold:
            attributes = {"exception.type": str(attributes.get("exception.type", ""))}
        else:
            attributes = {k: scrub(v) if isinstance(v, str) else v for k, v in attributes.items()}
        return Event(event.name, attributes, event.timestamp)

    def withheld(span: ReadableSpan) -> ReadableSpan:
        status = span.status
        if status.description:
            text = status.description
            status = Status(status.status_code, text.split(":", 1)[0] if withhold else scrub(text))
        return ReadableSpan(
            **{name: getattr(span, name) for name in _KEPT},
            context=span.get_span_context(),
            events=[event_of(e) for e in span.events],
            status=status,
        )

    class Withholding(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return exporter.export([withheld(s) for s in spans])

        def shutdown(self) -> None:
            exporter.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return exporter.force_flush(timeout_millis)

    return Withholding()


@functools.cache
def configured_tracing(
    otlp_endpoint: str | None, trace_file: Path | None, *, details: bool = True
) -> StepTracing | None:
    """The process's tracer provider and interceptor, built once; None if the SDK is missing.

    Args:
        otlp_endpoint: Full OTLP/HTTP traces URL; spans go there in batches.
        trace_file: Also append every span here as a JSON line (tests, debugging).
        details: Keep an error's message and stack trace in spans, scrubbed; off, they are
            withheld before any exporter sees them (the default once encryption is on).
    """
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError:
        logger.warning(
            "tracing is configured but off: install it with `pip install 'waypoint-agents[otel]'`"
        )
        return None
    resource = Resource.create()  # reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "waypoint"}))
    provider = TracerProvider(resource=resource)
    if otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        otlp: SpanExporter = OTLPSpanExporter(endpoint=otlp_endpoint)
        provider.add_span_processor(BatchSpanProcessor(_filtered(otlp, withhold=not details)))
    if trace_file:
        file = _file_exporter(trace_file)
        provider.add_span_processor(SimpleSpanProcessor(_filtered(file, withhold=not details)))
    # Global too (if nobody set one), so spans from tool code nest under their tool step.
    if isinstance(
        opentelemetry.trace.get_tracer_provider(), opentelemetry.trace.ProxyTracerProvider
    ):
        opentelemetry.trace.set_tracer_provider(provider)
    tracing = StepTracing(provider.get_tracer("waypoint"))
    tracing.provider = provider
    return tracing
