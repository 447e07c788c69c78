#!/usr/bin/env bash
# Tests {{name}}.wasm as sluice runs it: builds it with ./build.sh (which
# needs what it lists, ADAPTER among them), then calls it with
# `sluice --json invoke` and checks the exit status and the one-line JSON
# report: the outcomes, the handler's log line, the publishes.
# Needs the sluice binary: the path in SLUICE, or else `sluice` on PATH.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

world="{{world}}"
if [[ -n "${SLUICE:-}" ]]; then
    sluice="$SLUICE" from="the environment variable SLUICE"
else
    sluice=sluice from="PATH"
fi
if ! "$sluice" --version >/dev/null 2>&1; then
    echo "test.sh: cannot run $sluice (from $from). This test calls the sluice binary:" \
        "install it (\`cargo install --locked --path .\` in the sluice repository) and put" \
        "it on PATH, or set SLUICE to its path" >&2
    exit 1
fi

./build.sh

stderr="$(mktemp)"
trap 'rm -f "$stderr"' EXIT
report="" status=0 checks=0 failed=0

# invoke ARGS...: calls the component once; sets $report and $status.
invoke() {
    status=0
    report="$("$sluice" --json invoke {{name}}.wasm --sidecar {{name}}.toml "$@" 2>"$stderr")" ||
        status=$?
}

# expect_status WANT: the last invoke exited with WANT.
expect_status() {
    checks=$((checks + 1))
    if [[ "$status" != "$1" ]]; then
        failed=$((failed + 1))
        echo "FAIL: exit status $status, want $1" >&2
        echo "  report: $report" >&2
        sed 's/^/  stderr: /' "$stderr" >&2
    fi
}

# expect TEXT: the last invoke's report contains TEXT (compact JSON).
expect() {
    checks=$((checks + 1))
    if ! grep -qF -- "$1" <<<"$report"; then
        failed=$((failed + 1))
        echo "FAIL: the report lacks $1" >&2
        echo "  report: $report" >&2
    fi
}

# A message is done, and the handler logs its line. forward_to is not set
# in {{name}}.toml: nothing is published.
invoke --payload hello --id m-1
expect_status 0
expect "\"world\":\"sluice:handler/$world@0.2.0\""
expect '"outcomes":[{"outcome":"done"}]'
expect '"message":"{{name}}: message m-1 attempt 1"'
expect '"publishes":[]'

# With forward_to set, the payload is forwarded there.
invoke --payload hello --set forward_to=greetings
expect_status 0
expect '"payload":"hello","queue":"greetings"'
expect '"publishes_committed":true'

# An empty payload is rejected: dead-lettered at once.
invoke --payload ''
expect_status 11
expect '"outcomes":[{"outcome":"reject","reason":"empty payload"}]'

# Two messages: a batch handler answers each, in order; a handler of the
# world `handler` takes one message a call, so nothing is called.
invoke --payload one --payload two
if [[ "$world" == batch-handler ]]; then
    expect_status 0
    expect '"outcomes":[{"outcome":"done"},{"outcome":"done"}]'
    expect '"message":"{{name}}: 2 messages"'
else
    expect_status 2
    report="$(cat "$stderr")"
    expect "one --payload"
fi

if ((failed > 0)); then
    echo "test.sh: $failed of $checks checks failed" >&2
    exit 1
fi
echo "test.sh: all $checks checks passed"
