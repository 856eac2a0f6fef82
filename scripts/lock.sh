#!/usr/bin/env bash
# Regenerate the hashed lock files from pyproject.toml, for Python 3.11 on Linux:
# requirements.lock (runtime with the S3 store, used by the Dockerfile and scripts/demo.sh) and
# requirements-dev.lock (runtime + dev extras, used by scripts/test.sh). Re-run after any
# dependency change in pyproject.toml and commit the result.
set -euo pipefail
cd "$(dirname "$0")/.."
uv=${UV:-.venv/bin/uv}
compile() {
    "$uv" pip compile pyproject.toml "$@" --quiet --generate-hashes \
        --python-version 3.11 --python-platform linux \
        --no-emit-index-url --no-emit-find-links --custom-compile-command "bash scripts/lock.sh"
}
compile --extra s3 --output-file requirements.lock
compile --extra dev --output-file requirements-dev.lock
# The lock files name no registry host: installs use whatever index pip is configured with.
if grep -nE '^-|://' requirements.lock requirements-dev.lock; then
    echo "lock files must not name an index or a host" >&2
    exit 1
fi
