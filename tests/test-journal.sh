#!/usr/bin/env bash
# asyncllmd under systemd logs to the journal with native fields: MESSAGE, PRIORITY,
# CODE_FILE/LINE/FUNC and REQUEST_ID, and never the prompt. The journal's socket is stood in
# for by a listener in a private mount namespace, so this needs root and unshare(1); the
# daemon sees a JOURNAL_STREAM that matches its stderr, as systemd sets it.
set -euo pipefail

: "${ASYNCLLMD:?set ASYNCLLMD to the built daemon}" "${ASYNCLLM_MODEL:?set ASYNCLLM_MODEL to the model file}"
if [[ ! -f $ASYNCLLM_MODEL ]]; then
    echo "SKIP: no model at $ASYNCLLM_MODEL (run scripts/fetch-model)"
    exit 77
fi
if [[ $(id -u) -ne 0 ]] || ! unshare -m true 2>/dev/null; then
    echo "SKIP: a private /run/systemd/journal needs root and unshare(1)"
    exit 77
fi

# wall-clock margins stretch by ASYNCLLM_TEST_SLOWDOWN (sanitizer and valgrind runs)
export slowdown=${ASYNCLLM_TEST_SLOWDOWN:-1}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

unshare -m --propagation private bash -euo pipefail -s "$tmp" <<'INNER'
tmp=$1
mkdir -p /run/systemd/journal
mount -t tmpfs tmpfs /run/systemd/journal
python3 - "$tmp/journal.txt" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("/run/systemd/journal/socket")
with open(sys.argv[1], "ab", buffering=0) as out:
    while True:
        out.write(s.recv(1 << 20) + b"\n--\n")
PY
listener=$!
trap 'kill $listener 2>/dev/null || true' EXIT
for _ in $(seq 100); do [[ -S /run/systemd/journal/socket ]] && break; sleep 0.05; done

: >"$tmp/stderr"
JOURNAL_STREAM=$(stat -c '%d:%i' "$tmp/stderr") "$ASYNCLLMD" --socket "$tmp/sock" --log-level debug \
    --model "$ASYNCLLM_MODEL" 2>>"$tmp/stderr" &
daemon=$!
for _ in $(seq $((600 * slowdown))); do [[ -S $tmp/sock ]] && break; sleep 0.1; done
printf '%s\n' '{"op":"generate","id":"j1","prompt":"zebra-marker-7 says","params":{"max_tokens":4}}' |
    timeout $((60 * slowdown)) socat -t $((30 * slowdown)) - "UNIX-CONNECT:$tmp/sock" >"$tmp/out"
grep -q '"finished":true' "$tmp/out" || { echo "FAIL: the request did not finish"; cat "$tmp/out"; exit 1; }
kill -TERM $daemon
wait $daemon || { echo "FAIL: asyncllmd exited $?"; exit 1; }
# The socket hands datagrams over in order: once a marker sent now is written, so is every
# line the daemon logged.
python3 -c 'import socket; socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"MESSAGE=end-of-test", "/run/systemd/journal/socket")'
for _ in $(seq $((100 * slowdown))); do grep -q 'MESSAGE=end-of-test' "$tmp/journal.txt" && break; sleep 0.05; done

fail=0
expect() {
    if grep -q -- "$1" "$tmp/journal.txt"; then echo "ok: journal has $1"; else echo "FAIL: journal lacks $1"; fail=1; fi
}
expect 'MESSAGE=serving SmolLM2'
expect 'PRIORITY=6'
expect 'PRIORITY=7'
expect 'CODE_FILE=.*server.c'
expect 'CODE_FUNC='
expect 'REQUEST_ID=1/j1'
if grep -q 'zebra-marker-7' "$tmp/journal.txt" "$tmp/stderr"; then
    echo "FAIL: the prompt was logged"; fail=1
else
    echo "ok: the prompt is not in the log, even at debug"
fi
if [[ -s $tmp/stderr ]]; then
    echo "FAIL: log lines went to stderr too:"; cat "$tmp/stderr"; fail=1
else
    echo "ok: nothing on stderr"
fi
exit $fail
INNER
