"""Who may use the console, and for what: people in a users file, applications by API token.

The file is TOML, written by `waypoint console-user` and `waypoint console-token`::

    [users.alice]
    password = "scrypt$16384$8$1$SALT$HASH"
    roles = { "*" = "viewer", vendor_onboarding = "approver" }

    [tokens.billing]
    hash = "sha256$HEX"
    roles = { vendor_onboarding = "operator" }

    [oidc]                      # optional: people a company's identity provider signs in
    issuer = "https://id.example.com"
    client_id = "waypoint-console"
    client_secret_env = "WAYPOINT_OIDC_SECRET"
    roles = { "carol@example.com" = { "*" = "approver" } }

Roles are per agent (`"*"` for every agent not named): a viewer reads, an approver also
decides (approve, reject, answer, steer), an operator also starts, resolves, resumes and
cancels. Names are one space: a token may not share a person's name, and a provider's people
are named by a verified e-mail or `oidc:SUB`; a users-file name holds neither `@` nor `:`, so
it can never be one of theirs. The whole file is checked against `UsersFile` before any of it
is used; an error names its line.
Only hashes are kept: a password through scrypt, a token through SHA-256 (it is random and long).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, cast

from annotated_types import Len
from pydantic import BaseModel, ConfigDict, StringConstraints

from waypoint._tomlfile import line_of, validated
from waypoint.client.listing import NAME as NAME
from waypoint.errors import WaypointError
from waypoint.protocol.verbs import Role

RANK: dict[str, int] = {"viewer": 1, "approver": 2, "operator": 3}
ANY_AGENT = "*"
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
TOKEN_PREFIX = "wpt_"


class PeopleFileError(WaypointError, ValueError):
    """The users file is unreadable or malformed (the message names the entry, never a secret)."""


@dataclass(frozen=True)
class Principal:
    """Someone signed in (a person) or calling with a token (an application)."""

    name: str
    roles: Mapping[str, Role]
    via: Literal["password", "oidc", "token", "once"]

    def role(self, agent: str) -> Role | None:
        """Their role for `agent`: the one named for it, else the `*` one, else none."""
        return self.roles.get(agent) or self.roles.get(ANY_AGENT)

    def can(self, need: Role, agent: str) -> bool:
        """Whether they hold `need` (or a higher role) for `agent`."""
        held = self.role(agent)
        return held is not None and RANK[held] >= RANK[need]

    def agents(self, need: Role) -> set[str] | None:
        """The agents they hold `need` for by name; None when `*` gives it to every other one.

        With None, an agent named with a lower role is still left out: check each row with
        `can` (a list asks visibility for every agent, then drops those).
        """
        star = self.roles.get(ANY_AGENT)
        if star is not None and RANK[star] >= RANK[need]:
            return None
        return {a for a, role in self.roles.items() if a != ANY_AGENT and RANK[role] >= RANK[need]}


@dataclass(frozen=True)
class Oidc:
    """A company's OpenID Connect provider: who signs in there gets the roles listed here."""

    issuer: str
    client_id: str
    client_secret: str = field(repr=False)
    roles: Mapping[str, Mapping[str, Role]]
    """By verified e-mail (or `oidc:SUB`); `*` for anyone the provider signs in."""

    def name_of(self, claims: Mapping[str, Any]) -> str:
        """Who the claims name: an e-mail the provider verified, else `oidc:SUB`, else ''.

        An unverified e-mail names nobody: some providers let anyone register any address.
        """
        if claims.get("email") and claims.get("email_verified") is True:
            return str(claims["email"])
        return f"oidc:{claims['sub']}" if claims.get("sub") else ""

    def roles_of(self, name: str) -> Mapping[str, Role] | None:
        """The roles listed for `name`, else those for `*`, else None."""
        return (self.roles.get(name) or self.roles.get(ANY_AGENT)) if name else None

    def principal(self, claims: Mapping[str, Any]) -> Principal | None:
        """Whom the provider's claims name, with their roles; None if they have none here."""
        name = self.name_of(claims)
        roles = self.roles_of(name)
        return Principal(name=name, roles=roles, via="oidc") if roles else None


@dataclass(frozen=True)
class People:
    """The users, tokens and identity provider the console knows."""

    users: Mapping[str, tuple[str, Mapping[str, Role]]] = field(default_factory=dict)
    tokens: Mapping[str, tuple[str, Mapping[str, Role]]] = field(default_factory=dict)
    oidc: Oidc | None = None

    def check_password(self, name: str, password: str) -> Principal | None:
        """The user if `password` is theirs; the same work is done for an unknown name."""
        stored, roles = self.users.get(name, (_DECOY, {}))
        if not verify_password(password, stored) or name not in self.users:
            return None
        return Principal(name=name, roles=roles, via="password")

    def check_token(self, token: str) -> Principal | None:
        """The application whose token this is, or None."""
        digest = hash_token(token)
        for name, (stored, roles) in self.tokens.items():
            if hmac.compare_digest(digest, stored):
                return Principal(name=name, roles=roles, via="token")
        return None


def hash_password(password: str) -> str:
    """`scrypt$N$r$p$salt$hash`, base64 parts."""
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P)
    b64 = base64.b64encode
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${b64(salt).decode()}${b64(digest).decode()}"


