"""Any worker built on an encrypting client keeps what runs hold out of its logs (issue 34.6).

Only `waypoint worker` (keys in its settings) installed the log redaction: a worker a user
builds with `build_worker` on a client whose converter encrypts logged every failed activity's
traceback, and `warnings` went straight to stderr with their text. Played in a process of its
own, as the redaction is process-wide.
"""

from __future__ import annotations

import base64
import subprocess
import sys

from temporalio.client import Client

from tests.cli import ROOT

SECRET = "DE89370400440532013000"
SCRIPT = """
import asyncio, logging, sys, warnings
from temporalio.client import Client
from waypoint._agent import Agent
from waypoint.stores.payloads import data_converter
from waypoint._worker import build_worker

async def main(address, keys, secret):
    converter = data_converter(None, encryption_keys=keys) if keys else data_converter(None)
    client = await Client.connect(address, data_converter=converter)
    agent = Agent(name="quiet", model="claude-sonnet-4-6", system="Be quiet.", script=[])
    build_worker(client, [agent], task_queue="redaction-test")
    try:
        raise ValueError(f"the bank refused {secret}")
    except ValueError:
        logging.getLogger("temporalio.activity").exception("Completing activity as failed")
    warnings.warn(f"payee {secret} looks odd", UserWarning, stacklevel=1)

logging.basicConfig(level=logging.INFO)
asyncio.run(main(*sys.argv[1:]))
"""


def played(client: Client, keys: str) -> str:
    address = client.service_client.config.target_host
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, address, keys, SECRET],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_a_worker_on_an_encrypting_client_redacts_its_log_and_warnings(client: Client) -> None:
    keys = "k1:" + base64.b64encode(b"k" * 32).decode()
    said = played(client, keys)
    assert "Completing activity as failed [ValueError; details withheld" in said
    assert "UserWarning at " in said and "details withheld" in said
    assert SECRET not in said


def test_a_worker_without_encryption_keeps_its_log_whole(client: Client) -> None:
    said = played(client, "")
    assert f"the bank refused {SECRET}" in said  # the traceback, as Temporal logs it
