"""The Messages API the torture scenarios talk to: the local fake, answering from a scenario.

Which reply a request gets is read from the request itself: every reply carries a marker
`wpNx` (in its text and its tool call ids), so the next request's highest marker says which
position of the scenario the run is at, after kills, re-asks and compactions alike. Each
position plays its outage errors and re-ask causes first, then its reply (repeated on retry).
The server bills every answer it gives (`usages`), which `check` compares with the ledger.
A scenario's `latency` spaces each answer's streamed events.

In a server scenario each reply with calls searches the web, cites the result and runs in a
code-execution container; like the real API, a request that sends back a server block or a
citation other than as answered, splits a search from its result, or drops the container is
refused (400), and the run parks where the `stuck` invariant sees it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from tests.fake_messages_api import FakeMessagesAPI, text, thinking, tool_use, tool_use_partial
from tests.fake_messages_api.script import (
    ERROR_TYPES,
    ScriptedError,
    ScriptedMessage,
    error_body,
    reply,
)
from waypoint._torture.agent import CHILD_SYSTEM
from waypoint._torture.scenario import Call, Scenario

MARKER = re.compile(r"wp(\d+)x")
SERVER_ID = re.compile(r"srvtoolu_wp(\d+)x")
CONTAINER = {"id": "container_wptorture", "expires_at": "2100-01-01T00:00:00Z"}
"""The code-execution container every server reply runs in (it outlives any scenario)."""
FORK_NOTE = "stayed with the run it was forked from"
"""What a fork is told about its source's container (`waypoint._workflows.containers`)."""
TOOLS = {
    "pure": "add",
    "read": "lookup",
    "slow_read": "survey",
    "effect_key": "ship",
    "effect_reconcile": "pay",
    "approval": "transfer",
    "client": "ask",
    "subagent": "errand",
    "mcp": "bank_transfer",
}


def arguments(call: Call, position: int) -> dict[str, Any]:
    """What the model passes for a call of this kind."""
    if call.kind == "pure":
        return {"a": position, "b": len(call.ref)}
    if call.kind in ("read", "slow_read"):
        return {"city": f"city-{call.ref}"}
    if call.kind == "client":
        return {"question": call.ref}
    if call.kind == "mcp":
        return {"payee": call.ref, "amount": 1 + position}
    return {"ref": call.ref, "amount": 1 + position}


class TortureAPI(FakeMessagesAPI):
    """The fake Messages API, playing one scenario's replies by conversation position."""

    def __init__(self, scenario: Scenario) -> None:
        super().__init__(count_tokens=True)
        self.scenario = scenario
        self.thinking = any(r.kind == "thinking" for r in scenario.replies)
        self.taken: dict[int, int] = {}

    def answer(self, body: Any, *, vertex: bool = False) -> ScriptedMessage | ScriptedError:
        """The next entry of the request's position; the API's own checks come first."""
        if isinstance(body, dict):
            rejected = self._reject(body, vertex)
            if rejected is None and self.scenario.server:
                rejected = _altered(body)
            if rejected is not None:
                return rejected
        with self._lock:
            entry = self._entry(body if isinstance(body, dict) else {})
            if isinstance(entry, ScriptedMessage):
                entry = self._with_usage(entry, body)
                if self.scenario.latency:  # operator actions then land while a call streams
                    entry = dataclasses.replace(entry, event_delay=_delay(entry, self.scenario))
        return entry

    def _entry(self, body: dict[str, Any]) -> ScriptedMessage | ScriptedError:
        if CHILD_SYSTEM in json.dumps(body.get("system", "")):
            return _child(body)
        seen = [int(m) for m in MARKER.findall(json.dumps(body))]
        if "You compact" in json.dumps(body.get("system", "")):
            return reply(text(f"Earlier work, up to wp{max(seen, default=-1)}x, went fine."))
        position = max(seen, default=-1) + 1
        entries = self._entries(position, _opens_turn(body.get("messages")))
        taken = self.taken.get(position, 0)
        self.taken[position] = taken + 1
        return entries[min(taken, len(entries) - 1)]

    def _entries(self, p: int, opens_turn: bool) -> list[ScriptedMessage | ScriptedError]:
        """What position `p` answers, in order: outages, a re-ask's cause, then the reply.

        Under thinking, a reply that opens an assistant turn opens with thinking, as Claude's
        does, and so does every reply with calls; a paused or cut-off reply inside a turn has
        none (seed 92), one that opens it has (seed 348).
        """
        if p >= len(self.scenario.replies):
            if self.scenario.ending == "refusal":
                details = {"type": "refusal", "category": "cyber", "explanation": "no more"}
                return [reply(text(f"wp{p}x"), stop_reason="refusal", stop_details=details)]
            return [reply(text(f"wp{p}x All errands done."))]
        r = self.scenario.replies[p]
        out: list[ScriptedMessage | ScriptedError] = [
            _error(r.outage) for _ in range(r.outage_times)
        ]
        calls = [
            tool_use(TOOLS[c.kind], arguments(c, p), id=f"toolu_wp{p}x_{i}")
            for i, c in enumerate(r.calls, start=1)
        ]
        opening = [thinking(f"wp{p}x start")] if self.thinking and opens_turn else []
        if r.kind == "max_tokens":
            cut = (
                [text(f"wp{p}x Working"), tool_use_partial("lookup", '{"ci', id=f"toolu_wp{p}x_0")]
                if calls
                else [*opening, text(f"wp{p}x I was saying")]
            )
            out.append(reply(*cut, stop_reason="max_tokens"))
        if r.kind == "overflow":
            out.append(
                ScriptedError(400, error_body("invalid_request_error", "prompt is too long"))
            )
        searched = _searched(p) if self.scenario.server else []
        if r.kind == "pause_turn":
            paused = [*opening, text(f"wp{p}x Searching, paused."), *searched]
            pause = reply(*paused, stop_reason="pause_turn")
            if searched:
                pause = dataclasses.replace(pause, container=dict(CONTAINER))
            return [*out, pause]
        first = [thinking(f"wp{p}x plan")] if self.thinking and calls else []
        if not (calls and searched):
            body = [*first, text(f"wp{p}x On it."), *calls]
            return [*out, reply(*body) if calls else reply(text(f"wp{p}x Noted."))]
        body = [*first, text(f"wp{p}x On it."), *searched, _cited(p), *calls]
        return [*out, dataclasses.replace(reply(*body), container=dict(CONTAINER))]


