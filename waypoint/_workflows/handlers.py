"""The workflow's signal, Update and validator of every verb, made from `VERBS` in one place.

A verb sent as a signal (no worker was up) is decoded, a bad payload recorded and never
raised, then applied; sent as an Update it is checked by its validator first (the sender hears
a refusal, and history stays clean), then applied and answered with its `Receipt`. Both paths
call the workflow's `apply`, so they cannot disagree; a refusal found after the validator (a
signature that does not hold, checked by an activity) is recorded and said in the receipt,
never raised. Deterministic code only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RawValue

from waypoint._workflows import decisions

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol.verbs import HANDLERS, Receipt, Verb

W = TypeVar("W", bound=type)


def _signal(verb: Verb) -> Callable[..., Awaitable[None]]:
    async def signal(self, raw: RawValue) -> None:
        payload = self.decode(verb.handler, raw, verb.payload)
        if payload is not None:
            await self.apply(verb.handler, payload, False)

    signal.__annotations__ = {"raw": RawValue, "return": None}  # `self` has none: Temporal
    signal.__name__ = signal.__qualname__ = verb.handler
    signal.__doc__ = f"{verb.does[0].upper()}{verb.does[1:]} (a signal: no worker was up)."
    return workflow.signal(name=verb.handler)(signal)


def _update(verb: Verb) -> tuple[Callable[..., Any], Callable[..., None]]:
    async def update(self, payload: Any) -> Receipt:
        return await self.apply(verb.handler, payload, True)

    def check(self, payload: Any) -> None:
        decisions.refuse(self.refusal(verb.handler, payload))

    for made in (update, check):  # Temporal reads the payload's type from these; `self` has none
        made.__annotations__ = {"payload": verb.payload, "return": Receipt}
    check.__annotations__["return"] = None
    update.__name__ = update.__qualname__ = f"{verb.handler}_now"
    update.__doc__ = f"{verb.does[0].upper()}{verb.does[1:]}, and answer with the receipt."
    handler = workflow.update(name=verb.handler)(update)
    handler.validator(check)
    return handler, check


def made(cls: W) -> W:
    """Give `cls` (before `workflow.defn`) a signal, and an Update where it is one, per verb."""
    for verb in HANDLERS.values():
        setattr(cls, verb.handler, _signal(verb))
        if verb.update:
            handler, check = _update(verb)
            setattr(cls, f"{verb.handler}_now", handler)
            setattr(cls, f"_check_{verb.handler}", check)
    return cls
