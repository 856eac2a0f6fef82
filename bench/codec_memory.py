"""Codec server memory under floods: N clients each POST a big body at once.

The server runs in its own process, importing `waypoint` from the current directory first (run
from an older checkout to measure it the same way); the figures are its RSS before, its peak
(VmHWM) and its RSS after. Measured: before the token was checked first, 56 MiB, peak 449 MiB.
With `--token` each body is a real encrypted payload the server decrypts (the UI's `/decode`),
MiB a body; `--console` serves the codec under the console's `/codec`, as `waypoint console
--codec` does (its sign-in and API talk to no Temporal here).

    PYTHONPATH=$PWD .venv/bin/python -m bench.codec_memory [--clients 8] [--mib 60]
    PYTHONPATH=$PWD .venv/bin/python -m bench.codec_memory --console --token --clients 4 --mib 3.9
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
from waypoint._security.codec import EncryptionCodec
from waypoint._operations.codec_server import serve_codec
server = serve_codec(EncryptionCodec({"a": bytes(32)}, "a"), "bench-token", "127.0.0.1", 0)
server.start()
print(server.port, flush=True)
threading.Event().wait()
"""
CONSOLE = """
import asyncio, tempfile
from pathlib import Path
from waypoint._console.access import Console
from waypoint._console.serve import start_console
from waypoint._console.sessions import Sessions
from waypoint._operations.codec_server import codec_asgi_app
from waypoint._security.codec import EncryptionCodec

async def main():
    users = Path(tempfile.mkdtemp()) / "users.toml"
    console = Console(client=None, people_file=users, sessions=Sessions("bench"))
    codec = codec_asgi_app(EncryptionCodec({"a": bytes(32)}, "a"), "bench-token")
    running = await start_console(console, port=0, codec=codec)
    print(running.port, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""
TOKEN = "bench-token"


def peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise ValueError(f"no VmHWM for process {pid}")


def flood(port: int, size: int, body: bytes | None, path: str) -> str:
    """POST `body` (with the token), or `size` bytes of junk without; how the server answered."""
    chunk = b"x" * (1024 * 1024)
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        auth = f"Authorization: Bearer {TOKEN}\r\n" if body is not None else ""
        length = len(body) if body is not None else size
        head = f"POST {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {length}\r\n\r\n"
        try:
            sock.sendall(head.encode())
            if body is not None:
                sock.sendall(body)
            else:
                for _ in range(size // len(chunk)):
                    sock.sendall(chunk)
            return sock.recv(64).split(b"\r\n", 1)[0].decode()
        except OSError as err:
            return type(err).__name__


def encrypted_body(size: int) -> bytes:
    """A `/decode` request of about `size` bytes: one payload, encrypted with the server's key."""
    from google.protobuf import json_format
    from temporalio.api.common.v1 import Payload, Payloads

    from waypoint._security.codec import EncryptionCodec

    codec = EncryptionCodec({"a": bytes(32)}, "a")
    plain = Payload(metadata={"encoding": b"binary/plain"}, data=os.urandom(size * 3 // 4 - 512))
    sealed = codec.encrypt(plain)
    return json_format.MessageToJson(Payloads(payloads=[sealed]), indent=None).encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--mib", type=float, default=60)
    parser.add_argument("--token", action="store_true", help="real encrypted bodies, with it")
    parser.add_argument("--console", action="store_true", help="under the console's /codec")
    args = parser.parse_args()
    size = int(args.mib * (1 << 20))
    body = encrypted_body(size) if args.token else None
    path = "/codec/decode" if args.console else "/decode"
    server = CONSOLE if args.console else SERVER
    proc = subprocess.Popen(
        [sys.executable, "-c", server], stdout=subprocess.PIPE, text=True, env=os.environ
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        before = rss_bytes(proc.pid)
        outcomes: list[str] = []
        started = time.monotonic()
        threads = [
            threading.Thread(target=lambda: outcomes.append(flood(port, size, body, path)))
            for _ in range(args.clients)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        time.sleep(0.5)
        mib = 1024 * 1024
        kind = f"encrypted {len(body) / mib:.2f} MiB" if body else f"unauthenticated {args.mib} MiB"
        where = "the console's /codec" if args.console else "the codec server"
        print(f"{args.clients} concurrent {kind} POSTs to {where} in {elapsed:.1f} s")
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
