# Sourced by demo.sh and test.sh: `step "what"` announces a part of the setup; `done_step`
# says how long it took. Output goes to stderr, so a pipe of the demo's output stays clean.
_step_started=0
step() {
    _step_started=$SECONDS
    printf '==> %s ...\n' "$1" >&2
}
done_step() {
    printf '    done in %ss\n' "$((SECONDS - _step_started))" >&2
}
