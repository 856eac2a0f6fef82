"""What a notice says on each channel: the inbox card's facts in the channel's own format.

Every format carries the same facts: what happened (waiting, reminder, escalated, decided,
timed out), the agent and tool, the arguments as people read them (labelled from the tool's
schema, money and dates formatted: `waypoint._readable`), why it asks (the policy rule), the
run's cost so far, since when it waits, and the review link. The generic webhook's body is
JSON (the notice itself, the card's text and the link); Slack gets `text` plus Block Kit
`blocks`; Teams gets a message with one Adaptive Card (what a Teams "Workflows" webhook and
the older connector webhooks accept); e-mail a plain-text message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any

import waypoint._readable as readable
from waypoint.protocol.notices import Notice

HEADLINE = {
    "waiting": "{agent} waits for {what}",
    "reminder": "Reminder: {agent} still waits for {what}",
    "escalated": "Escalated to {role}: {agent} waits for {what}",
    "decided": "Decided: {agent}'s {tool} was {decision}",
    "timed_out": "Timed out: nobody decided {agent}'s {tool} in time",
}
MAX_VALUE = 300
"""A value longer than this is cut in a chat message (the review page shows it whole)."""


@dataclass(frozen=True)
class Card:
    """The facts one notice shows, as text: a headline, labelled facts and argument lines."""

    headline: str
    facts: list[tuple[str, str]]
    arguments: list[str]
    link: str | None

    def text(self) -> str:
        """The whole card as plain text (e-mail, the webhook's `text`)."""
        lines = [self.headline, ""]
        lines += [f"{label}: {value}" for label, value in self.facts]
        if self.arguments:
            lines += ["", "Arguments:", *(f"  {line}" for line in self.arguments)]
        if self.link:
            lines += ["", f"Review it: {self.link}"]
        return "\n".join(lines)


def card(notice: Notice, schema: dict[str, Any] | None, link: str | None) -> Card:
    """The card for `notice`, its arguments read with the tool's input schema."""
    what = f"approval of {notice.tool}" if notice.kind == "approval" else "an answer"
    headline = HEADLINE[notice.event].format(
        agent=notice.agent,
        what=what,
        role=notice.role,
        tool=notice.tool,
        decision=notice.decision or "decided",
    )
    facts = [("Tool", notice.tool), ("Run", notice.run), ("Step", notice.step_id)]
    if notice.rule:
        facts.append(("Why it asks", notice.rule))
    facts.append(("Cost so far", f"${notice.cost_usd:,.4f}"))
    facts.append(("Waiting since", readable.when(notice.since) or notice.since))
    if notice.decided_by:
        facts.append(("Decided by", notice.decided_by))
    if notice.reason:
        facts.append(("Reason", notice.reason))
    lines = _flatten(readable.arguments(notice.arguments, schema))
    return Card(headline, facts, lines, link)


def _flatten(lines: list[readable.Line], depth: int = 0) -> list[str]:
    out: list[str] = []
    pad = "  " * depth
    for line in lines:
        value = line.text if len(line.text) <= MAX_VALUE else line.text[:MAX_VALUE] + "..."
        shown = f"{line.label}: {value}" if line.label and value else line.label or value
        out.append(pad + shown)
        out += _flatten(line.lines, depth + 1)
        for item in line.items:
            out += _flatten(item, depth + 1)
    return out


def webhook_body(notice: Notice, shown: Card) -> bytes:
    """The generic webhook's JSON body: the notice, the card as text, and the link."""
    body = {
        "notice": notice.model_dump(mode="json"),
        "headline": shown.headline,
        "text": shown.text(),
        "link": shown.link,
    }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def slack_body(shown: Card) -> bytes:
    """A Slack incoming webhook's message: `text` (for notifications) and Block Kit blocks."""
    facts = "\n".join(f"*{label}:* {value}" for label, value in shown.facts)
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": shown.headline[:150]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": facts[:3000]}},
    ]
    if shown.arguments:
        args = "\n".join(shown.arguments)
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": args[:3000]}})
    if shown.link:
        button = {"type": "button", "text": {"type": "plain_text", "text": "Review"}}
        blocks.append({"type": "actions", "elements": [{**button, "url": shown.link}]})
    return json.dumps({"text": shown.headline, "blocks": blocks}).encode()


def teams_body(shown: Card) -> bytes:
    """A Teams incoming webhook's message: one Adaptive Card (1.4) with a Review button."""
    content: dict[str, Any] = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": [
            {"type": "TextBlock", "text": shown.headline, "weight": "Bolder", "wrap": True},
            {"type": "FactSet", "facts": [{"title": k, "value": v} for k, v in shown.facts]},
            *[{"type": "TextBlock", "text": line, "wrap": True} for line in shown.arguments],
        ],
    }
    if shown.link:
        content["actions"] = [{"type": "Action.OpenUrl", "title": "Review", "url": shown.link}]
    attachment = {
        "contentType": "application/vnd.microsoft.card.adaptive",
        "contentUrl": None,
        "content": content,
    }
    return json.dumps({"type": "message", "attachments": [attachment]}).encode()


def email_message(notice: Notice, shown: Card, sender: str, to: list[str]) -> EmailMessage:
    """A plain-text e-mail; its Message-ID is derived from the notice key (one per event)."""
    message = EmailMessage()
    message["Subject"] = shown.headline
    message["From"] = sender
    message["To"] = ", ".join(to)
    message["Waypoint-Key"] = notice.key
    domain = sender.rpartition("@")[2] or "waypoint"
    message["Message-ID"] = f"<{_id_part(notice.key)}@{domain}>"
    message.set_content(shown.text())
    return message


def _id_part(key: str) -> str:
    """The notice key as a Message-ID's left part (letters, digits and `.-_` only)."""
    return "".join(c if c.isalnum() or c in ".-_" else "." for c in key)[:200]
