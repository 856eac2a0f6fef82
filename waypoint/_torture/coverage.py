"""What the torture test sends the product, declared: it grows with the product.

Each signal and update of `AgentWorkflow` and each `waypoint` CLI verb is mapped to the
scenario event (a key of `Scenario.kinds()`) that makes the driver send it or exercise what it
calls, or to the reason it needs none; a verb's event is its `Verb.torture`
(`waypoint.protocol.verbs.VERBS`). `tests/test_torture_coverage.py` fails when the workflow
gains a handler or the CLI a verb that is not here, or when an event named here is one
`generate` never draws.
"""

from __future__ import annotations

from waypoint.protocol.verbs import VERBS

SENT: dict[str, str] = {v.handler: v.torture for v in VERBS.values() if v.handler}
"""Signal or update name -> the event the driver sends it for: an approval call is decided
(`reject` when drawn so), a worker killed after a `pay` commits leaves it to resolve, a client
call is answered, three 529s park the run for `resume`; the rest are actions. Every one is
sent as an Update where the workflow has one and a worker answers, else as a signal."""
QUERIES: dict[str, str] = {
    "status": "the driver, every poll (`runs.status`)",
    "limits": "the driver, before each raise_limits",
    "pending_approvals": "the driver, through status (`decisions.approve` checks against it)",
    "state": "the invariants, through the run's memo and result",
    "ledger": "the invariants, through the run's result",
    "policy": "the driver's policy_set, through `decisions.set_policy`",
    "fork_state": "fork, through `runs.fork` (the fork loads its source's state)",
}
"""Query name -> who reads it."""
CLI: dict[str, str] = {
    **{v.command: v.torture for v in VERBS.values()},
    "decision-key": "signed:decisions",
    "start": "action:rerun",
    "worker": "action:kill",
    "server": "action:server_kill",
    "deploy check": "action:deploy_check",
    "deploy set-current": "action:deploy_build",
    "console": "console:http",
    "watch": "action:watch",
}
"""CLI verb -> the event whose driver calls the client function it calls (`start` with
`--rerun` is `runs.start_run(rerun=True)`; `worker` is the process every kill restarts)."""
CLI_NOT_SENT: dict[str, str] = {
    "list": "reads only",
    "status": "reads only (the driver polls `runs.status`)",
    "ledger": "reads only (the invariants read every ledger)",
    "result": "reads only (the invariants read every result)",
    "inspect": "reads only",
    "deploy show": "reads only",
    "connection": "reads only: prints the connection settings",
    "terminate": "ends a run with no cleanup; the `failed` invariant holds no scenario needs it",
    "gc": "collects the payload store's unreferenced objects, offline; no run's path",
    "deploy ramp": "splits new runs between builds; a scenario has one run to move",
    "setup": "prepares a namespace once, before any scenario",
    "register-search-attributes": "prepares a namespace once, before any scenario",
    "codec-server": "decodes payloads for the UI; no run's path",
    "console-user": "writes the console's users file; no run's path",
    "console-token": "writes the console's users file; no run's path",
    "demo": "a harness of its own (the vendor demo)",
    "killtest": "a harness of its own (kills a user's worker)",
    "torture": "a harness of its own (this test on a user's agent; tests/test_torture.py)",
}
"""CLI verb -> why no scenario event exercises it."""
