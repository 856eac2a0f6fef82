"""Shrinking a failing scenario: every scenario one event smaller, to play again."""

from __future__ import annotations

from waypoint._torture.scenario import Scenario


def shrink_candidates(scenario: Scenario) -> list[Scenario]:
    """Scenarios one event smaller: an action, a reply, a call, a fault or a limit fewer."""
    out: list[Scenario] = []

    def copy() -> Scenario:
        return Scenario.from_json(scenario.to_json())

    for i in range(len(scenario.actions)):
        s = copy()
        del s.actions[i]
        out.append(s)
    for i in range(len(scenario.replies)):
        if len(scenario.replies) > 1:
            s = copy()
            del s.replies[i]
            s.actions = [a for a in s.actions if a.at_turn <= len(s.replies)]
            out.append(s)
        for j, call in enumerate(scenario.replies[i].calls):
            if len(scenario.replies[i].calls) > 1:
                s = copy()
                del s.replies[i].calls[j]
                out.append(s)
            if call.fault:
                s = copy()
                s.replies[i].calls[j].fault = ""
                out.append(s)
        if scenario.replies[i].outage or scenario.replies[i].kind != "calls":
            s = copy()
            s.replies[i].outage, s.replies[i].outage_times = 0, 0
            if s.replies[i].kind != "text":
                s.replies[i].kind = "calls" if s.replies[i].calls else "text"
            out.append(s)
    for name in ("max_turns", "max_cost_usd", "history_events"):
        if getattr(scenario, name) is not None:
            s = copy()
            setattr(s, name, None)
            out.append(s)
    for name, off in (
        ("store", False),
        ("signed", False),
        ("latency", 0.0),
        ("server", False),
        ("console", False),
        ("turn", False),
        ("moving", False),
        ("namespaced", False),
        ("form_start", False),
    ):
        if getattr(scenario, name):
            s = copy()
            setattr(s, name, off)
            out.append(s)
    for i, action in enumerate(scenario.actions):
        if action.size:
            s = copy()
            s.actions[i].size = 0
            out.append(s)
    return out
