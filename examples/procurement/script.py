"""The offline scripts: what Claude would do, played by the scripted model for both agents.

Each entry reads the task and the tool results so far, so a run for another item, a blocked
supplier, a requester who declines, a denied or rejected order each end the way Claude would
end them. The requester's answer and the reviewer's decision come from outside the run.
"""

from __future__ import annotations

import re
from typing import Any

from examples.procurement.tools import SupplierCheckArgs, SupplierVerdict
from waypoint.protocol import ModelRequest, ModelResponse, text_of
from waypoint.testing import Script, final_answer, reply, text, tool_use
from waypoint.testing.model_requests import latest_result, result_json, task_as

_ORDER = re.compile(r"(?i)\border\s+(\d+)\s+(.+?)(?:\s+for\b|\.|$)")


def _task(request: ModelRequest) -> str:
    return text_of(request.messages[0].content)


def _data(request: ModelRequest, tool: str) -> Any:
    """The JSON a tool returned, or None when it failed or returned something else."""
    return result_json(latest_result(request, tool))


def _error(request: ModelRequest, tool: str) -> str:
    result = latest_result(request, tool)
    return text_of(result.content) if result is not None else f"{tool} returned nothing"


def _stop(why: str) -> ModelResponse:
    return reply(text(f"No purchase order was placed: {why}"))


def search(request: ModelRequest) -> ModelResponse:
    """Turn 1: search the catalogue for what the task asks for."""
    match = _ORDER.search(_task(request))
    if match is None:
        return _stop("the request does not say what to order and how many (`Order N things`).")
    return reply(
        text(f"Searching the catalogue for {match.group(2)}."),
        tool_use("search_catalogue", query=match.group(2)),
    )


def read_item(request: ModelRequest) -> ModelResponse:
    """Turn 2: read the first matching item's details (supplier, country, price)."""
    found = _data(request, "search_catalogue")
    if not found or not found.get("items"):
        return _stop(f"nothing in the catalogue matches. {_error(request, 'search_catalogue')}")
    first = found["items"][0]
    return reply(
        text(f"{first['name']} from {first['supplier']} fits. Reading its details."),
        tool_use("get_item", sku=first["sku"]),
    )


def check_supplier(request: ModelRequest) -> ModelResponse:
    """Turn 3: delegate the supplier check to the sub-agent."""
    item = _data(request, "get_item")
    if item is None:
        return _stop(f"the item's details could not be read. {_error(request, 'get_item')}")
    return reply(
        text(f"Asking the supplier check about {item['supplier']}."),
        tool_use("check_supplier", supplier=item["supplier"], country=item["supplier_country"]),
    )


def confirm(request: ModelRequest) -> ModelResponse:
    """Turn 4: if the supplier passed, ask the requester to confirm quantity and date."""
    verdict, item = _data(request, "check_supplier"), _data(request, "get_item")
    if verdict is None or not verdict.get("approved"):
        why = verdict["reason"] if verdict else _error(request, "check_supplier")
        return _stop(f"the supplier check did not approve {item['supplier']}: {why}")
    quantity = int(_ORDER.search(_task(request)).group(1))  # type: ignore[union-attr]
    price = item["unit_price_eur"]
    return reply(
        text("The supplier check passed. Confirming the order with the requester."),
        tool_use(
            "ask_requester",
            question=(
                f"Order {quantity} x {item['name']} from {item['supplier']} at {price:.2f} EUR "
                f"each ({quantity * price:.2f} EUR)? Please confirm the quantity and the "
                "latest delivery date."
            ),
            sku=item["sku"],
            item=item["name"],
            proposed_quantity=quantity,
            unit_price_eur=price,
        ),
    )


def order(request: ModelRequest) -> ModelResponse:
    """Turn 5: place the order the requester confirmed."""
    answer, item = _data(request, "ask_requester"), _data(request, "get_item")
    if answer is None:
        return _stop(f"the requester did not answer. {_error(request, 'ask_requester')}")
    if not answer["confirmed"]:
        return _stop(f"the requester declined. {answer.get('note', '')}".strip())
    quantity, price = answer["quantity"], item["unit_price_eur"]
    return reply(
        text(f"Placing the order for {quantity} x {item['sku']}."),
        tool_use(
            "place_order",
            sku=item["sku"],
            supplier=item["supplier"],
            supplier_country=item["supplier_country"],
            quantity=quantity,
            unit_price_eur=price,
            total_eur=round(quantity * price, 2),
            deliver_by=answer["deliver_by"],
        ),
    )


def report(request: ModelRequest) -> ModelResponse:
    """Turn 6: the result, honest about a denied, rejected or failed order."""
    placed = _data(request, "place_order")
    if placed is None:
        return _stop(_error(request, "place_order"))
    return reply(
        text(
            f"Ordered {placed['quantity']} x {placed['sku']} from {placed['supplier']} for "
            f"{placed['total_eur']:.2f} EUR, delivery by {placed['deliver_by']}."
        )
    )


SCRIPT: Script = [search, read_item, check_supplier, confirm, order, report]
"""The buyer: search, read the item, check the supplier, confirm, order, report."""


def _checked(request: ModelRequest) -> SupplierVerdict:
    task = task_as(request, SupplierCheckArgs)
    found, screen = _data(request, "lookup_registry"), _data(request, "screen_sanctions")
    matched = screen is None or screen["result"] != "no_match"
    registered = bool(found and found["found"])
    if matched:
        reason = "the sanctions screen matched (or failed): do not order"
    elif not registered:
        reason = "not found in the company registry"
    else:
        reason = f"registered as {found['id']}; no match on the sanctions list by name"  # type: ignore[index]
    return SupplierVerdict(
        supplier=task.supplier,
        country=task.country,
        registry_id=found["id"] if registered else None,  # type: ignore[index]
        sanctions_match=matched,
        approved=registered and not matched,
        reason=reason,
    )


def _look_up(request: ModelRequest) -> ModelResponse:
    task = task_as(request, SupplierCheckArgs)  # the parent's call, as the sub-agent's task
    return reply(
        tool_use("lookup_registry", name=task.supplier),
        tool_use("screen_sanctions", company=task.supplier, country=task.country),
    )


def _record(request: ModelRequest) -> ModelResponse:
    v = _checked(request)
    verdict = "approved" if v.approved else "blocked"
    return reply(
        tool_use(
            "record_check", supplier=v.supplier, country=v.country, verdict=verdict, reason=v.reason
        )
    )


def _answer(request: ModelRequest) -> ModelResponse:
    return reply(final_answer(_checked(request)))


CHECKER_SCRIPT: Script = [_look_up, _record, _answer]
"""The supplier check: registry and sanctions in parallel, record the verdict, answer."""
