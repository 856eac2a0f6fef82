"""Random-kill soak: SIGKILL the demo's worker at random moments over several runs.

    python bench/kill_soak.py [--runs 4] [--kills 5] [--seed 7]

Starts its own dev server on a free port; prints, per run, where each kill landed, what was in
flight and re-ran, and the downstream effect counts; exits non-zero if any promise broke.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from waypoint._operations.dev_server import free_port, start_dev_server  # noqa: E402
from waypoint.demo import DEMO_TASK  # noqa: E402
from waypoint.demo.downstream import count_emails, count_vendors  # noqa: E402
from waypoint.settings import connect  # noqa: E402
from waypoint.testing import KillPoint, run_kill_test  # noqa: E402


async def soak(runs: int, kills: int, seed: int) -> bool:
    rng = random.Random(seed)
    ok = True
    total_kills = 0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        server = start_dev_server(work / "state", port=free_port(), ui_port=free_port())
        try:
            client = await connect({"target_host": server.address})
            for n in range(runs):
                downstream = work / f"downstream-{n}"
                delays = [rng.uniform(0.05, 1.2) for _ in range(kills)]
                started = time.monotonic()
                report = await run_kill_test(
                    client,
                    app="waypoint.demo:agents",
                    agent="vendor_onboarding",
                    task=DEMO_TASK,
                    task_queue=f"soak-{n}",
                    workdir=work / f"run-{n}",
                    kill_points=[KillPoint.after_seconds(d) for d in delays],
                    count_effects=lambda key, d=downstream: (
                        count_vendors(d, key) + count_emails(d, key)
                    ),
                    env={
                        "TEMPORAL_ADDRESS": server.address,
                        "WAYPOINT_DEMO_DIR": str(downstream),
                        "WAYPOINT_SCRIPTED_LATENCY": "0.3",
                        "PYTHONPATH": str(ROOT),
                    },
                    timeout=120,
                )
                total_kills += len(report.kills)
                print(f"run {n + 1}: {time.monotonic() - started:.1f}s, {report.summary()}")
                ok = ok and report.ok
        finally:
            server.stop()
    print(f"\n{total_kills} kills over {runs} runs: {'all promises held' if ok else 'FAILED'}")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    sys.exit(0 if asyncio.run(soak(args.runs, args.kills, args.seed)) else 1)


if __name__ == "__main__":
    main()
