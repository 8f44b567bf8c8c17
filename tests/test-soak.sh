#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The chaos soak (tests/soak) for make check: 64 clients for $ASYNCLLM_SOAK_SECONDS (default
# 120, 60 under AddressSanitizer) against the daemon of this build under the slo policy
# (refusing what it cannot serve in time), with a KV cache of 12 MiB (some 530 tokens of
# SmolLM2, a few sequences: preemption all along), sanitizers and all in a sanitizer build.
# Longer runs: tests/soak --help.
set -u
. "${ASYNCLLM_SRCDIR:?ASYNCLLM_SRCDIR must name the source tree}/tests/daemon-test-lib.sh"
command -v python3 >/dev/null || { echo "SKIP: no python3 (scripts/setup installs it)"; exit 77; }

# AddressSanitizer's quarantine holds freed memory back (up to 256 MiB) and grows the RSS as
# it fills: there the RSS may grow more, and LeakSanitizer checks for leaks at the exit.
# A minute is enough there to reach every kind of request and control several times.
margin=0.05 seconds=120
ldd "$daemon" 2>/dev/null | grep -q libasan && margin=0.5 seconds=60
if python3 "$ASYNCLLM_SRCDIR/tests/soak" --daemon "$daemon" --model "$model" --socket "$tmp/sock" --log "$tmp/log" \
    --clients 64 --duration "${ASYNCLLM_SOAK_SECONDS:-$seconds}" --seed "${ASYNCLLM_SOAK_SEED:-1}" \
    --timeout "$(scaled 60)" --rss-margin "$margin" -- --threads 2 --scheduling-policy slo --slo-admission reject \
    --kv-cache-space 12MiB; then
    pass "the soak: no violation"
else
    fail "the soak: violations (above); the daemon's log ends:"
    tail -n 30 "$tmp/log"
fi
echo "$passed passed, $failed failed"
((failed == 0))