def verify_password(password: str, stored: str) -> bool:
    """Whether `password` hashes to `stored`, compared in constant time."""
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        want = base64.b64decode(digest, validate=True)
        got = hashlib.scrypt(
            password.encode(),
            salt=base64.b64decode(salt, validate=True),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(want),
        )
    except ValueError:
        return False
    return hmac.compare_digest(got, want)


_DECOY = hash_password(secrets.token_urlsafe())
"""Checked for an unknown name, so timing does not tell which names exist."""


def new_token() -> str:
    """A fresh API token: shown once, only its hash is kept."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """`sha256$HEX` of a token."""
    return "sha256$" + hashlib.sha256(token.encode()).hexdigest()


PERSON = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
"""A users-file name: no `@` and no `:`, so never a provider's e-mail or `oidc:SUB`."""
Person = Annotated[str, StringConstraints(pattern=PERSON.pattern)]
Roles = Annotated[dict[str, Role], Len(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _UserEntry(_Strict):
    password: str
    roles: Roles


class _TokenEntry(_Strict):
    hash: str
    roles: Roles


class _OidcEntry(_Strict):
    issuer: Annotated[str, Len(min_length=1)]
    client_id: Annotated[str, Len(min_length=1)]
    client_secret_env: Annotated[str, Len(min_length=1)]
    roles: Annotated[dict[str, Roles], Len(min_length=1)]
    """By verified e-mail or `oidc:SUB`, or `*`."""


class UsersFile(_Strict):
    """The users file's schema: the whole file is checked before any of it is used."""

    users: dict[Person, _UserEntry] = {}
    tokens: dict[Person, _TokenEntry] = {}
    oidc: _OidcEntry | None = None


def read_people(text: str, path: Path, env: Mapping[str, str]) -> People:
    """The people the users file's `text` names, once the whole of it fits `UsersFile`.

    Raises:
        PeopleFileError: It does not parse or fit; the message names the line, never a secret.
    """
    found = validated(UsersFile, text, path, PeopleFileError)
    taken = sorted(set(found.users) & set(found.tokens))
    if taken:
        line = line_of(text, ("tokens", taken[0]))
        raise PeopleFileError(f"{path}:{line}: {', '.join(taken)}: a name names one person or app")
    oidc = None
    if found.oidc is not None:
        secret = env.get(found.oidc.client_secret_env, "")
        if not secret:
            line = line_of(text, ("oidc", "client_secret_env"))
            variable = found.oidc.client_secret_env
            raise PeopleFileError(f"{path}:{line}: oidc.client_secret_env: ${variable} is not set")
        oidc = Oidc(found.oidc.issuer, found.oidc.client_id, secret, found.oidc.roles)
    return People(
        users={name: (u.password, u.roles) for name, u in found.users.items()},
        tokens={name: (t.hash, t.roles) for name, t in found.tokens.items()},
        oidc=oidc,
    )


def _toml(value: object) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml(str(k))} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, bool | int | float):
        return str(value).lower()
    text = json.dumps(str(value), ensure_ascii=False)  # TOML has no surrogate pairs
    return "".join(c if c.isprintable() or c == " " else f"\\u{ord(c):04x}" for c in text)


def save_entry(path: Path, table: str, name: str, secret: str, roles: Mapping[str, Role]) -> None:
    """Add or replace `name` in `[users]` (with a password hash) or `[tokens]` (a token hash).

    The file is written again whole, owner-readable only; other entries and `[oidc]` are kept.

    Raises:
        PeopleFileError: `name` is not a users-file name, or the file does not read.
    """
    if not PERSON.match(name):
        raise PeopleFileError(
            f"{name!r} is not a users-file name: letters, digits, _ . - (no @ or :, which name "
            "people an identity provider signs in)"
        )
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text()) if path.exists() else {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise PeopleFileError(f"cannot read {path} to change it: {err}") from None
    field = "password" if table == "users" else "hash"
    data.setdefault(table, {})[name] = {field: secret, "roles": dict(roles)}
    lines = []
    for section in ("users", "tokens"):
        for who, entry in data.get(section, {}).items():
            lines += [f"[{section}.{_toml(who)}]", *(f"{k} = {_toml(v)}" for k, v in entry.items())]
            lines.append("")
    if "oidc" in data:
        lines += ["[oidc]", *(f"{k} = {_toml(v)}" for k, v in data["oidc"].items()), ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = path.with_name(f".{path.name}.new")
    fresh.unlink(missing_ok=True)
    fresh.touch(mode=0o600)
    fresh.write_text("\n".join(lines))
    os.replace(fresh, path)  # a reader sees the old file or the new one, never half


def parse_roles(specs: list[str]) -> dict[str, Role]:
    """`agent=role` pairs (`*=viewer` for every agent) as a roles table.

    Raises:
        PeopleFileError: A pair is malformed or names no role.
    """
    roles: dict[str, Role] = {}
    for spec in specs:
        agent, _, role = spec.partition("=")
        if not agent.strip() or role.strip() not in RANK:
            raise PeopleFileError(
                f"--role {spec!r}: use AGENT=ROLE (or *=ROLE), ROLE one of {', '.join(RANK)}"
            )
        roles[agent.strip()] = cast(Role, role.strip())
    if not roles:
        raise PeopleFileError("give at least one --role AGENT=ROLE (e.g. --role '*=viewer')")
    return roles
