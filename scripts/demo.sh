#!/usr/bin/env bash
# Set up a virtualenv, then run the vendor-onboarding demo end to end (embedded server included).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# Exact versions and hashes from the lock (scripts/lock.sh writes it), then this package alone.
.venv/bin/python -m pip install --quiet --require-hashes -r requirements.lock
.venv/bin/python -m pip install --quiet --no-deps -e .
exec .venv/bin/waypoint demo "$@"
