"""The torture test's CI slice: fixed seeds that cover every event kind, invariants checked.

`python bench/torture.py --seeds A..B` is the long soak; these seeds were chosen (greedily,
from the generator alone) so that together they hold every kind of event it makes, each server
kill and new build firing; seed 1 is kept as found: its slow `pay` was written twice, because
nothing stopped the first try after its timeout (tests/test_reconcile.py keeps it small).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client

from tests.torture_api import TortureAPI
from waypoint.storage import data_converter
from waypoint.torture.runner import replay_command
from waypoint.torture.scenario import Scenario, generate, shrink_candidates
from waypoint.torture.soak import play

CI_SEEDS = (1, 1806, 2194, 2963, 1364, 2333, 3444)


def test_ci_seeds_cover_every_event_kind_the_generator_makes() -> None:
    every: set[str] = set()
    for seed in range(1, 5000):
        every |= set(generate(seed).kinds())
    covered = {k for s in CI_SEEDS for k in generate(s).kinds()}
    assert every - covered == set()


def test_a_scenario_file_round_trips_and_shrinks_to_smaller_scenarios() -> None:
    scenario = generate(1806)
    assert Scenario.from_json(scenario.to_json()) == scenario
    smaller = shrink_candidates(scenario)
    assert smaller and all(s != scenario for s in smaller)
    assert all(sum(s.kinds().values()) <= sum(scenario.kinds().values()) for s in smaller)


@pytest.mark.parametrize("seed", CI_SEEDS)
async def test_seeded_scenario_keeps_every_invariant(
    client: Client, tmp_path: Path, seed: int
) -> None:
    store = tmp_path / "payloads"  # what `store` scenarios' workers offload to
    client = Client(
        client.service_client, namespace=client.namespace, data_converter=data_converter(store)
    )
    folder = tmp_path / f"seed-{seed}"
    verdict = await play(client, generate(seed), folder, TortureAPI, store=store)
    assert not verdict.violations, (
        f"{verdict.violations}\nreplay: {replay_command(tmp_path / f'seed-{seed}/scenario.json')}"
    )
