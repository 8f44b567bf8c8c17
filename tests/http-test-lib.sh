# SPDX-License-Identifier: MIT
# Shared by the daemon's shell tests (sourced): the daemon and model they run (a skip
# when the model or curl is missing), a scratch folder and the processes to stop at exit,
# the pass/fail tally, scaled timeouts and free loopback ports.
daemon=${ASYNCLLMD:?ASYNCLLMD must name the asyncllmd binary}
model=${ASYNCLLM_MODEL:?ASYNCLLM_MODEL must name the model}
[[ -f $model ]] || { echo "SKIP: $model is missing; run scripts/fetch-model"; exit 77; }
command -v curl >/dev/null || { echo "SKIP: no curl (scripts/setup installs it)"; exit 77; }
slowdown=${ASYNCLLM_TEST_SLOWDOWN:-1}
scaled() { echo $(($1 * slowdown)); } # seconds, longer in sanitizer builds

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
expect() { local name=$1; shift; if "$@"; then pass "$name"; else fail "$name"; fi; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
