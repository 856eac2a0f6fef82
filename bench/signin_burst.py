"""Sign-in burst: how many of N concurrent password guesses the console checks.

    PYTHONPATH=$PWD .venv/bin/python -m bench.signin_burst [--guesses 100] [--right 50]

Serves a real console (uvicorn on 127.0.0.1, a free port) with one person in its users file,
loads the sign-in form once, then sends `--guesses` wrong passwords for that person at once
over real sockets, the right one at position `--right`. A guess is "checked" when its password
was hashed (the answer is a redirect: back to the form, or signed in), "throttled" when it got
429. The throttle allows 5 per name and address in 5 minutes, so at most 5 may be checked and
the right password, sent late, must not sign in. The attempts are counted in a sessions file,
as `waypoint console` keeps them. Sign-in never talks to Temporal, so the console gets no
client. Run it from an older checkout (PYTHONPATH) to measure that the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from waypoint._console.access import Console
from waypoint._console.people import hash_password, save_entry
from waypoint._console.serve import start_console
from waypoint._console.sessions import Sessions, Throttle

PASSWORD = "correct horse battery"


async def burst(guesses: int, right: int) -> dict[str, Any]:
    """Fire the burst; what came back and how long it took."""
    with tempfile.TemporaryDirectory() as tmp:
        users = Path(tmp) / "users.toml"
        save_entry(users, "users", "ann", hash_password(PASSWORD), {"*": "approver"})
        console = Console(client=None, people_file=users, sessions=Sessions("bench"))  # type: ignore[arg-type]
        with contextlib.suppress(ImportError):  # an older checkout has no audit log
            from waypoint._console.audit import Audit

            console.audit = Audit(path=Path(tmp) / "audit.jsonl")  # not over the figures
        with contextlib.suppress(TypeError):  # nor a throttle kept in the sessions file
            console.throttle = Throttle(store=Path(tmp) / "sessions.db")
        running = await start_console(console, port=0)
        try:
            limits = httpx.Limits(max_connections=guesses)
            async with httpx.AsyncClient(
                base_url=running.url(), limits=limits, timeout=120
            ) as http:
                page = await http.get("/signin")
                token = page.text.split('name="form_token" value="')[1].split('"')[0]

                async def guess(i: int) -> tuple[int, str, float]:
                    password = PASSWORD if i == right else f"wrong guess {i}"
                    form = {"user": "ann", "password": password, "form_token": token}
                    sent = time.monotonic()
                    answer = await http.post("/signin", data=form)
                    return answer.status_code, answer.headers.get("location", ""), sent

                started = time.monotonic()
                answers = await asyncio.gather(*(guess(i) for i in range(guesses)))
                took = time.monotonic() - started
        finally:
            await running.stop()
    return {
        "checked": sum(1 for status, _, _ in answers if status == 303),
        "throttled": sum(1 for status, _, _ in answers if status == 429),
        "signed_in": any(status == 303 and where == "/" for status, where, _ in answers),
        "other": sorted({status for status, _, _ in answers if status not in (303, 429)}),
        "seconds": took,
    }


def main() -> None:
    """Parse the options, run the burst, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--guesses", type=int, default=100)
    parser.add_argument("--right", type=int, default=50, help="which guess is the right one")
    args = parser.parse_args()
    seen = asyncio.run(burst(args.guesses, args.right))
    print(
        f"{args.guesses} concurrent guesses in {seen['seconds']:.2f} s: "
        f"{seen['checked']} checked, {seen['throttled']} throttled (429), "
        f"other statuses {seen['other']}; the right password (guess {args.right}) "
        f"{'SIGNED IN' if seen['signed_in'] else 'did not sign in'}"
    )


if __name__ == "__main__":
    main()
