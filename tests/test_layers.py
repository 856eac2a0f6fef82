"""The package's shape, read from its imports: floors, no import up a floor, no cycle.

A room is a top-level module or package of `waypoint/`. Each room sits on a floor
(`FLOORS`, lowest first); a module may import its own room and rooms on lower floors, never
a higher one. `protocol/` holds the types workflow code may import, so it imports only the
standard library, pydantic and itself (plus the two temporalio type modules its types are
made of, and jsonschema for answer schemas). A room named for a role, not a floor
(`BY_MODULE`: `operations/`), places each of its modules on its own floor by name.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).parent.parent / "waypoint"

FLOORS: list[set[str]] = [
    {"errors", "protocol", "moved"},
    {
        "security",
        "operations",
        "operations.deploys",
        "operations.connection",
        "operations.processes",
        "operations.ui",
        "operations.tracing",
        "operations.child_output",
        "content",
        "readable",
        "tomlfile",
    },
    {"tools", "server_tools", "workflows"},
    {"providers", "stores", "client_tools", "mcp", "client"},
    {"agent"},
    {"activities", "notify"},
    {"settings"},
    {
        "worker",
        "plugin",
        "operations.dev_server",
        "operations.codec_server",
        "operations.deploy_check",
    },
    {"console"},
    {"testing", "torture", "demo", "scripted"},
    {"cli"},
    {"__main__", "__init__"},
]
BY_MODULE = {"operations"}
"""Rooms whose modules stand on different floors: `operations.deploys` low, the servers high."""
PROTOCOL_MAY_IMPORT = {
    "__future__",
    "pydantic",
    "jsonschema",
    "temporalio.common",
    "temporalio.contrib.workflow_streams",
}
MAX_LINES = 400


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every module `name` imports, also inside functions and TYPE_CHECKING blocks."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            subs = {f"{base}.{a.name}" for a in node.names} & known.keys()
            found.update(subs)
            if len(subs) < len(node.names):
                found.add(base)
    return found


def room(module: str) -> str:
    parts = [p.removeprefix("_") if p[1:2] != "_" else p for p in module.split(".")]
    if len(parts) > 2 and parts[1] in BY_MODULE:
        return f"{parts[1]}.{parts[2]}"
    return parts[1] if len(parts) > 1 else "__init__"


def floor(module: str) -> int:
    return next(i for i, rooms in enumerate(FLOORS) if room(module) in rooms)


def graph() -> dict[str, set[str]]:
    known = modules()
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in known.items():
        for target in imports(name, path, known):
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                edges[name].add(target)
    return edges


def test_every_room_has_a_floor() -> None:
    placed = set().union(*FLOORS)
    assert {room(m) for m in modules()} - placed == set()


def test_no_module_imports_a_room_on_a_higher_floor() -> None:
    upward = [
        f"{a} -> {b}" for a, targets in graph().items() for b in targets if floor(b) > floor(a)
    ]
    assert upward == []


def test_there_is_no_import_cycle() -> None:
    edges = graph()
    cycles: list[list[str]] = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                cycles.append([v, *component])

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in list(modules()):
        if v not in index:
            visit(v)
    assert cycles == []


def imports_leaving(room_name: str, allowed: Callable[[str], bool]) -> list[str]:
    """Each import of a module in `room_name` that `allowed` refuses, as "module -> target"."""
    known = modules()
    return [
        f"{name} -> {target}"
        for name, path in known.items()
        if room(name) == room_name
        for target in imports(name, path, known)
        if not allowed(target)
    ]


def test_protocol_imports_only_the_standard_library_pydantic_and_itself() -> None:
    def allowed(target: str) -> bool:
        if (
            target.startswith("waypoint.protocol")
            or target.split(".")[0] in sys.stdlib_module_names
        ):
            return True
        return any(target == ok or target.startswith(ok + ".") for ok in PROTOCOL_MAY_IMPORT)

    assert imports_leaving("protocol", allowed) == []


def test_no_module_is_over_400_lines() -> None:
    long = {
        str(p.relative_to(ROOT.parent)): n
        for p in ROOT.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


WORKFLOW_MAY_IMPORT = {"__future__", "pydantic", "temporalio"}


def test_workflow_code_imports_only_protocol_errors_pydantic_and_temporalio() -> None:
    """Determinism starts with imports: no module of workflows/ can reach I/O or a clock."""

    def allowed(target: str) -> bool:
        top = target.split(".")[0]
        if room(target) in {"workflows", "protocol", "errors"} and top == "waypoint":
            return True
        if top in WORKFLOW_MAY_IMPORT or top in {"asyncio", "json", "datetime", "typing"}:
            return True
        return top in {"collections", "dataclasses", "enum", "functools", "itertools", "math"}

    assert imports_leaving("workflows", allowed) == []


def test_a_worker_module_does_not_load_cryptography_at_import() -> None:
    """The workflow sandbox re-imports what a worker imports; `cryptography` there breaks it.

    Seen after a move: `stores.blobs` came to import `stores.sealing` at the top, and the
    sandbox of any test importing `tests.conftest` failed with a SystemError.
    """
    import subprocess

    code = (
        "import sys, waypoint._worker, waypoint._cli.app, tests.conftest; "
        "print(sorted(m for m in sys.modules if m.startswith('cryptography')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


CLOCK_CALLS = {"now", "utcnow", "today", "fromtimestamp", "utcfromtimestamp"}


def test_workflow_code_reads_no_clock_but_the_workflows() -> None:
    """The worker passes Waypoint's modules through Temporal's sandbox (`worker.workflow_runner`),
    so a `datetime.now()` in workflow code would no longer fail at run time there: only
    `workflow.now()` may read the clock, and this test holds it where the sandbox did."""
    found = []
    for name, path in modules().items():
        if room(name) != "workflows":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = node.func.value
            if node.func.attr in CLOCK_CALLS and not (
                isinstance(owner, ast.Name) and owner.id == "workflow"
            ):
                found.append(f"{name}:{node.lineno} {ast.unparse(node.func)}()")
    assert found == []


TASK_BOUND = {"get_current_history_length", "get_current_history_size"}


def test_workflow_code_decides_nothing_on_the_task_an_activation_belongs_to() -> None:
    """`workflow.info()`'s history length and size are the workflow task's, and which task an
    event lands in differed live and on replay (torture seed 90101: a task timed out on a dead
    worker's sticky queue after an update; live went on, the replay continued-as-new). The
    segment asks the server in a recorded step instead (`workflows/history_meter.py`)."""
    found = []
    for name, path in modules().items():
        if room(name) != "workflows":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in TASK_BOUND | {
                "is_continue_as_new_suggested"
            }:
                found.append(f"{name}:{node.lineno} {node.attr}")
    assert found == []
