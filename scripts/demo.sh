#!/usr/bin/env bash
# Set up a virtualenv, then run the vendor-onboarding demo end to end (embedded server included).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/progress.sh
step "creating .venv";                 python3 -m venv .venv;                                      done_step
step "upgrading pip";                  .venv/bin/python -m pip install --quiet --upgrade pip;     done_step
# Exact versions and hashes from the lock (scripts/lock.sh writes it), then this package alone.
step "installing packages from requirements.lock (hash-checked; about a minute the first time)"
.venv/bin/python -m pip install --quiet --require-hashes -r requirements.lock
.venv/bin/python -m pip install --quiet --no-deps -e .
done_step
printf '==> setup took %ss; starting the demo\n' "$SECONDS" >&2
exec .venv/bin/waypoint demo "$@"
