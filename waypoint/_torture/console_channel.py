"""A `console` scenario's decisions go through a real console over HTTP, as a browser's would.

The driver approves, rejects and steers through `waypoint console`'s API (an operator's API
token), and answers, resolves, resumes, raises limits, pauses and cancels (with a reason,
confirmed) through the run page's forms, signed in with a password, as a browser posts them
(the session cookie and its CSRF token; the answer's fields made from the question's answer
schema). So the console, API and pages alike, meets kills, server restarts, continue-as-new
and reruns like every other sender. A `form_start` scenario's run is started on the start form
(`waypoint._torture.starts`), by this console or, in a scenario that decides otherwise, by one
opened for the start alone. In a `signed` scenario the console signs each decision
with its own key, named `torture via console`, and the worker holds that key's public half as
`console`: the run must record the decision as verified.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client

from waypoint._console.access import Console
from waypoint._console.audit import Audit
from waypoint._console.people import hash_password, hash_token, new_token, save_entry
from waypoint._console.schema_forms import fields
from waypoint._console.serve import RunningConsole, start_console
from waypoint._console.sessions import Sessions
from waypoint._console.starts import LIMITS, StartBody
from waypoint.errors import WaypointError
from waypoint.protocol import HistoryOverride, LimitsOverride, Resolution, RunInput

OPERATOR = "torture"
PERSON = "torture-person"
"""Who signs in to post the forms: an operator of every agent, with a password."""
SAID = re.compile(
    r'role="alert"[^>]*>(?P<alert>.*?)</p>|class="card problem".*?<p>(?P<p>.*?)</p>', re.S
)


class ConsoleChannel:
    """The console the driver decides through, and its HTTP client."""

    def __init__(self) -> None:
        self.running: RunningConsole | None = None
        self.http: httpx.AsyncClient | None = None
        self.browser: httpx.AsyncClient | None = None
        """Signed in as `PERSON` (a session cookie, no token): it posts the page's forms."""
        self.csrf = ""
        self.public = ""
        """The console key's public half, for the worker's `WAYPOINT_DECISION_KEYS`."""

    async def open(
        self, client: Client, folder: Path, task_queue: str, signed: bool, **served: Any
    ) -> None:
        """Serve a console on a free port, with an API token for the driver.

        `served` are more of the `Console`'s settings (`start_options`: its runs' step options).
        """
        from waypoint._security.signing import load_private_key, new_key

        users = folder / "console-users.toml"
        token, password = new_token(), new_token()
        save_entry(users, "tokens", OPERATOR, hash_token(token), {"*": "operator"})
        save_entry(users, "users", PERSON, hash_password(password), {"*": "operator"})
        private, self.public = new_key()
        console = Console(
            client=client,
            people_file=users,
            sessions=Sessions(new_token()),
            task_queue=task_queue,
            signing_key=load_private_key(private) if signed else None,
            audit=Audit(path=folder / "console-audit.jsonl"),  # not over the soak's own lines
            **served,
        )
        self.running = await start_console(console, port=0)
        # A new connection per request: one kept alive can be closed by the server's idle
        # timeout just as a post goes out on it (httpx.ReadError, soak seeds 90128 and 90138).
        fresh = httpx.Limits(max_keepalive_connections=0)
        url = self.running.url()
        bearer = {"Authorization": f"Bearer {token}"}
        self.http = httpx.AsyncClient(base_url=url, headers=bearer, timeout=30, limits=fresh)
        self.browser = httpx.AsyncClient(base_url=url, timeout=30, limits=fresh)
        await self._sign_in(password)

    async def _sign_in(self, password: str) -> None:
        """Sign `PERSON` in on the form, as a browser does; keep the page's CSRF token."""
        assert self.browser is not None
        form = (await self.browser.get("/signin")).text
        token = html.unescape(re.findall(r'name="form_token" value="([^"]+)"', form)[0])
        sent = {"user": PERSON, "password": password, "form_token": token, "next": "/runs"}
        signed = await self.browser.post("/signin", data=sent)
        assert signed.status_code == 303, f"the console refused the sign-in: {signed.text[:300]}"
        page = (await self.browser.get("/runs")).text
        self.csrf = html.unescape(re.findall(r'name="csrf" value="([^"]+)"', page)[0])

    def follow(self, client: Client) -> None:
        """Use `client` from now on (the driver's, after a server restart)."""
        if self.running is not None:
            self.running.app.state.console.client = client

    async def close(self) -> None:
        """Stop the console."""
        for http in (self.http, self.browser):
            if http is not None:
                await http.aclose()
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

    async def _form(self, run: str, verb: str, form: dict[str, str], path: str = "") -> None:
        """Post a run page's form (or the one at `path`): sent, it redirects to the run's page."""
        assert self.browser is not None, "open() first"
        sent = {"csrf": self.csrf, **form}
        answer = await self.browser.post(path or f"/runs/{run}/{verb}", data=sent)
        if answer.status_code >= 500:
            raise AssertionError(f"console answered {answer.status_code} to {verb}: {answer.text}")
        if answer.status_code != 303 or not answer.headers["location"].startswith(f"/runs/{run}"):
            found = SAID.search(answer.text)
            said = html.unescape((found["alert"] or found["p"]) if found else answer.text[:300])
            raise WaypointError(f"console refused the {verb} form ({answer.status_code}): {said}")

    async def start(self, run: str, given: RunInput) -> None:
        """Start `run` on the start form, with every field of `given` the form has an input for.

        What it has none for (step options) is the console's own; `started_as_drawn` judges
        whether the run began with all of `given`.
        """
        history = given.history_override or HistoryOverride()
        values = {
            **given.model_dump(include={"agent", "task", "durability"}),
            **(given.limits_override or LimitsOverride()).model_dump(include=set(LIMITS)),
            "workflow_id": run,
            "history_events": history.max_events,
            "keep_turns": history.keep_recent_turns,
        }
        form = {
            f.input_name: str(values[f.name])
            for f in fields(StartBody.model_json_schema())
            if values.get(f.name) is not None
        }
        await self._form(run, "start", form, path="/start")

    async def decide(self, run: str, step_id: str, arguments_hash: str, approve: bool) -> None:
        """Approve or reject, bound to the hash the driver saw."""
        body = {"step_id": step_id, "arguments_hash": arguments_hash}
        if not approve:
            body["reason"] = "torture rejects it"
        await self._post(run, "approve" if approve else "reject", body)

    async def answer(self, run: str, step_id: str, result: dict[str, Any]) -> None:
        """Answer a client tool's question on the form made from its answer schema."""
        assert self.http is not None, "open() first"
        shown = (await self.http.get(f"/api/runs/{run}")).json()
        asked = shown.get("pending_questions", []) if isinstance(shown, dict) else []
        schema = next((q["answer_schema"] for q in asked if q["step_id"] == step_id), None)
        form = {"step_id": step_id}
        for field in fields(schema):
            value = result if not field.name else result.get(field.name)
            if field.widget == "checkbox":
                form |= {field.input_name: "on"} if value else {}
            elif field.widget == "json":
                form[field.input_name] = json.dumps(value)
            elif value is not None:
                form[field.input_name] = str(value)
        await self._form(run, "answer", form)

    async def resolve(self, run: str, resolution: Resolution) -> None:
        """Say what happened to a parked effect, on its form."""
        form = {
            "step_id": resolution.step_id,
            "action": resolution.action,
            "result": resolution.result,
            "reason": resolution.reason or "torture looked",
        }
        await self._form(run, "resolve", form)

    async def steer(self, run: str, message: str) -> None:
        """Steer the agent."""
        await self._post(run, "steer", {"message": message})

    async def resume(self, run: str, *, replan: bool = False, **limits: float | None) -> None:
        """Resume a parked step, or raise the limits named (a lower one is refused), by form."""
        form = {"reason": "torture resumes it"} | ({"replan": "on"} if replan else {})
        await self._form(run, "resume", form | {k: str(v) for k, v in limits.items() if v})

    async def send(self, run: str, verb: str, reason: str) -> None:
        """A `Verb.simple` verb (cancel, pause, unpause) by its button, with a reason, confirmed."""
        await self._form(run, verb, {"reason": reason, "confirmed": "yes"})