def _searched(p: int) -> list[dict[str, Any]]:
    """Claude's own web search at position `p`: the call and its result, as the API sends them."""
    call_id = f"srvtoolu_wp{p}x"
    result = {"type": "web_search_result", "url": f"https://example.org/{p}", "title": f"wp{p}x"}
    return [
        {"type": "server_tool_use", "id": call_id, "name": "web_search", "input": {"query": "x"}},
        {"type": "web_search_tool_result", "tool_use_id": call_id, "content": [result]},
    ]


def _delay(entry: ScriptedMessage, scenario: Scenario) -> float:
    """The scenario's latency per streamed event, within 4 s for the whole answer: about five
    events a block, and the torture's model steps time out after 10 s (seed 9047 streamed a
    server reply for longer and timed out on every try)."""
    return min(scenario.latency, 4.0 / (3 + 5 * len(entry.content)))


def _cited(p: int) -> dict[str, Any]:
    """Claude's text citing the search at position `p`, as the API sends it."""
    citation = {
        "type": "web_search_result_location",
        "url": f"https://example.org/{p}",
        "title": f"wp{p}x",
        "encrypted_index": f"EnCrYpTeD{p}",
        "cited_text": "x",
    }
    return {"type": "text", "text": f"wp{p}x Found it.", "citations": [citation]}


def _altered(body: dict[str, Any]) -> ScriptedError | None:
    """The real API's refusal of server blocks, citations or a container not sent back as
    answered; None when the request keeps them all."""
    system = json.dumps(body.get("system", ""))
    if CHILD_SYSTEM in system or "You compact" in system:
        return None
    messages = body.get("messages") if isinstance(body.get("messages"), list) else []
    served = False
    calls: set[str] = set()  # of the assistant turn so far (the API joins consecutive ones)
    for m, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if message.get("role") != "assistant" or not isinstance(content, list):
            if calls:
                return _invalid(f"messages.{m - 1}: a server_tool_use without its result")
            continue
        calls |= {b.get("id") for b in content if b.get("type") == "server_tool_use"}
        calls -= {b.get("tool_use_id") for b in content if b.get("type") != "server_tool_use"}
        for b, marked in enumerate(content):
            block = {k: v for k, v in marked.items() if k != "cache_control"}  # a breakpoint
            found = SERVER_ID.search(str(block.get("id") or block.get("tool_use_id") or ""))
            if found and block.get("type") in ("server_tool_use", "web_search_tool_result"):
                served = served or block["type"] == "web_search_tool_result"
                searched = _searched(int(found.group(1)))
                if block not in searched:
                    return _invalid(f"messages.{m}.content.{b}: server tool block altered")
            elif block.get("citations") is not None:
                cited = MARKER.search(str(block.get("text", "")))
                if cited is None or block != _cited(int(cited.group(1))):
                    return _invalid(f"messages.{m}.content.{b}: citations altered")
    if served and body.get("container") != CONTAINER["id"] and FORK_NOTE not in json.dumps(body):
        return _invalid("container: the container these server tool blocks ran in is missing")
    return None


def _invalid(message: str) -> ScriptedError:
    return ScriptedError(400, error_body("invalid_request_error", message))


def _opens_turn(messages: Any) -> bool:
    """The request ends with a user message that answers no tool call: Claude starts a turn."""
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return False
    last = messages[-1]
    content = last.get("content")
    answers = isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )
    return last.get("role") == "user" and not answers


def _child(body: dict[str, Any]) -> ScriptedMessage:
    """A sub-agent's run: pay once under its own ref (`<ref>c`), then say so."""
    messages = body.get("messages", [])
    if any(
        isinstance(m.get("content"), list)
        and any(b.get("type") == "tool_result" for b in m["content"])
        for m in messages
    ):
        return reply(text("Errand done."))
    ref = re.search(r"r\d+", json.dumps(messages[:1]))
    child_ref = f"{ref.group(0) if ref else 'r0'}c"
    return reply(tool_use("pay", {"ref": child_ref, "amount": 1}, id=f"toolu_{child_ref}"))


def _error(status: int) -> ScriptedError:
    kind = ERROR_TYPES.get(status, "api_error")
    body = error_body(kind, f"torture outage {status}")
    headers = {"request-id": body["request_id"]}
    if status in (429, 529):
        headers["retry-after"] = "0"
    return ScriptedError(status, body, headers)
