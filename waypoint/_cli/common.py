"""What every command shares: expected errors as one line, argument types, the client.

Exit codes: 0 done, 1 an expected error (one line on stderr), 2 a usage error (typer's).
"""

from __future__ import annotations

import asyncio
import functools
import signal
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Annotated, Any

import typer
from temporalio.client import Client, WorkflowFailureError
from temporalio.service import RPCError, RPCStatusCode

from waypoint._cli import render as out
from waypoint.client import views
from waypoint.errors import RunClosedError, WaypointError
from waypoint.settings import Settings, connect

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

OPERATOR = Settings.from_env().operator

Run = Annotated[str, typer.Argument(help="The run's workflow id.")]
Step = Annotated[str, typer.Argument(help="The step id awaiting approval, e.g. t4.tool.1.pay.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
Wide = Annotated[
    bool,
    typer.Option("--wide", help="Every cell whole, on a terminal too (piped output always is)."),
]


def opt(help: str, metavar: str | None = None, **more: Any) -> Any:
    """A `typer.Option` by its help and the placeholder its value shows (`N`, `FILE`)."""
    return typer.Option(help=help, metavar=metavar, **more)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print one red line on stderr; raise what this returns."""
    out.errors.print(f"[red]error:[/] {message}")
    return typer.Exit(code)


def one_line(err: BaseException) -> str:
    """An unexpected Temporal error as one line: its message, first line only."""
    text = getattr(err, "message", "") or str(err) or type(err).__name__
    return text.strip().splitlines()[0] if text.strip() else type(err).__name__


def command(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async command; an expected error becomes one red line and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            asyncio.run(fn(*args, **kwargs))
        except WaypointError as err:
            raise fail(str(err)) from None
        except WorkflowFailureError as err:
            raise fail(f"the run failed: {one_line(err.cause)}") from None
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise fail(f"not found: {one_line(err)} (see `waypoint list`)") from None
            raise fail(f"temporal: {one_line(err)}") from None

    return wrapper


async def client() -> Client:
    """A client for the configured server (a one-line hint when there is none)."""
    return await connect()


def signing_key() -> Ed25519PrivateKey | None:
    """The reviewer's key (`WAYPOINT_DECISION_KEY`), when set: every decision is signed with it."""
    spec = Settings.from_env().decision_key
    if not spec:
        return None
    from waypoint._security.signing import load_private_key

    return load_private_key(spec)


async def open_run(client: Client, run: str, action: str) -> views.RunView:
    """The run's view from the server alone, refusing `action` on a run that has ended."""
    view = await views.view(client, run, ask_worker=False)
    if view.closed:
        why = f" ({view.reason})" if view.reason else ""
        raise RunClosedError(f"run {run!r} is {view.execution}{why}: cannot {action} it")
    return view


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def interrupt_on_stop_signals() -> None:
    """Ctrl-C and SIGTERM both raise KeyboardInterrupt, so a foreground command cleans up.

    Set explicitly: a process started in the background by a shell without job control
    inherits SIGINT ignored (Python then never raises KeyboardInterrupt), and SIGTERM, what
    `kill`, systemd and docker send, would otherwise end Python at once and orphan children.
    """
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.default_int_handler)
    unblock_stop_signals()


def hold_stop_signals() -> None:
    """Hold SIGINT and SIGTERM for `signal.sigwait(STOP_SIGNALS)`, in this thread and its children.

    For a command that serves from threads until stopped: the signal is taken when the main
    thread asks for it, never raised into whatever it was doing. A KeyboardInterrupt that lands
    between a lock's acquire and its `try` leaves the lock held, and the exit then hangs on it.
    A held signal is kept even where the process inherited it ignored.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # first: none can land in between
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.default_int_handler)


def unblock_stop_signals() -> None:
    """Let SIGINT and SIGTERM through even if the process was started with them blocked.

    A process started from a thread that blocks them (as `multiprocessing` does while it spawns
    a helper) inherits them blocked, and would never see a stop signal at all.
    """
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
