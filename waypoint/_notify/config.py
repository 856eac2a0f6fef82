"""The notifications file: channels, and per agent which role's notices go where and when.

TOML beside the console's users file (`WAYPOINT_NOTIFY`, default `.waypoint/_notify.toml`):
`[console] url` for review links, `[channels.NAME]` of `type` `webhook` (`url`, `secret_env`),
`slack` or `teams` (`url_env`) or `email` (`host`, `port`, `from`, `to`, `starttls`,
`user_env`, `password_env`), each with an optional `person` its links sign in, and
`[agents.NAME]` (`"*"` for the rest) with `routes` (role -> channel names), `remind_after`,
`escalate_after` and `escalate_to` (`30m`, `4h`, `2d`). docs/notifications.md has an example.

Secrets (a signing key, a Slack or Teams address, an SMTP login) come from the environment,
never the file. The whole file is checked when the worker and the console start, and an error
is one line naming where it is (`notify.toml:9: channels.finance.url_env: $SLACK_FINANCE_URL is
not set`), never a secret's value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from annotated_types import Len
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from waypoint._agent import Agent
from waypoint._tomlfile import line_of, read_text, validated
from waypoint.errors import NotifyConfigError
from waypoint.protocol.notices import NoticePlan

NOTIFY_FILE = Path(".waypoint/_notify.toml")
ANY_AGENT = "*"
DURATION = re.compile(r"^([1-9][0-9]{0,5})([smhd])$")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}

Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,199}$")]
AgentName = Annotated[str, StringConstraints(pattern=r"^([A-Za-z0-9_.:@-]{1,200}|\*)$")]
Duration = Annotated[str, StringConstraints(pattern=DURATION.pattern)]
"""`90s`, `30m`, `4h`, `2d`."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _Channel(_Strict):
    person: Name | None = None
    """A console user (or a provider's e-mail) this channel reaches alone: its review links
    sign them in once. A shared channel's links open the run page behind the usual sign-in."""


class WebhookEntry(_Channel):
    """A generic receiver: the notice as JSON, signed with the key in `secret_env`."""

    type: Literal["webhook"]
    url: str
    secret_env: EnvName


class ChatEntry(_Channel):
    """A Slack or Teams incoming webhook; its address is a secret, so it comes from `url_env`."""

    type: Literal["slack", "teams"]
    url_env: EnvName


class EmailEntry(_Channel):
    """E-mail over SMTP, with STARTTLS and a login from the environment when given."""

    type: Literal["email"]
    host: Annotated[str, Len(min_length=1)]
    port: Annotated[int, Field(ge=1, le=65535)] = 25
    sender: Annotated[str, StringConstraints(pattern=r"^[^@\s]+@[^@\s]+$")] = Field(alias="from")
    to: Annotated[list[Annotated[str, StringConstraints(pattern=r"^[^@\s]+@[^@\s]+$")]], Len(1)]
    starttls: bool = False
    user_env: EnvName | None = None
    password_env: EnvName | None = None


ChannelEntry = Annotated[WebhookEntry | ChatEntry | EmailEntry, Field(discriminator="type")]


class AgentEntry(_Strict):
    """One agent's routing (role -> channel names) and its reminder and escalation delays."""

    routes: dict[Name, list[Name]] = {}
    remind_after: Duration | None = None
    escalate_after: Duration | None = None
    escalate_to: Name | None = None


class ConsoleEntry(_Strict):
    """Where the console is, for review links."""

    url: str


class NotifyFile(_Strict):
    """The notifications file's schema: the whole file is checked before any of it is used."""

    console: ConsoleEntry | None = None
    channels: dict[Name, ChannelEntry] = {}
    agents: dict[AgentName, AgentEntry] = {}


@dataclass(frozen=True)
class Channel:
    """A channel ready to send: its entry and the secrets the environment gave it."""

    name: str
    entry: WebhookEntry | ChatEntry | EmailEntry
    url: str = ""
    """Where a webhook, Slack or Teams notice is posted (from the file or `url_env`)."""
    secret: str = field(default="", repr=False)
    """The webhook's signing key, or the SMTP password."""
    user: str = ""
    """The SMTP login."""

    @property
    def kind(self) -> str:
        """`webhook`, `slack`, `teams` or `email`."""
        return self.entry.type

    @property
    def deduplicates(self) -> bool:
        """Whether its receiver deduplicates on the notice key (only the generic webhook)."""
        return self.kind == "webhook"


@dataclass(frozen=True)
class NotifyConfig:
    """The channels and plans a worker delivers with (empty: nobody is notified)."""

    channels: Mapping[str, Channel] = field(default_factory=dict)
    agents: Mapping[str, AgentEntry] = field(default_factory=dict)
    console_url: str = ""

    def plan(self, agent: str) -> NoticePlan:
        """`agent`'s plan: its own entry, else the `*` one, else an empty plan."""
        entry = self.agents.get(agent) or self.agents.get(ANY_AGENT)
        if entry is None:
            return NoticePlan()
        return NoticePlan(
            routes={role: list(names) for role, names in entry.routes.items()},
            remind_after=duration(entry.remind_after),
            escalate_after=duration(entry.escalate_after),
            escalate_to=entry.escalate_to,
        )


