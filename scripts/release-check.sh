#!/usr/bin/env bash
# The path a user takes without a clone: build the sdist and wheel, check them with twine and
# scripts/dist_contents.py, install the wheel into a fresh virtualenv (pip resolves the declared
# ranges from its configured index, as a user's would, held to requirements.lock's versions so a
# failure here is ours, not a new release's), then run `waypoint demo --yes --stop-server` from an
# empty folder and check it stopped the dev server it started.
# Quiet on success (one line); on failure it says which step failed and prints that step's output.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
tmp="$(mktemp -d -t waypoint-release-XXXXXX)"
demo_pid=""
server_pid=""
cleanup() {
    # The demo's --stop-server stops its server; what is still alive here (the check failed or
    # was interrupted) is stopped by its own pid: TERM, then KILL after a grace of 5 s.
    local pid_file="$tmp/empty/.waypoint/server.pid" alive=() pid
    [[ -z "$server_pid" && -s "$pid_file" ]] && server_pid="$(tr -d '[:space:]' <"$pid_file")"
    for pid in "$demo_pid" "$server_pid"; do
        [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && alive+=("$pid")
    done
    if ((${#alive[@]})); then
        kill "${alive[@]}" 2>/dev/null || true
        for _ in $(seq 50); do
            kill -0 "${alive[@]}" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "${alive[@]}" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
    printf 'release check failed: %s\n' "$1" >&2
    [[ -s "$tmp/step.log" ]] && tail -n 60 "$tmp/step.log" >&2
    exit 1
}

run() {  # run WHAT CMD...: the command's output goes to step.log, shown only if it fails
    local what="$1"
    shift
    "$@" >"$tmp/step.log" 2>&1 || fail "$what"
}

# An isolated build, as a packager's: pip fetches setuptools into the build's own environment.
run "python -m build" .venv/bin/python -m build --outdir "$tmp/dist" .
run "twine check --strict" .venv/bin/twine check --strict "$tmp"/dist/*
run "what the sdist and wheel hold" .venv/bin/python scripts/dist_contents.py "$tmp/dist"
wheel="$(ls "$tmp"/dist/*.whl)"

# A fresh venv from the interpreter under .venv, not a copy of .venv: nothing of the checkout.
base_python="$(.venv/bin/python -c 'import sys; print(sys._base_executable)')"
run "creating a fresh venv" "$base_python" -m venv "$tmp/venv"
# Constraints, not requirements: the lock's versions without its hashes (a wheel's own hash is
# not in the lock), so pip still resolves from the wheel's declared dependencies.
sed -n 's/^\([A-Za-z0-9][A-Za-z0-9_.-]*==[^ ;\\]*\).*/\1/p' requirements.lock >"$tmp/constraints.txt"
run "pip install of the wheel" \
    "$tmp/venv/bin/python" -m pip install --quiet -c "$tmp/constraints.txt" "$wheel"
mkdir -p "$tmp/empty" "$tmp/home"
here="$PWD"
run "every module of the installed wheel imports" \
    bash -c 'cd "$1" && exec "$2" "$3"' _ "$tmp/empty" "$tmp/venv/bin/python" "$here/scripts/import_all.py"
: >"$tmp/step.log"

# The demo starts its embedded server on the loopback address it is given when none answers
# there: a free port (and its Web UI port, +1000), so a server of the caller's is never touched.
port="$(.venv/bin/python - <<'PY'
import random, socket

def free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True

print(next((p for p in random.sample(range(10000, 30000), 400) if free(p) and free(p + 1000)), ""))
PY
)"
[[ -n "$port" ]] || fail "no free port pair for the demo's dev server"
(
    cd "$tmp/empty"
    exec env -i HOME="$tmp/home" PATH="$tmp/venv/bin:/usr/bin:/bin" LANG=C.UTF-8 COLUMNS=100 \
        TEMPORAL_ADDRESS="127.0.0.1:$port" \
        timeout 600 "$tmp/venv/bin/waypoint" demo --yes --stop-server
) >"$tmp/step.log" 2>&1 &
demo_pid=$!
# The server's pid file goes when the server stops, so it is read while the demo runs.
pid_file="$tmp/empty/.waypoint/server.pid"
while kill -0 "$demo_pid" 2>/dev/null && [[ -z "$server_pid" ]]; do
    [[ -s "$pid_file" ]] && server_pid="$(tr -d '[:space:]' <"$pid_file")"
    sleep 0.2
done
demo_rc=0
wait "$demo_pid" || demo_rc=$?
((demo_rc != 124)) || fail "waypoint demo --yes --stop-server did not finish in 600 s"
((demo_rc == 0)) || fail "waypoint demo --yes --stop-server exited $demo_rc"
[[ -n "$server_pid" ]] || fail "the demo started no embedded server (no $pid_file appeared)"
grep -q "^console   http" "$tmp/step.log" || fail "the demo ran without its console"
grep -q "create_vendor: 1 row(s)" "$tmp/step.log" || fail "the demo created no vendor record"
for _ in $(seq 50); do
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
done
kill -0 "$server_pid" 2>/dev/null && fail "the dev server (pid $server_pid) outlived --stop-server"

printf 'release check: %s built, twine-checked, installed in a fresh venv; %s (%ss)\n' \
    "$(basename "$wheel")" "the demo ran from an empty folder" "$((SECONDS - started))"
