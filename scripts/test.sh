#!/usr/bin/env bash
# Set up a virtualenv with the dev extras, then lint, type-check and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/progress.sh
step "creating .venv";                 python3 -m venv .venv;                                      done_step
step "upgrading pip";                  .venv/bin/python -m pip install --quiet --upgrade pip;     done_step
# Exact versions and hashes from the lock (scripts/lock.sh writes it), then this package alone.
step "installing packages from requirements-dev.lock (hash-checked; a few minutes the first time)"
.venv/bin/python -m pip install --quiet --require-hashes -r requirements-dev.lock
.venv/bin/python -m pip install --quiet --no-deps -e .
done_step
# Python reads bytecode even where PYTHONDONTWRITEBYTECODE forbids writing it (images set it):
# without it every process the suite starts compiles Waypoint's and the tests' sources again.
step "compiling bytecode";             .venv/bin/python -m compileall -q waypoint tests examples bench >/dev/null; done_step
step "installing Chromium for the Web UI test (skipped where it cannot)"; bash scripts/install-browser.sh; done_step
step "ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
done_step
step "pyright";                        .venv/bin/pyright;                                          done_step
step "docs site (mkdocs --strict)";    bash scripts/docs.sh;                                       done_step
# The path a user takes without a clone: build, twine check, a fresh venv, the demo from there.
step "release check (wheel in a fresh venv runs the demo)"; bash scripts/release-check.sh;        done_step
printf '==> setup and checks took %ss; running pytest on 4 processes\n' "$SECONDS" >&2
# The tests mostly wait on processes (dev servers, workers, CLI subprocesses), so 4 pytest-xdist
# workers share the 2 cores; each has its own session dev server. `--dist loadgroup` keeps a
# module marked `xdist_group` (one that shares a module fixture) on one worker. Arguments pass
# through, and a later `-n` wins: `bash scripts/test.sh -n 0 tests/test_cli.py` runs serially.
.venv/bin/python -m pytest -n 4 --dist loadgroup "$@"
