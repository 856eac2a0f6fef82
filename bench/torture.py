"""The torture soak: seeded scenarios across features and faults, invariants checked after each.

    python bench/torture.py --seeds 1..50 [--workers 2] [--no-shrink]
    python bench/torture.py --replay /tmp/.../seed-7/scenario.json [--repeat 4]

Starts its own dev server on a free port and the local fake Messages API per scenario; prints
the table (scenarios, events by kind, faults injected, violations by invariant, seconds) and,
for each failing seed, its (shrunk) scenario file and the one command that replays it. Exits
non-zero on any violation. `--repeat N` plays a replayed scenario N times, one after another,
and says in how many it failed: a timing-bound failure is judged by its rate, not by one play.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.torture_api import TortureAPI  # noqa: E402
from waypoint._cli.common import STOP_SIGNALS, unblock_stop_signals  # noqa: E402
from waypoint._operations.dev_server import free_port, start_dev_server  # noqa: E402
from waypoint._torture.scenario import Scenario, generate  # noqa: E402
from waypoint._torture.soak import soak  # noqa: E402
from waypoint.settings import connect  # noqa: E402
from waypoint.stores.payloads import data_converter  # noqa: E402


def seeds(text: str) -> range:
    """`A..B` (both included) or a single seed."""
    first, _, last = text.partition("..")
    return range(int(first), int(last or first) + 1)


async def main_async(args: argparse.Namespace) -> int:
    # Ctrl-C or SIGTERM cancels the soak, so its dev servers and workers are stopped, not orphaned.
    soak_task = asyncio.current_task()
    assert soak_task is not None
    for sig in STOP_SIGNALS:
        asyncio.get_running_loop().add_signal_handler(sig, soak_task.cancel)
    unblock_stop_signals()
    if args.replay:
        scenarios = [Scenario.load(Path(args.replay))]
    else:
        scenarios = [generate(s) for s in seeds(args.seeds)]
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="waypoint-torture-"))
    server = start_dev_server(workdir / "state", port=free_port(), ui_port=free_port())
    store = workdir / "payloads"
    try:
        client = await connect(
            {"target_host": server.address}, data_converter=data_converter(store)
        )
        failed = 0
        for n in range(args.repeat if args.replay else 1):
            table = await soak(
                client,
                scenarios,
                workdir / f"play{n + 1}" if args.repeat > 1 else workdir,
                TortureAPI,
                workers=args.workers,
                shrink_failures=not args.no_shrink and not args.replay,
                timeout=args.timeout,
                store=store,
                progress=lambda line: print(line, file=sys.stderr, flush=True),
            )
            print(table.render())
            failed += bool(table.failing)
    finally:
        server.stop()
    if args.replay and args.repeat > 1:
        print(f"\nfailed {failed} of {args.repeat} plays")
    print(f"\nscenario folders under {workdir}")
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seeds", default="1..10", help="A..B, both included")
    parser.add_argument("--workers", type=int, default=1, help="scenarios at once")
    parser.add_argument("--replay", help="a scenario file a failing seed wrote")
    parser.add_argument("--no-shrink", action="store_true", help="keep failures as generated")
    parser.add_argument("--repeat", type=int, default=1, help="plays of a --replay, in a row")
    parser.add_argument(
        "--timeout", type=float, default=240.0, help="seconds a scenario may take to end"
    )
    parser.add_argument("--workdir", help="where scenario folders go (default: a temp folder)")
    try:
        sys.exit(asyncio.run(main_async(parser.parse_args())))
    except asyncio.CancelledError:
        sys.exit("torture: stopped; no table for an unfinished soak")


if __name__ == "__main__":
    main()
