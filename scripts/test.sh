#!/usr/bin/env bash
# Set up a virtualenv with the dev extras, then lint, type-check and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# Exact versions and hashes from the lock (scripts/lock.sh writes it), then this package alone.
.venv/bin/python -m pip install --quiet --require-hashes -r requirements-dev.lock
.venv/bin/python -m pip install --quiet --no-deps -e .
bash scripts/install-browser.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/pyright
.venv/bin/python -m pytest "$@"
