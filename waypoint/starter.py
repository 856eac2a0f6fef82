"""The `waypoint` CLI: start, approve and inspect runs; run a worker or the embedded server.

A Temporal client is all most commands need, so anything here can also be done with the
`temporal` CLI or the Web UI. Connection settings come from `temporalio.envconfig`
(`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, TLS, TOML profiles); the default
is the embedded dev server on 127.0.0.1:7233.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any

import typer

from waypoint import console as out
from waypoint import runs
from waypoint.content import attachment
from waypoint.errors import ContentError, WaypointError
from waypoint.models import Correction, Limits, Resolution, ResumeRequest
from waypoint.watch import watch as follow_events
from waypoint.worker import Settings, connect, load_agents, ui_link, worker_from_settings

app = typer.Typer(
    help="Waypoint: durable Claude agents on Temporal. A run resumes, never restarts.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

STATE_DIR = Path(".waypoint")
OPERATOR = Settings.from_env().operator


def command(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async command; a `WaypointError` becomes one red line and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            asyncio.run(fn(*args, **kwargs))
        except WaypointError as err:
            out.errors.print(f"[red]error:[/] {err}")
            raise typer.Exit(1) from None

    return wrapper


def print_started(settings: Settings, run: str) -> None:
    """The id of a run just started and its Web UI link."""
    out.console.print(f"started {run}")
    out.console.print(f"web ui  {ui_link(settings, run)}")


Run = Annotated[str, typer.Argument(help="The run's workflow id.")]
Step = Annotated[str, typer.Argument(help="The step id awaiting approval, e.g. t4.tool.1.pay.")]


@app.command()
@command
async def start(
    agent: Annotated[str, typer.Argument(help="The agent's name.")],
    task: Annotated[str, typer.Argument(help="What the agent should do.")],
    run_id: Annotated[str | None, typer.Option("--id", help="Workflow id to use.")] = None,
    max_turns: Annotated[int | None, typer.Option(help="Override the agent's max turns.")] = None,
    attach: Annotated[
        list[Path] | None,
        typer.Option("--attach", help="An image or PDF sent with the task (repeatable)."),
    ] = None,
) -> None:
    """Start a run; prints its id and Web UI link."""
    try:
        attachments = [attachment(path) for path in attach or ()]
    except ContentError as err:
        out.errors.print(f"[red]error:[/] --attach {err}")
        raise typer.Exit(2) from None
    settings = Settings.from_env()
    client = await connect()
    limits = Limits(max_turns=max_turns) if max_turns else None
    handle = await runs.start_run(
        client,
        agent,
        task,
        task_queue=settings.task_queue,
        workflow_id=run_id,
        limits=limits,
        attachments=attachments,
    )
    print_started(settings, handle.id)


@app.command()
@command
async def approve(
    run: Run,
    step: Step,
    reviewer: Annotated[str, typer.Option(help="Who approves.")] = OPERATOR,
    reason: Annotated[str, typer.Option(help="Why.")] = "",
) -> None:
    """Approve a pending tool call (checked against the run's pending approvals first)."""
    pending = await runs.decide(
        await connect(), run, step, approve=True, reviewer=reviewer, reason=reason
    )
    out.console.print(f"approved {step} ({pending.tool} {json.dumps(pending.arguments)})")


@app.command()
@command
async def reject(
    run: Run,
    step: Step,
    reason: Annotated[str, typer.Option(help="Why; the model is told.")],
    reviewer: Annotated[str, typer.Option(help="Who rejects.")] = OPERATOR,
) -> None:
    """Reject a pending tool call; the model is told it was rejected and why."""
    await runs.decide(await connect(), run, step, approve=False, reviewer=reviewer, reason=reason)
    out.console.print(f"rejected {step}: {reason}")


@app.command()
@command
async def resolve(
    run: Run,
    step: Annotated[str, typer.Argument(help="The effect step that needs reconciliation.")],
    result_json: Annotated[
        str | None, typer.Option("--result", help="The outcome to record (JSON or text).")
    ] = None,
    retry: Annotated[bool, typer.Option("--retry", help="Reconcile again, then run.")] = False,
    abort: Annotated[bool, typer.Option("--abort", help="Abandon the step.")] = False,
    reason: Annotated[str, typer.Option(help="Why; recorded and told to the model.")] = "",
    reviewer: Annotated[str, typer.Option(help="Who decides.")] = OPERATOR,
) -> None:
    """Say what happened to an effect whose outcome could not be confirmed."""
    chosen = [
        name
        for name, on in (("result", result_json is not None), ("retry", retry), ("abort", abort))
        if on
    ]
    if len(chosen) != 1:
        raise WaypointError("give exactly one of --result JSON, --retry or --abort")
    resolution = Resolution(
        step_id=step,
        action=chosen[0],  # type: ignore[arg-type]
        result=result_json or "",
        reviewer=reviewer,
        reason=reason,
    )
    await runs.resolve(await connect(), run, resolution)
    out.console.print(f"resolved {step}: {chosen[0]}")


@app.command()
@command
async def status(run: Run) -> None:
    """Show a run's state, pending approvals, tokens and cost."""
    current = await runs.status(await connect(), run)
    for line in out.status_lines(run, current):
        out.console.print(line)


@app.command()
@command
async def ledger(run: Run) -> None:
    """Show every step of a run as a table."""
    out.console.print(out.ledger_table(await runs.ledger(await connect(), run)))


@app.command("list")
@command
async def list_runs(
    limit: Annotated[int, typer.Option(help="How many runs to show.")] = 20,
) -> None:
    """List recent Waypoint runs, newest first."""
    client = await connect()
    table = out.Table()
    for column in ("run", "agent", "state", "turns", "cost", "started"):
        table.add_column(column)
    count = 0
    async for wf in client.list_workflows("WorkflowType = 'AgentWorkflow'", limit=limit):
        attrs = {k.name: v for k, v in wf.typed_search_attributes}
        cost = attrs.get("WaypointCostUsd")
        table.add_row(
            wf.id,
            str(attrs.get("WaypointAgent", "")),
            str(attrs.get("WaypointStatus", wf.status.name.lower() if wf.status else "")),
            str(attrs.get("WaypointTurns", "")),
            out.money(cost) if isinstance(cost, float) else "",
            wf.start_time.strftime("%Y-%m-%d %H:%M:%S"),
        )
        count += 1
    out.console.print(table if count else "no runs yet: try `waypoint demo`")


@app.command()
@command
async def result(
    run: Run,
    wait: Annotated[bool, typer.Option(help="Wait for the run to finish.")] = True,
) -> None:
    """Print a run's final output (waits for it to finish unless --no-wait)."""
    client = await connect()
    await runs.exists(client, run)
    handle = runs.handle(client, run)
    if not wait:
        description = await handle.describe()
        if description.status is not None and description.status.name == "RUNNING":
            raise WaypointError(f"run {run} is still running (see `waypoint status {run}`)")
    final = await handle.result()
    out.console.print(final.output)
    out.console.print(
        f"[dim]{final.stop_reason} after {final.turns} turns, "
        f"{final.total_tokens:,} tokens, {out.money(final.cost_usd)}[/]"
    )


@app.command()
@command
async def cancel(run: Run) -> None:
    """Cancel a run; in-flight steps are cancelled and the run ends as cancelled."""
    client = await connect()
    await runs.exists(client, run)
    await runs.handle(client, run).cancel()
    out.console.print(f"cancellation requested for {run}")


@app.command()
@command
async def inspect(run: Run) -> None:
    """Print the run's whole state as JSON: spec, transcript, ledger, waits, counters."""
    out.console.print_json((await runs.state(await connect(), run)).model_dump_json())


@app.command()
@command
async def correct(
    run: Run,
    step: Annotated[
        str | None, typer.Option(help="Finished tool step whose recorded result to replace.")
    ] = None,
    result_text: Annotated[
        str | None, typer.Option("--result", help="The corrected result.")
    ] = None,
    note: Annotated[str | None, typer.Option(help="A note the model reads next turn.")] = None,
    reason: Annotated[str, typer.Option(help="Why; recorded in the ledger.")] = "",
    reviewer: Annotated[str, typer.Option(help="Who corrects.")] = OPERATOR,
) -> None:
    """Replace a recorded tool result and/or leave a note for the model's next turn."""
    if (step is None) != (result_text is None):
        raise WaypointError("--step and --result go together")
    if step is None and not note:
        raise WaypointError("give --step STEP --result TEXT, or --note TEXT, or both")
    correction = Correction(
        step_id=step, result=result_text, note=note, reviewer=reviewer, reason=reason
    )
    await runs.correct(await connect(), run, correction)
    out.console.print(f"correction sent to {run}; see `waypoint ledger {run}`")


@app.command()
@command
async def fork(
    run: Run,
    after_turn: Annotated[int, typer.Option(help="Reuse everything up to the end of this turn.")],
    note: Annotated[str | None, typer.Option(help="A note for the model in the new run.")] = None,
    run_id: Annotated[str | None, typer.Option("--id", help="Workflow id of the fork.")] = None,
) -> None:
    """Start a new run from a finished turn of RUN; nothing before that point runs again."""
    settings = Settings.from_env()
    handle = await runs.fork(
        await connect(),
        run,
        after_turn,
        task_queue=settings.task_queue,
        note=note,
        workflow_id=run_id,
    )
    print_started(settings, handle.id)


@app.command()
@command
async def terminate(
    run: Run,
    reason: Annotated[str, typer.Option(help="Why; shown in the Web UI.")],
) -> None:
    """Stop a run at once, without cleanup (prefer `cancel`)."""
    client = await connect()
    await runs.exists(client, run)
    await runs.handle(client, run).terminate(reason=reason)
    out.console.print(f"terminated {run}: {reason}")


@app.command()
@command
async def resume(
    run: Run,
    max_turns: Annotated[int | None, typer.Option(help="New max turns.")] = None,
    max_cost_usd: Annotated[float | None, typer.Option(help="New cost budget.")] = None,
    max_total_tokens: Annotated[int | None, typer.Option(help="New token budget.")] = None,
) -> None:
    """Continue a parked run: retry a model step after an outage, or raise its limits."""
    client = await connect()
    current = await runs.status(client, run)
    if current.state == "model_unavailable":
        request = ResumeRequest(reviewer=OPERATOR)
        await runs.handle(client, run).signal("resume", request)
        out.console.print(f"resuming {run}: its model step is retried ({current.detail})")
        return
    limits = await runs.handle(client, run).query("limits", result_type=Limits)
    changes = {
        k: v
        for k, v in {
            "max_turns": max_turns,
            "max_cost_usd": max_cost_usd,
            "max_total_tokens": max_total_tokens,
        }.items()
        if v is not None
    }
    await runs.handle(client, run).signal("raise_limits", limits.model_copy(update=changes))
    out.console.print(f"limits raised for {run} ({current.state}): {changes}")


@app.command()
@command
async def watch(
    run: Run, json_lines: Annotated[bool, typer.Option("--json", help="One event a line.")] = False
) -> None:
    """Follow a run live: steps, approvals and Claude's words as they happen."""
    await follow_events(await connect(), run, json_lines)


@app.command()
@command
async def worker(
    app_path: Annotated[
        str | None, typer.Option("--app", help="module:attribute naming your agents.")
    ] = None,
) -> None:
    """Run a worker for your agents until interrupted (Ctrl-C or SIGTERM drains it)."""
    settings = Settings.from_env()
    agents = load_agents(app_path or settings.app)
    client = await connect()
    w = worker_from_settings(client, agents, settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    model = "Claude" if settings.use_anthropic else "the scripted model (offline)"
    names = ", ".join(a.name for a in agents)
    out.console.print(f"worker on queue {settings.task_queue!r}: {names}, using {model}")
    async with w:
        await stop.wait()
        out.console.print("shutting down: waiting for running activities")


@app.command()
def server(
    port: Annotated[int, typer.Option(help="gRPC port.")] = 7233,
    ui_port: Annotated[int | None, typer.Option(help="Web UI port (default port+1000).")] = None,
    state_dir: Annotated[Path, typer.Option(help="Where the SQLite file lives.")] = STATE_DIR,
    stop: Annotated[bool, typer.Option("--stop", help="Stop a detached server.")] = False,
    codec_endpoint: Annotated[
        str | None,
        typer.Option(
            help="Codec server URL the Web UI decrypts payloads through. It is visible in `ps` "
            "and in the UI's /api/v1/settings, so it must hold no token: set a token-bearing "
            "URL in the UI's own codec server settings instead."
        ),
    ] = None,
) -> None:
    """Run the embedded Temporal dev server (SQLite, Web UI) in the foreground."""
    from waypoint import server as embedded

    if codec_endpoint and _carries_codec_token(codec_endpoint):
        out.errors.print(
            "[red]error:[/] --codec-endpoint holds the codec server's token, which would show in "
            "the dev server's process arguments and /api/v1/settings. Start the server without "
            "it and set the endpoint in the Web UI's codec server settings (kept in your browser)."
        )
        raise typer.Exit(1)
    if stop:
        stopped = embedded.stop_dev_server(state_dir)
        out.console.print("server stopped" if stopped else "no detached server is running")
        return
    try:
        dev = embedded.start_dev_server(
            state_dir, port=port, ui_port=ui_port, ui_codec_endpoint=codec_endpoint
        )
    except WaypointError as err:
        out.errors.print(f"[red]error:[/] {err}")
        raise typer.Exit(1) from None
    out.console.print(f"temporal  {dev.address}\nweb ui    {dev.ui_url}\nstate     {state_dir}")
    out.console.print("[dim]Ctrl-C stops the server[/]")
    try:
        dev.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        dev.stop()


def _codec_token(token_file: Path | None) -> str:
    """The codec server's token from `token_file` or WAYPOINT_CODEC_TOKEN: never from argv."""
    from waypoint.codec_server import CodecTokenError, read_token_file

    if token_file is not None:
        return read_token_file(token_file)
    token = os.environ.get("WAYPOINT_CODEC_TOKEN", "").strip()
    if not token:
        raise CodecTokenError(
            "set WAYPOINT_CODEC_TOKEN or pass --token-file (a file only you can read); "
            "the token is never taken from the command line, where `ps` shows it"
        )
    return token


def _carries_codec_token(url: str) -> bool:
    """Whether `url` holds the codec token this shell knows (environment or token file)."""
    path = os.environ.get("WAYPOINT_CODEC_TOKEN_FILE")
    try:
        token = _codec_token(Path(path) if path else None)
    except WaypointError:
        return False
    return token in url


@app.command("codec-server")
def codec_server(
    token_file: Annotated[
        Path | None,
        typer.Option(
            envvar="WAYPOINT_CODEC_TOKEN_FILE",
            help="File holding the token (mode 600). Otherwise WAYPOINT_CODEC_TOKEN is used.",
        ),
    ] = None,
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1.")] = 8081,
    origin: Annotated[
        list[str] | None, typer.Option(help="Web UI origin allowed by CORS (repeatable).")
    ] = None,
) -> None:
    """Let the Web UI decrypt payloads: serves /decode and /encode with WAYPOINT_ENCRYPTION_KEYS."""
    from waypoint.codec_server import DEV_UI_ORIGINS, serve_codec
    from waypoint.worker import encryption_codec

    try:
        token = _codec_token(token_file)
        codec = encryption_codec(Settings.from_env())
    except WaypointError as err:
        out.errors.print(f"[red]error:[/] {err}")
        raise typer.Exit(1) from None
    if codec is None:
        out.errors.print("[red]error:[/] set WAYPOINT_ENCRYPTION_KEYS (see `waypoint.codec`)")
        raise typer.Exit(1)
    httpd = serve_codec(codec, token, "127.0.0.1", port, origin or DEV_UI_ORIGINS)
    out.console.print(f"codec server on http://127.0.0.1:{port}")
    out.console.print(
        f"web ui: in its codec server settings, set http://127.0.0.1:{port}/<token> "
        "and choose your browser's setting"
    )
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()


@app.command()
@command
async def demo(
    yes: Annotated[bool, typer.Option("--yes", help="Approve without asking.")] = False,
    stop_server: Annotated[
        bool, typer.Option(help="Stop the embedded server the demo started when it ends.")
    ] = False,
) -> None:
    """Onboard a vendor end to end: server, worker, a run that pauses for approval."""
    from waypoint.demo import run_demo

    await run_demo(Settings.from_env(), approve_all=yes, stop_server=stop_server)


@app.command()
@command
async def killtest(
    kills: Annotated[int, typer.Option(help="How many times to SIGKILL the worker.")] = 5,
    seed: Annotated[int, typer.Option(help="Seed for the random kill moments.")] = 1,
) -> None:
    """Prove it: run the demo while SIGKILLing its worker at random moments, then count."""
    import random
    import tempfile

    from examples.vendor_onboarding import DEMO_TASK
    from examples.vendor_onboarding.downstream import count_emails, count_vendors
    from waypoint.testing import KillPoint, run_kill_test

    client = await connect()
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="waypoint-killtest-") as tmp:
        downstream = Path(tmp) / "downstream"
        report = await run_kill_test(
            client,
            app="examples.vendor_onboarding:agents",
            agent="vendor_onboarding",
            task=DEMO_TASK,
            task_queue=f"killtest-{seed}-{rng.randrange(10**6)}",
            workdir=Path(tmp),
            kill_points=[KillPoint.after_seconds(rng.uniform(0.05, 1.2)) for _ in range(kills)],
            count_effects=lambda key: (
                count_vendors(downstream, key) + count_emails(downstream, key)
            ),
            env={
                "WAYPOINT_DEMO_DIR": str(downstream),
                "WAYPOINT_SCRIPTED_LATENCY": "0.3",
                "PYTHONPATH": os.getcwd(),
            },
            timeout=120,
        )
    out.console.print(report.summary())
    if not report.ok:
        raise typer.Exit(1)


def main() -> None:
    """Console entry point; exits with os._exit so no SDK teardown can change the exit code."""
    try:
        app()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except KeyboardInterrupt:
        code = 130
    sys.stdout.flush()
    sys.stderr.flush()
    # temporalio 1.35 can abort at interpreter teardown after all work is done.
    os._exit(code)
