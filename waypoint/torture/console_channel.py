"""A `console` scenario's decisions go through a real console over HTTP, as a browser's would.

The driver approves, rejects, answers, resolves, steers, resumes, raises limits, pauses and
cancels
through `waypoint console`'s API
(an operator's API token), so the console meets kills, server restarts, continue-as-new and
reruns like every other sender. In a `signed` scenario the console signs each decision with
its own key, named `torture via console`, and the worker holds that key's public half as
`console`: the run must record the decision as verified.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client

from waypoint.console.access import Console
from waypoint.console.audit import Audit
from waypoint.console.people import hash_token, new_token, save_entry
from waypoint.console.serve import RunningConsole, start_console
from waypoint.console.sessions import Sessions
from waypoint.errors import WaypointError
from waypoint.protocol import Resolution

OPERATOR = "torture"


class ConsoleChannel:
    """The console the driver decides through, and its HTTP client."""

    def __init__(self) -> None:
        self.running: RunningConsole | None = None
        self.http: httpx.AsyncClient | None = None
        self.public = ""
        """The console key's public half, for the worker's `WAYPOINT_DECISION_KEYS`."""

    async def open(self, client: Client, folder: Path, task_queue: str, signed: bool) -> None:
        """Serve a console on a free port, with an API token for the driver."""
        from waypoint.security.signing import load_private_key, new_key

        users = folder / "console-users.toml"
        token = new_token()
        save_entry(users, "tokens", OPERATOR, hash_token(token), {"*": "operator"})
        private, self.public = new_key()
        console = Console(
            client=client,
            people_file=users,
            sessions=Sessions(new_token()),
            task_queue=task_queue,
            signing_key=load_private_key(private) if signed else None,
            audit=Audit(path=folder / "console-audit.jsonl"),  # not over the soak's own lines
        )
        self.running = await start_console(console, port=0)
        # A new connection per request: one kept alive can be closed by the server's idle
        # timeout just as a post goes out on it (httpx.ReadError, soak seeds 90128 and 90138).
        self.http = httpx.AsyncClient(
            base_url=self.running.url(),
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    def follow(self, client: Client) -> None:
        """Use `client` from now on (the driver's, after a server restart)."""
        if self.running is not None:
            self.running.app.state.console.client = client

    async def close(self) -> None:
        """Stop the console."""
        if self.http is not None:
            await self.http.aclose()
        if self.running is not None:
            await self.running.stop()

    async def _post(self, run: str, verb: str, body: dict[str, Any]) -> dict[str, Any]:
        assert self.http is not None, "open() first"
        answer = await self.http.post(f"/api/runs/{run}/{verb}", json=body)
        if answer.status_code >= 500:
            raise AssertionError(f"console answered {answer.status_code} to {verb}: {answer.text}")
        if answer.status_code >= 400:
            raise WaypointError(f"console refused {verb} ({answer.status_code}): {answer.text}")
        return answer.json()

    async def decide(self, run: str, step_id: str, arguments_hash: str, approve: bool) -> None:
        """Approve or reject, bound to the hash the driver saw."""
        body = {"step_id": step_id, "arguments_hash": arguments_hash}
        if not approve:
            body["reason"] = "torture rejects it"
        await self._post(run, "approve" if approve else "reject", body)

    async def answer(self, run: str, step_id: str, result: dict[str, Any]) -> None:
        """Answer a client tool's question."""
        await self._post(run, "answer", {"step_id": step_id, "result": result})

    async def resolve(self, run: str, resolution: Resolution) -> None:
        """Say what happened to a parked effect."""
        body = {
            "step_id": resolution.step_id,
            "action": resolution.action,
            "result": resolution.result,
            "reason": resolution.reason or "torture looked",
        }
        await self._post(run, "resolve", body)

    async def steer(self, run: str, message: str) -> None:
        """Steer the agent."""
        await self._post(run, "steer", {"message": message})

    async def resume(self, run: str, *, replan: bool = False, **limits: float | None) -> None:
        """Resume a parked step, or raise the limits named (the console refuses a lower one)."""
        body: dict[str, Any] = {"replan": replan} | {k: v for k, v in limits.items() if v}
        await self._post(run, "resume", body)

    async def send(self, run: str, verb: str, reason: str) -> None:
        """A verb that takes the run and a reason (`Verb.simple`): cancel, pause, unpause."""
        await self._post(run, verb, {"reason": reason})
