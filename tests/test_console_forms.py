"""Every role's actions on the run page: answer from the answer schema's form, resolve a parked
effect seeing what was tried, raise a limit, start a run; each checked on the server (the form
again with the message, 422), refused to a viewer (403), and asserted on the run's own record.

A real dev server and worker; the console app over HTTP (httpx's ASGI transport).
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import httpx
from temporalio.client import Client

from tests.agents import PAY_SCRIPT, Faults, Payments, build_agent
from tests.client_tool_app import asker
from tests.conftest import running_worker, wait_for_state
from tests.test_console import make_console, sign_in
from tests.test_reconcile import FAST, PAY_STEP, pay_record
from waypoint._console.app import build_app
from waypoint.client import runs
from waypoint.protocol import HistoryOverride, Limits, LimitsOverride, RunInput

OPS = {"Authorization": "Bearer wpt_ops-token"}


def page_text(answer: httpx.Response) -> str:
    return html.unescape(answer.text)


async def test_an_answer_comes_from_the_form_its_schema_makes_and_is_checked_first(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    console = make_console(client, tmp_path, task_queue)
    transport = httpx.ASGITransport(app=build_app(console))
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://console") as http,
        running_worker(client, [asker(tmp_path / "notes.db")], task_queue),
    ):
        handle = await runs.start_run(client, "asker", "Pick a colour.", task_queue=task_queue)
        (question,) = (await wait_for_state(client, handle.id, "awaiting_answer")).pending_questions
        form = {"step_id": question.step_id}
        csrf = await sign_in(http, "vic")
        seen = page_text(await http.get(f"/runs/{handle.id}"))
        assert "Which colour?" in seen and 'name="a.choice"' not in seen  # a viewer: no form
        refused = await http.post(f"/runs/{handle.id}/answer", data={**form, "csrf": csrf})
        assert refused.status_code == 403
        http.cookies.clear()
        csrf = await sign_in(http, "ops")
        shown = page_text(await http.get(f"/runs/{handle.id}"))
        assert re.search(r'<label for="answer-[^"]+-choice">Choice', shown), shown
        assert "<option>red</option>" in shown and "<option>blue</option>" in shown
        wrong = await http.post(
            f"/runs/{handle.id}/answer",
            data={**form, "csrf": csrf, "a.choice": "green", "a.note": "kept"},
        )
        assert wrong.status_code == 422
        assert "Choice: choose one of red, blue" in page_text(wrong)
        assert ">kept</textarea>" in wrong.text or 'value="kept"' in wrong.text  # typed, kept
        api = await http.post(
            f"/api/runs/{handle.id}/answer",
            json={"step_id": question.step_id, "result": {"choice": "green"}},
            headers=OPS,
        )
        assert api.status_code == 422 and "'green' is not one of" in api.json()["detail"]
        done = await http.post(
            f"/runs/{handle.id}/answer",
            data={**form, "csrf": csrf, "a.choice": "blue", "a.note": "like the sky"},
        )
        assert done.status_code == 303, done.text
        result = await handle.result()
    assert "User said" in result.output and "blue" in result.output
    (step,) = [r for r in result.ledger if r.step_id == question.step_id]
    assert step.decided_by and step.decided_by.startswith("ops via console")


async def test_an_operator_resolves_a_parked_effect_seeing_what_was_tried(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    faults = Faults(lose_response=1, reconcile_unreachable=1)
    payments = Payments(tmp_path / "p.db", faults)
    console = make_console(client, tmp_path, task_queue)
    transport = httpx.ASGITransport(app=build_app(console))
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://console") as http,
        running_worker(client, [build_agent(payments, PAY_SCRIPT)], task_queue),
    ):
        handle = await runs.start_run(client, "payer", "pay", task_queue=task_queue, options=FAST)
        await wait_for_state(client, handle.id, "needs_reconciliation")
        csrf = await sign_in(http, "ops")
        shown = page_text(await http.get(f"/runs/{handle.id}"))
        assert "Did <code>pay</code> happen?" in shown
        assert "bank accepted the payment but the reply was lost" in shown  # what was tried
        assert "bank lookup unreachable" in shown and '"payee": "ada"' in shown
        form = {"csrf": csrf, "step_id": PAY_STEP, "action": "retry"}
        unsaid = await http.post(f"/runs/{handle.id}/resolve", data=form)
        assert unsaid.status_code == 422 and "reason" in page_text(unsaid)
        assert 'value="retry" checked' in unsaid.text  # the form again, as it was sent
        done = await http.post(
            f"/runs/{handle.id}/resolve", data={**form, "reason": "the bank is back"}
        )
        assert done.status_code == 303 and "said=resolve" in done.headers["location"]
        result = await handle.result()
    record = pay_record(result)
    assert (record.status, record.reconciled) == ("completed", True)
    assert faults.executions == 1 and payments.count(record.effect_key) == 1


async def test_a_limit_is_raised_from_the_page_and_a_start_from_its_form(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    payments = Payments(tmp_path / "p.db")
    agent = build_agent(payments, PAY_SCRIPT, name="lender", limits=Limits(max_turns=1))
    console = make_console(client, tmp_path, task_queue)
    transport = httpx.ASGITransport(app=build_app(console))
    lend = {"Authorization": "Bearer wpt_lend-token"}  # operator of lender
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://console") as http,
        running_worker(client, [agent], task_queue),
    ):
        form = page_text(await http.get("/start", headers=lend))
        assert '<label for="start-task">Task' in form and "<option>lender</option>" in form
        blank = await http.post("/start", data={"a.agent": "lender", "a.task": " "}, headers=lend)
        assert blank.status_code == 422 and "Task: required" in page_text(blank)
        other = await http.post("/start", data={"a.agent": "payer", "a.task": "x"}, headers=lend)
        assert other.status_code == 403
        started = await http.post(
            "/start",
            data={
                "a.agent": "lender",
                "a.task": "pay ada 5",
                "a.workflow_id": f"lend-{task_queue}",
            },
            headers=lend,
        )
        assert started.status_code == 303, started.text
        run = f"lend-{task_queue}"
        assert started.headers["location"] == f"/runs/{run}?said=started"
        await wait_for_state(client, run, "limit_reached")
        shown = page_text(await http.get(f"/runs/{run}", headers=lend))
        assert '<label for="limit-turns">Max turns' in shown
        bad = await http.post(f"/runs/{run}/resume", data={"max_turns": "many"}, headers=lend)
        assert bad.status_code == 422 and "max_turns" in page_text(bad)
        lower = await http.post(f"/runs/{run}/resume", data={"max_turns": "1"}, headers=lend)
        assert lower.status_code == 409 and "would not raise" in page_text(lower)
        raised = await http.post(
            f"/runs/{run}/resume", data={"max_turns": "5", "reason": "ok"}, headers=lend
        )
        assert raised.status_code == 303 and "said=limits" in raised.headers["location"]
        result = await runs.handle(client, run).result()
    assert result.output == "Paid ada 5." and payments.count() == 1
    assert any(r.step_id.startswith("t1.limits") or ".limits." in r.step_id for r in result.ledger)


async def test_a_run_started_on_the_form_runs_under_the_limits_and_settings_given(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    """The start form and `POST /api/runs` take limits, a history budget and durability, each
    checked (422 with the field and why, never 500); what is no person's to set (step timeouts,
    a rerun) is refused by name; the run begins with what was given and the console's own step
    options, and parks at the turn limit the form set."""
    payments = Payments(tmp_path / "p.db")
    console = make_console(client, tmp_path, task_queue, start_options=FAST)
    transport = httpx.ASGITransport(app=build_app(console))
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://console") as http,
        running_worker(client, [build_agent(payments, PAY_SCRIPT)], task_queue),
    ):
        form = page_text(await http.get("/start", headers=OPS))
        for label in ("Max turns", "Max cost (USD)", "Max total tokens", "Durability"):
            assert f">{label}</label>" in form, label
        start = {"a.agent": "payer", "a.task": "pay ada 5"}
        for field, value, said in (
            ("max_turns", "-3", "max_turns: Input should be greater than or equal to 1"),
            ("max_turns", "many", "Max turns: 'many' is not a number"),
            ("max_cost_usd", "1e400", "max_cost_usd: Input should be a finite number"),
            ("max_total_tokens", "1e15", "max_total_tokens: Input should be less than or equal"),
            ("history_events", "3", "history_events: Input should be greater than or equal to 50"),
            ("durability", "fast", "Durability: choose one of step, turn"),
            ("tool_timeout", "0.1", "tool_timeout cannot be set on a start: step timeouts"),
            ("rerun", "on", "rerun cannot be set on a start: a rerun does a finished run's"),
        ):
            bad = await http.post("/start", data={**start, f"a.{field}": value}, headers=OPS)
            assert bad.status_code == 422 and said in page_text(bad), (field, bad.text[-800:])
            kept = f'value="{value}"' in page_text(bad)  # a number typed is kept
            assert kept or field in ("durability", "rerun", "tool_timeout")
        for body, said in (
            ({"max_turns": -1}, "body.max_turns: Input should be greater than or equal to 1"),
            ({"max_turns": "many"}, "body.max_turns: Input should be a valid integer"),
            ({"max_cost_usd": 1e300}, "body.max_cost_usd: Input should be less than or equal"),
            ({"options": {"tool_timeout": "PT1S"}}, "options cannot be set on a start: step"),
        ):
            refused = await http.post("/api/runs", json={**body, "agent": "payer", "task": "x"})
            assert refused.status_code == 401  # no credentials: nothing read before that
            refused = await http.post(
                "/api/runs", json={**body, "agent": "payer", "task": "x"}, headers=OPS
            )
            assert refused.status_code == 422 and said in refused.json()["detail"], refused.text
        run = f"limited-{task_queue}"
        chosen = {"max_turns": "1", "max_cost_usd": "2.5", "max_total_tokens": "50000"}
        chosen |= {"durability": "turn", "history_events": "400", "keep_turns": "2"}
        started = await http.post(
            "/start",
            data={**start, "a.workflow_id": run, **{f"a.{k}": v for k, v in chosen.items()}},
            headers=OPS,
        )
        assert started.status_code == 303, started.text
        await wait_for_state(client, run, "limit_reached")
        handle = runs.handle(client, run)
        events = (await handle.fetch_history()).events
        payloads = events[0].workflow_execution_started_event_attributes.input.payloads
        (began,) = await client.data_converter.decode(payloads, [RunInput])
        given = LimitsOverride(max_turns=1, max_cost_usd=2.5, max_total_tokens=50_000)
        assert (began.limits, began.limits_override) == (None, given)
        history = HistoryOverride(max_events=400, keep_recent_turns=2)
        assert (began.history, began.history_override) == (None, history)
        assert (began.durability, began.options, began.task) == ("turn", FAST, "pay ada 5")
        in_force = await handle.query("limits", result_type=Limits)
        assert in_force == Limits(max_turns=1, max_cost_usd=2.5, max_total_tokens=50_000)
        raised = await http.post(f"/api/runs/{run}/resume", json={"max_turns": 5}, headers=OPS)
        assert raised.status_code == 200, raised.text
        result = await handle.result()
    assert result.output == "Paid ada 5." and payments.count() == 1