def duration(text: str | None) -> timedelta | None:
    """`30m` as a `timedelta` (None for None)."""
    if text is None:
        return None
    amount, unit = DURATION.match(text).groups()  # type: ignore[union-attr]  # checked by schema
    return timedelta(**{UNITS[unit]: int(amount)})


def _http_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def read_notify(
    text: str, path: Path, env: Mapping[str, str] | None, agents: Iterable[Agent] = ()
) -> NotifyConfig:
    """The channels and plans `text` declares, once the whole of it fits and its secrets are set.

    `env`: where secrets come from; None checks all but them (the console, which sends
    nothing, holds none). `agents`: the worker's agents, whose tools' approval timeouts an
    `escalate_after` must come before.

    Raises:
        NotifyConfigError: It does not parse or fit, a variable it names is not set, an
            address is not http(s), a route names no channel; the message names the line.
    """
    found = validated(NotifyFile, text, path, NotifyConfigError)

    def refuse(where: tuple[str, ...], what: str) -> NotifyConfigError:
        return NotifyConfigError(f"{path}:{line_of(text, where)}: {'.'.join(where)}: {what}")

    def secret(where: tuple[str, ...], variable: str) -> str:
        if env is None:
            return ""
        value = env.get(variable, "")
        if not value:
            raise refuse(where, f"${variable} is not set")
        return value

    console_url = found.console.url.rstrip("/") if found.console else ""
    if found.console and not _http_url(console_url):
        raise refuse(("console", "url"), "not an http(s) address")
    channels = {}
    for name, entry in found.channels.items():
        where = ("channels", name)
        if isinstance(entry, WebhookEntry):
            if not _http_url(entry.url):
                raise refuse((*where, "url"), "not an http(s) address")
            key = secret((*where, "secret_env"), entry.secret_env)
            channels[name] = Channel(name, entry, url=entry.url, secret=key)
        elif isinstance(entry, ChatEntry):
            url = secret((*where, "url_env"), entry.url_env)
            if env is not None and not _http_url(url):
                raise refuse((*where, "url_env"), f"${entry.url_env} is not an http(s) address")
            channels[name] = Channel(name, entry, url=url)
        else:
            if (entry.user_env is None) != (entry.password_env is None):
                raise refuse((*where, "user_env"), "give user_env and password_env together")
            user = secret((*where, "user_env"), entry.user_env) if entry.user_env else ""
            word = (
                secret((*where, "password_env"), entry.password_env) if entry.password_env else ""
            )
            channels[name] = Channel(name, entry, user=user, secret=word)
    timeouts = _approval_timeouts(agents, set(found.agents))
    for agent, plan in found.agents.items():
        where = ("agents", agent)
        for role, names in plan.routes.items():
            for missing in [n for n in names if n not in channels]:
                raise refuse((*where, "routes", role), f"no channel {missing!r} in [channels]")
        if plan.escalate_to is not None and plan.escalate_to not in plan.routes:
            raise refuse((*where, "escalate_to"), f"{plan.escalate_to!r} is not a routed role")
        if (plan.escalate_after is None) != (plan.escalate_to is None):
            raise refuse((*where, "escalate_after"), "give escalate_after and escalate_to together")
        after = duration(plan.escalate_after)
        for tool, timeout in timeouts.get(agent, {}).items():
            if after is not None and after >= timeout:
                raise refuse(
                    (*where, "escalate_after"),
                    f"{plan.escalate_after} is not before tool {tool!r}'s approval timeout "
                    f"({timeout}): nobody would be told in time",
                )
    return NotifyConfig(channels=channels, agents=found.agents, console_url=console_url)


def _approval_timeouts(agents: Iterable[Agent], named: set[str]) -> dict[str, dict[str, timedelta]]:
    """Per entry (an agent, or `*` for those not named), tools' approval timeouts by name."""
    found: dict[str, dict[str, timedelta]] = {}
    for agent in agents:
        entry = found.setdefault(agent.name if agent.name in named else ANY_AGENT, {})
        for tool in agent.registry:
            timeout = tool.spec().approval_timeout
            if timeout is not None:
                entry[tool.name] = timeout
    return found


def load_notify(
    path: Path, env: Mapping[str, str] | None, agents: Iterable[Agent] = ()
) -> NotifyConfig:
    """Read the notifications file; a missing file means nobody is notified.

    Raises:
        NotifyConfigError: The file is unreadable or does not fit (`read_notify`).
    """
    text = read_text(path, "the notifications file", NotifyConfigError)
    return NotifyConfig() if text is None else read_notify(text, path, env, agents)
