"""A real S3-compatible server for tests and the fleet drill: moto in server mode, on a free port.

    with S3Server(log) as s3:
        s3.create_bucket("waypoint")
        env = {**os.environ, **s3.env}   # AWS_ENDPOINT_URL, credentials, region

Started as a subprocess (`python -m moto.server`), ready once it answers ListBuckets; stopped
with SIGTERM (SIGKILL if it does not stop). Nothing is mocked in-process: workers, CLI and tests
reach it over HTTP as they would reach S3 or MinIO.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from temporalio.client import Client

from waypoint.stores.payloads import data_converter
from waypoint.stores.s3 import Bucket

REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class S3Server:
    """moto's S3 server in a subprocess; `env` holds the AWS settings that reach it."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.env = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "waypoint-test",
            "AWS_SECRET_ACCESS_KEY": "waypoint-test",
            "AWS_REGION": REGION,
        }
        self.process: subprocess.Popen[bytes] | None = None

    def client(self) -> Any:
        """A boto3 S3 client for this server."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
            region_name=REGION,
            config=Config(retries={"max_attempts": 1}, connect_timeout=1, read_timeout=5),
        )

    def start(self, timeout: float = 60.0) -> S3Server:
        """Start the server and wait until it answers."""
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        probe, deadline = self.client(), time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto server exited; see {self.log}")
            try:
                probe.list_buckets()
                return self
            except (BotoCoreError, ClientError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise TimeoutError(f"moto not up in {timeout:.0f}s: {self.log}") from None
                time.sleep(0.05)

    def create_bucket(self, name: str) -> None:
        """Create a bucket (the stores expect it to exist, as on S3)."""
        self.client().create_bucket(Bucket=name)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


BUCKET = "waypoint"
PREFIX = "fleet"
FLEET_THRESHOLD = 256
"""Fleet runs put every payload of at least this many bytes in the bucket: nearly all of them."""


@contextmanager
def fleet_store(work: Path) -> Iterator[tuple[S3Server, dict[str, str]]]:
    """A moto server with the bucket, and the worker settings that use it for both stores."""
    with S3Server(work / "moto.log") as server:
        server.create_bucket(BUCKET)
        yield (
            server,
            {
                **server.env,
                "WAYPOINT_STORE": f"s3://{BUCKET}/{PREFIX}",
                "WAYPOINT_PAYLOAD_THRESHOLD": str(FLEET_THRESHOLD),
            },
        )


async def fleet_client(server: S3Server, address: str, namespace: str = "default") -> Client:
    """A client whose payloads go to the fleet's bucket, as the workers' do."""
    store = Bucket(BUCKET, f"{PREFIX}/payloads", client=server.client())
    converter = data_converter(store, FLEET_THRESHOLD)
    return await Client.connect(address, namespace=namespace, data_converter=converter)
