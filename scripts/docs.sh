#!/usr/bin/env bash
# Build the docs site with --strict into a scratch folder: a broken link, anchor or API reference
# fails it. Silent on success; on failure it prints mkdocs' whole output.
set -euo pipefail
cd "$(dirname "$0")/.."
site="$(mktemp -d)"
out="$(mktemp)"
trap 'rm -rf "$site" "$out"' EXIT
if ! NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir "$site" >"$out" 2>&1; then
  cat "$out" >&2
  exit 1
fi
