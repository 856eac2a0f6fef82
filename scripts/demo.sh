#!/usr/bin/env bash
# Set up a virtualenv, then run the vendor-onboarding demo end to end (embedded server included).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e .
exec .venv/bin/waypoint demo "$@"
