# SPDX-License-Identifier: MIT
# Shared by the shell tests (sourced): timeouts scaled for sanitizer and valgrind builds, a
# scratch folder ($tmp) and the processes to stop at exit ($pids), the pass/fail tally, and,
# where $ctl names asyncllmctl, waiting for a daemon and reading its counters.
slowdown=${ASYNCLLM_TEST_SLOWDOWN:-1}
scaled() { echo $(($1 * slowdown)); } # seconds

tmp=$(mktemp -d)
pids=() # stopped (TERM) and waited for at exit
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
passed=0 failed=0
pass() { passed=$((passed + 1)); echo "ok: $1"; }
fail() { failed=$((failed + 1)); echo "FAIL: $1"; }
expect() { # NAME COMMAND...: a shell condition
    local name=$1
    shift
    if "$@"; then pass "$name"; else fail "$name"; fi
}

wait_ready() { # until the daemon on socket $1 answers health
    local end=$((SECONDS + $(scaled 120)))
    while ((SECONDS < end)); do
        "$ctl" --socket "$1" health >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    return 1
}
daemon_stat() { # a counter of the stats of the daemon on socket $1
    "$ctl" --socket "$1" status --json | grep -oE "\"$2\":[0-9]+" | cut -d: -f2
}
