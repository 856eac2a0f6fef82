"""Who is asking, and may they: the console's state and the checks every route runs.

A request is someone's when it carries an API token (`Authorization: Bearer`) or a session
cookie; anyone else gets 401. A cookie-borne request that changes something must also send the
session's CSRF token (a form field or `X-CSRF-Token`), or it gets 403: a token-borne one is
not ambient, so it needs none. Roles are checked per agent, against the users file as it is
now (re-read when it changes).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import Request
from temporalio.client import Client

from waypoint._console.audit import Audit
from waypoint._console.events import RECHECK_SECONDS
from waypoint._console.people import (
    People,
    PeopleFileError,
    Principal,
    Role,
    read_people,
)
from waypoint._console.problems import Problem
from waypoint._console.sessions import (
    COOKIE,
    OneTimeSignIns,
    Session,
    Sessions,
    Throttle,
    UsedLinks,
    csrf_ok,
    generation,
)
from waypoint.client import views
from waypoint.client.runs import WORKFLOW
from waypoint.errors import RunNotFoundError
from waypoint.protocol import StepOptions

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

logger = logging.getLogger(__name__)
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}


@dataclass
class Console:
    """What the console's routes share: the Temporal client, who may sign in, the signer."""

    client: Client
    people_file: Path
    sessions: Sessions
    task_queue: str = "waypoint"
    signing_key: Ed25519PrivateKey | None = None
    """Signs every decision sent, naming the person (`alice via console`)."""
    signer: str = "console"
    """The name the workers hold the console's public key under (`WAYPOINT_DECISION_KEYS`)."""
    ui_base: str = ""
    secure_cookies: bool = False
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    throttle: Throttle = field(default_factory=Throttle)
    once: OneTimeSignIns = field(default_factory=OneTimeSignIns)
    used_links: UsedLinks = field(default_factory=UsedLinks)
    """Review links already used (`waypoint._console.review`)."""
    audit: Audit = field(default_factory=Audit)
    """Where sign-ins, verbs and refusals are recorded (standard error unless told)."""
    recheck_seconds: float = RECHECK_SECONDS
    """How often an open event stream asks again whether its reader may read the run."""
    guests: dict[str, Mapping[str, Role]] = field(default_factory=dict)
    """People with a one-time sign-in (the demo's), and their roles, for this process only."""
    start_options: StepOptions | None = None
    """Step timeouts and retries of every run the console starts (None: the defaults): its
    server's to choose, never a person's (`waypoint._console.starts`)."""
    start_task_timeout: timedelta | None = None
    """The workflow task timeout of every run the console starts (None: Temporal's)."""
    _people: People = field(default_factory=People)
    _digest: str | None = None
    _broken: str = ""

    def people(self) -> People:
        """The users file as it is now, read again when its content changed (not its mtime).

        Raises:
            Problem: 503 while the file does not read or fit its schema: a bad edit refuses
                everyone rather than keep the last good file in force (it may have been
                removing someone); the log names the line.
        """
        try:
            text = self.people_file.read_bytes()  # missing: empty, nobody signs in yet
        except FileNotFoundError:
            text = b""
        except OSError as err:
            text = f"\0{err}".encode()  # not TOML: refused below, naming why
        digest = hashlib.sha256(text).hexdigest()
        if digest != self._digest:
            self._digest = digest
            try:
                self._people, self._broken = self._read(text), ""
            except PeopleFileError as err:
                logger.error("console users file does not read; refusing everyone: %s", err)
                self._broken = str(err)
        if self._broken:
            raise Problem(503, "the console's users file does not read: fix it (see the log)")
        return self._people

    def _read(self, text: bytes) -> People:
        if text.startswith(b"\0"):
            raise PeopleFileError(f"cannot read {self.people_file}: {text[1:].decode()}")
        try:
            return read_people(text.decode(), self.people_file, self.env)
        except UnicodeDecodeError as err:
            raise PeopleFileError(f"{self.people_file}: not UTF-8 ({err})") from None

    def cookie(self, name: str) -> str:
        """A cookie's name: `__Host-` first when secure, so no sibling host can set or shadow it."""
        return f"__Host-{name}" if self.secure_cookies else name

    def reviewer(self, who: Principal) -> str:
        """The name a decision carries: the person, and the console that vouches for them."""
        return f"{who.name} via {self.signer}"

    def principal_of(self, session: Session) -> Principal | None:
        """Whom a session is for, with their roles now; None if they have none any more."""
        if session.via == "once":
            roles = self.guests.get(session.user)
            return Principal(session.user, roles, "once") if roles else None
        people = self.people()
        if session.via == "oidc":
            roles = people.oidc.roles_of(session.user) if people.oidc else None
            return Principal(session.user, roles, "oidc") if roles else None
        entry = people.users.get(session.user)
        if entry is None or session.generation != generation(entry[0]):
            return None  # gone, or their password changed since: sign in again
        return Principal(session.user, entry[1], "password")


def console_of(request: Request) -> Console:
    """The console the app was built with."""
    return request.app.state.console


def session_of(request: Request) -> Session | None:
    """The request's session, if its cookie is good; watching an event stream is no activity."""
    touch = not request.url.path.endswith("/events")
    console = console_of(request)
    return console.sessions.read(request.cookies.get(console.cookie(COOKIE)), touch=touch)


async def who(request: Request) -> Principal:
    """The principal behind the request; 401 for nobody, 403 for a cross-site change."""
    console = console_of(request)
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":  # another scheme (a proxy's Basic) leaves the cookie to say
        found = console.people().check_token(token.strip())
        if found is None:
            raise Problem(401, "the API token is not valid", www_authenticate="Bearer")
        request.state.principal = found
        return found
    session = session_of(request)
    found = console.principal_of(session) if session else None
    if session is None or found is None:
        raise Problem(401, "sign in first (or send an API token as Authorization: Bearer)")
    request.state.principal = found  # for the audit line of a refusal
    if request.method not in SAFE_METHODS:
        sent = request.headers.get("x-csrf-token")
        if sent is None and _is_form(request):
            sent = str((await request.form()).get("csrf", ""))
        if not csrf_ok(session, sent):
            raise Problem(403, "this form is out of date or was sent from another site: reload")
    return found


def _is_form(request: Request) -> bool:
    kind = request.headers.get("content-type", "")
    return kind.startswith(("application/x-www-form-urlencoded", "multipart/form-data"))


async def agent_of(client: Client, run: str) -> str:
    """The agent a run belongs to, from Temporal (never from what the caller says).

    Raises:
        RunNotFoundError: No Waypoint run has that id (another kind of workflow is none).
    """
    description = await views.describe(client, run)
    attrs: dict[str, Any] = {k.name: v for k, v in description.typed_search_attributes}
    agent = str(attrs.get("WaypointAgent", ""))
    if description.workflow_type != WORKFLOW or not agent:
        raise RunNotFoundError(f"no run {run!r}")
    return agent


async def allowed(request: Request, principal: Principal, need: Role, run: str) -> str:
    """The run's agent, if `principal` holds `need` for it.

    403 if they hold less; 404 if they hold no role for it at all, said as for no such run.
    """
    hidden = RunNotFoundError(
        f"no run {run!r} that {principal.name} may see: roles are per agent name, so a run of "
        "an agent you hold no role for is not found either (ask for a role on its agent)"
    )
    try:
        agent = await agent_of(console_of(request).client, run)
    except RunNotFoundError:
        raise hidden from None
    held = principal.role(agent)
    if held is None:
        raise hidden
    if not principal.can(need, agent):
        raise Problem(403, f"{principal.name} is {held} for agent {agent!r}; this needs {need}")
    return agent
