"""The kill test's verdict on its own: each violation names the step, the kill point and the
field; every effect the counter reports counts, whatever the ledger line says. And the helpers
a script entry reads its request with.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from waypoint._cli.harness import approval_rule, comparison, parse_tool_options
from waypoint.errors import WaypointError
from waypoint.protocol import (
    Message,
    ModelRequest,
    RunResult,
    StepRecord,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from waypoint.protocol.base import StepStatus
from waypoint.testing import Kill, KillReport, latest_result, read_again, result_json, task_as
from waypoint.testing.verdict import count, first_difference, judge, near


def result(output: dict[str, Any], *lines: tuple[str, StepStatus], run: str = "k") -> RunResult:
    ledger = [
        StepRecord(step_id=s, kind="tool", input_hash="h", status=t, effect_key=f"{run}/{s}")
        for s, t in lines
    ]
    return RunResult(
        agent="travel",
        output=json.dumps(output),
        output_json=output,
        ledger=ledger,
        turns=3,
        stop_reason="tool_use",
        total_tokens=0,
        cost_usd=0.0,
        cost_known=True,
    )


KILLS = [
    Kill("after t1.model", completed={"t1.model"}, in_flight=set()),
    Kill("while awaiting approval", completed={"t1.model", "t2.tool.1.hold"}, in_flight={"x"}),
]


def test_a_differing_ledger_names_its_first_differing_line() -> None:
    same = result({}, ("t1.tool.1.a", "completed"))
    assert first_difference(same, same) == ""
    ref = result({}, ("t1.tool.1.a", "completed"), ("t1.tool.2.b", "completed"))
    got = result({}, ("t1.tool.1.a", "completed"), ("t1.tool.2.b", "error"))
    assert first_difference(ref, got) == (
        "ledger differs at line 2: t1.tool.2.b error vs t1.tool.2.b completed uninterrupted"
    )
    shorter = result({}, ("t1.tool.1.a", "completed"))
    assert first_difference(ref, shorter) == (
        "ledger differs at line 2: only the uninterrupted run has t1.tool.2.b completed "
        "(1 lines vs 2)"
    )


def test_a_differing_field_is_named_with_the_kills_and_fields_can_leave_ids_out() -> None:
    ref = result({"trip": {"hold_id": "H-1", "fare": 120}}, ("t2.tool.1.hold", "completed"))
    got = result({"trip": {"hold_id": "H-2", "fare": 120}}, ("t2.tool.1.hold", "completed"))
    report = KillReport(reference=ref, result=got, run_id="r", kills=KILLS)
    judge(report, set(), None)
    assert report.violations == [
        "result differs in field output.trip.hold_id: 'H-2' vs 'H-1' uninterrupted "
        "(kill 1 (after t1.model), kill 2 (while awaiting approval))"
    ]
    by_fields = KillReport(reference=ref, result=got, run_id="r", kills=KILLS)
    judge(by_fields, set(), ["trip.fare"])
    assert by_fields.violations == []
    by_function = KillReport(reference=ref, result=got, run_id="r", kills=KILLS)
    judge(by_function, set(), lambda r: r.output_json["trip"]["hold_id"][0])  # type: ignore[index]
    assert by_function.violations == []
    wrong = KillReport(reference=ref, result=got, run_id="r", kills=KILLS)
    judge(wrong, set(), ["trip.seat"])
    assert wrong.violations == [
        "result cannot be compared: ValueError: compare field 'trip.seat': the typed result "
        "has no 'seat' there"
    ]


def test_a_ledger_difference_names_the_kill_the_step_ran_after() -> None:
    ref = result({}, ("t2.tool.1.hold", "completed"), ("t3.tool.1.charge", "completed"))
    got = result({}, ("t2.tool.1.hold", "completed"), ("t3.tool.1.charge", "error"))
    report = KillReport(reference=ref, result=got, run_id="r", kills=KILLS)
    judge(report, set(), None)
    assert report.violations == [
        "ledger differs at line 2: t3.tool.1.charge error vs t3.tool.1.charge completed "
        "uninterrupted; t3.tool.1.charge ran after kill 2 (while awaiting approval)"
    ]
    assert near(KILLS, "x") == "in flight at kill 2 (while awaiting approval)"
    assert near(KILLS, "t1.model") == "done before kill 1 (after t1.model)"
    assert near([], "t1.model") == "with no kill"


async def test_every_effect_the_downstream_saw_counts_whatever_the_ledger_says() -> None:
    seen = {"ref/t2.tool.1.hold": 1, "k/t2.tool.1.hold": 1, "k/t3.tool.1.charge": 1}
    seen["k/t4.tool.1.mail"] = 2
    lines = ("t2.tool.1.hold", "completed"), ("t3.tool.1.charge", "rejected")
    ref = result({}, *lines, run="ref")
    got = result(
        {},
        ("t2.tool.1.hold", "completed"),
        ("t3.tool.1.charge", "rejected"),  # rejected, yet the bank shows a charge
        ("t4.tool.1.mail", "error"),  # an error line, yet two mails went out
    )
    report = KillReport(reference=ref, result=got, run_id="r", kills=KILLS)
    await count(None, report, lambda key: seen.get(key, 0))  # type: ignore[arg-type]
    assert report.effect_counts == {"t2.tool.1.hold": 1, "t3.tool.1.charge": 1, "t4.tool.1.mail": 2}
    assert report.reference_effect_counts == {"t2.tool.1.hold": 1, "t3.tool.1.charge": 0}
    assert report.violations == [
        "t3.tool.1.charge: effect happened 1 times (k/t3.tool.1.charge, ledger rejected; "
        "0 uninterrupted), after kill 2 (while awaiting approval)",
        "t4.tool.1.mail: effect happened 2 times (k/t4.tool.1.mail, ledger error), "
        "after kill 2 (while awaiting approval)",
    ]


class Booking(BaseModel):
    route: str
    fare_cents: int


def test_a_script_finds_a_tools_latest_result_a_refresh_and_its_typed_task() -> None:
    call = ToolUseBlock(id="toolu_1", name="fares", input={"route": "LIS-BER"})
    refused = (
        'The call to book was not run: what it relied on changed since it was read. fares({"route":'
        ' "LIS-BER"}) read again now returns: {"cents": 13000}; policy({}) read again now '
        "returns: economy. Decide again with these results; a new call is a new step."
    )
    request = ModelRequest(
        step_id="t3.model",
        turn=3,
        model="scripted",
        provider="scripted",
        agent="booker",
        system="",
        tools=[],
        max_tokens=100,
        messages=[
            Message(role="user", content=[TextBlock(text='{"route": "LIS-BER", "fare_cents": 5}')]),
            Message(role="assistant", content=[call]),
            Message(
                role="user",
                content=[ToolResultBlock(tool_use_id="toolu_1", content='{"cents": 12000}')],
            ),
            Message(role="assistant", content=[ToolUseBlock(id="toolu_2", name="book", input={})]),
            Message(
                role="user",
                content=[ToolResultBlock(tool_use_id="toolu_2", content=refused, is_error=True)],
            ),
        ],
    )
    assert result_json(latest_result(request, "fares")) == {"cents": 12000}
    assert read_again(request, "fares") == '{"cents": 13000}'
    assert read_again(request, "policy") == "economy"
    assert read_again(request, "book") is None
    assert latest_result(request, "book").is_error  # type: ignore[union-attr]
    assert result_json(latest_result(request, "book")) is None
    assert latest_result(request, "hold") is None
    assert task_as(request, Booking) == Booking(route="LIS-BER", fare_cents=5)


def test_killtest_flags_parse_into_fields_rules_and_tool_options() -> None:
    assert comparison("route, fare_cents,") == ["route", "fare_cents"]
    assert comparison(None) is None
    assert callable(comparison("tests.travel_app:count_effects"))
    assert approval_rule("reject") == "reject"
    assert parse_tool_options(["fares.fresh_for=1.5", "fares.max_attempts=2"]) == {
        "fares": {"fresh_for": 1.5, "max_attempts": 2}
    }
    for bad, said in [
        ("fares.fresh=1", "write TOOL.OPTION=VALUE"),
        ("fares.timeout=soon", "give a number"),
        ("fares.timeout=-1", "--tool-option"),
    ]:
        with pytest.raises(WaypointError, match=said):
            parse_tool_options([bad])
    with pytest.raises(WaypointError, match="no function nobody"):
        approval_rule("tests.travel_app:nobody")
