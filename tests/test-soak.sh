#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The chaos soak (tests/soak) for make check: 64 clients for $ASYNCLLM_SOAK_SECONDS (default
# 120) against the daemon of this build under the slo policy (refusing what it cannot serve in
# time), sanitizers and all in a sanitizer build. Longer runs:
# tests/soak --help.
set -u
. "${ASYNCLLM_SRCDIR:?ASYNCLLM_SRCDIR must name the source tree}/tests/daemon-test-lib.sh"
command -v python3 >/dev/null || { echo "SKIP: no python3 (scripts/setup installs it)"; exit 77; }

if python3 "$ASYNCLLM_SRCDIR/tests/soak" --daemon "$daemon" --model "$model" --socket "$tmp/sock" --log "$tmp/log" \
    --clients 64 --duration "${ASYNCLLM_SOAK_SECONDS:-120}" --seed "${ASYNCLLM_SOAK_SEED:-1}" \
    --timeout "$(scaled 60)" -- --threads 2 --scheduling-policy slo --slo-admission reject; then
    pass "the soak: no violation"
else
    fail "the soak: violations (above); the daemon's log ends:"
    tail -n 30 "$tmp/log"
fi
echo "$passed passed, $failed failed"
((failed == 0))
