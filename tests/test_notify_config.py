"""The notifications file: each mistake is refused with one line naming the line it is on."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tests.test_notify import AGENT, Invoice
from waypoint import Agent, tool
from waypoint._notify.config import load_notify, read_notify
from waypoint.errors import NotifyConfigError
from waypoint.protocol.notices import NoticePlan

GOOD = """\
[console]
url = "https://waypoint.example.com"

[channels.ops]
type = "webhook"
url = "https://hooks.example.com/waypoint"
secret_env = "HOOK_SECRET"

[channels.finance]
type = "slack"
url_env = "SLACK_URL"

[channels.cfo]
type = "email"
host = "smtp.example.com"
port = 587
from = "waypoint@example.com"
to = ["cfo@example.com"]
starttls = true
user_env = "SMTP_USER"
password_env = "SMTP_PASSWORD"

[agents.payer]
routes = { approver = ["finance", "ops"], cfo = ["cfo"] }
remind_after = "30m"
escalate_after = "4h"
escalate_to = "cfo"

[agents."*"]
routes = { approver = ["ops"] }
"""
ENV = {
    "HOOK_SECRET": "s3cret",
    "SLACK_URL": "https://hooks.slack.test/T/B/X",
    "SMTP_USER": "mailer",
    "SMTP_PASSWORD": "pw-not-shown",
}
PATH = Path("notify.toml")


def test_a_good_file_gives_each_agent_its_plan() -> None:
    config = read_notify(GOOD, PATH, ENV, [AGENT])
    assert config.plan("payer") == NoticePlan(
        routes={"approver": ["finance", "ops"], "cfo": ["cfo"]},
        remind_after=timedelta(minutes=30),
        escalate_after=timedelta(hours=4),
        escalate_to="cfo",
    )
    assert config.plan("anyone").routes == {"approver": ["ops"]}
    assert config.channels["finance"].url == ENV["SLACK_URL"]
    assert config.channels["cfo"].user == "mailer" and config.console_url.endswith(".com")
    assert not config.channels["finance"].deduplicates and config.channels["ops"].deduplicates


def test_no_file_notifies_nobody(tmp_path: Path) -> None:
    assert load_notify(tmp_path / "absent.toml", ENV).plan("payer") == NoticePlan()


def refused(text: str, env: dict[str, str] = ENV, agents: list[Agent] | None = None) -> str:
    with pytest.raises(NotifyConfigError) as caught:
        read_notify(text, PATH, env, agents or [])
    message = str(caught.value)
    assert "\n" not in message and "pw-not-shown" not in message and "s3cret" not in message
    return message


def test_a_missing_environment_variable_is_named_on_its_line() -> None:
    env = {k: v for k, v in ENV.items() if k != "SLACK_URL"}
    assert refused(GOOD, env) == "notify.toml:11: channels.finance.url_env: $SLACK_URL is not set"


def test_a_route_to_an_unknown_channel_is_refused() -> None:
    text = GOOD.replace('approver = ["finance", "ops"]', 'approver = ["finanse"]')
    assert refused(text) == (
        "notify.toml:24: agents.payer.routes.approver: no channel 'finanse' in [channels]"
    )


def test_a_bad_url_is_refused_without_showing_a_secret_one() -> None:
    assert refused(GOOD.replace("https://hooks.example.com", "ftp://hooks")) == (
        "notify.toml:6: channels.ops.url: not an http(s) address"
    )
    env = {**ENV, "SLACK_URL": "hooks.slack.test/T/B/X"}
    assert refused(GOOD, env) == (
        "notify.toml:11: channels.finance.url_env: $SLACK_URL is not an http(s) address"
    )


def test_escalating_to_a_role_nobody_routes_is_refused() -> None:
    assert refused(GOOD.replace('escalate_to = "cfo"', 'escalate_to = "ceo"')) == (
        "notify.toml:27: agents.payer.escalate_to: 'ceo' is not a routed role"
    )


def test_escalating_after_the_approval_timeout_is_refused() -> None:
    @tool("effect", idempotent=True, requires_approval=True, approval_timeout=timedelta(hours=2))
    async def pay(args: Invoice) -> str:
        """Pay."""
        return "paid"

    slow = Agent(name="payer", model="claude-sonnet-4-6", system="Pay.", tools=[pay])
    assert refused(GOOD, agents=[slow]) == (
        "notify.toml:26: agents.payer.escalate_after: 4h is not before tool 'pay''s approval "
        "timeout (2:00:00): nobody would be told in time"
    )


def test_a_delay_that_is_not_a_duration_is_refused() -> None:
    message = refused(GOOD.replace('remind_after = "30m"', 'remind_after = "half an hour"'))
    assert message.startswith("notify.toml:25: agents.payer.remind_after: String should match")


def test_an_unknown_channel_type_or_key_is_refused() -> None:
    message = refused(GOOD.replace('type = "slack"', 'type = "discord"'))
    assert message.startswith("notify.toml:9: channels.finance: Input tag 'discord'")
    message = refused(GOOD.replace("starttls = true", "starttls = true\ntls = true"))
    assert message.startswith("notify.toml:20: channels.cfo.email.tls: Extra inputs")


def test_a_login_needs_both_its_user_and_password() -> None:
    assert refused(GOOD.replace('password_env = "SMTP_PASSWORD"\n', "")) == (
        "notify.toml:20: channels.cfo.user_env: give user_env and password_env together"
    )


def test_a_file_that_is_not_toml_names_its_line() -> None:
    assert refused("[channels\n").startswith("notify.toml: Expected ']'")


def test_the_console_checks_the_file_at_start_without_its_secrets(tmp_path: Path) -> None:
    from typing import cast

    from temporalio.client import Client

    from waypoint._console.serve import console_from_env

    broken = tmp_path / "notify.toml"
    broken.write_text(GOOD.replace('approver = ["finance", "ops"]', 'approver = ["finanse"]'))
    env = {
        "WAYPOINT_NOTIFY": str(broken),
        "WAYPOINT_CONSOLE_SECRET": str(tmp_path / "secret"),
        "WAYPOINT_CONSOLE_SESSIONS": str(tmp_path / "sessions.db"),
    }
    nobody = cast(Client, None)  # never reached: the file is refused first
    with pytest.raises(NotifyConfigError, match=r"notify.toml:24: .*no channel 'finanse'"):
        console_from_env(nobody, env, task_queue="q")
    broken.write_text(GOOD)  # its secrets are the workers': the console starts without them
    assert console_from_env(nobody, env, task_queue="q").used_links.burn("n1")
