"""Codec server memory under unauthenticated floods: N clients each POST a big body, no token.

The server runs in its own process, importing `waypoint` from the current directory first (run
from an older checkout to measure it the same way); the figures are its RSS before, its peak
(VmHWM) and its RSS after. Measured: before the token was checked first, 56 MiB, peak 449 MiB.

    PYTHONPATH=$PWD .venv/bin/python -m bench.codec_memory [--clients 8] [--mib 60]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.procs import rss_bytes

SERVER = """
import threading
from waypoint.security.codec import EncryptionCodec
from waypoint.operations.codec_server import serve_codec
server = serve_codec(EncryptionCodec({"a": bytes(32)}, "a"), "bench-token", "127.0.0.1", 0)
server.start()
print(server.port, flush=True)
threading.Event().wait()
"""


def peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise ValueError(f"no VmHWM for process {pid}")


def flood(port: int, size: int) -> str:
    """POST `size` bytes without a token; how the server answered, or how the send ended."""
    chunk = b"x" * (1024 * 1024)
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        head = f"POST /decode HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n"
        try:
            sock.sendall(head.encode())
            for _ in range(size // len(chunk)):
                sock.sendall(chunk)
            return sock.recv(64).split(b"\r\n", 1)[0].decode()
        except OSError as err:
            return type(err).__name__


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--mib", type=int, default=60)
    args = parser.parse_args()
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True, env=os.environ
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        before = rss_bytes(proc.pid)
        outcomes: list[str] = []
        started = time.monotonic()
        threads = [
            threading.Thread(target=lambda: outcomes.append(flood(port, args.mib << 20)))
            for _ in range(args.clients)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        time.sleep(0.5)
        mib = 1024 * 1024
        print(f"{args.clients} unauthenticated POSTs of {args.mib} MiB in {elapsed:.1f} s")
        print(f"answers: {sorted(outcomes)}")
        print(
            f"server RSS before {before / mib:.0f} MiB, peak {peak_rss_bytes(proc.pid) / mib:.0f}"
            f" MiB, after {rss_bytes(proc.pid) / mib:.0f} MiB"
        )
    finally:
        proc.terminate()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


if __name__ == "__main__":
    main()
