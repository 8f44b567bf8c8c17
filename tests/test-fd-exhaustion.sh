#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# asyncllmd out of file descriptors (RLIMIT_NOFILE 64, clients holding them all): a new client
# is refused at once with too_many_requests naming the shortage, not left waiting; a client
# connected before is served on; the daemon says so once and does not spin on the listening
# socket; once clients let go, new ones are served again.
set -u
. "${ASYNCLLM_SRCDIR:?ASYNCLLM_SRCDIR must name the source tree}/tests/daemon-test-lib.sh"

sock=$tmp/sock
(ulimit -n 64 && exec "$daemon" --model "$model" --socket "$sock" --max-model-len 512 --threads 2) >"$tmp/log" 2>&1 &
pid=$!
pids+=("$pid")
if ! wait_ready "$sock"; then
    fail "asyncllmd did not start: $(tail -n 5 "$tmp/log")"
    exit 1
fi

# The clients, in one process: one connects first; the rest take every descriptor the daemon
# has left, until it refuses one; then the first one generates, the daemon's CPU time is read
# over 2 s of the shortage, one more client is refused, and all but the first let go.
python3 - "$sock" "$pid" "$(scaled 30)" >"$tmp/clients" 2>&1 <<'PY' &
import json, os, socket, sys, time
path, pid, limit = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])

def connect():
    c = socket.socket(socket.AF_UNIX)
    c.settimeout(limit)
    c.connect(path)
    return c

def greeting(c, wait):
    """The daemon's first line to c: its hello, or the error it refused c with; None when
    nothing came within wait seconds."""
    c.settimeout(wait)
    data = b""
    try:
        while not data.endswith(b"\n"):
            chunk = c.recv(4096)
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        return None
    finally:
        c.settimeout(limit)
    return data.decode() if data else "closed without a line"

def cpu_seconds():
    fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

first = connect()
lines = first.makefile("r")
lines.readline()  # hello
held, refused = [], None
for _ in range(200):
    c = connect()
    line = greeting(c, limit)
    if not line or '"hello"' not in line:
        refused = line
        c.close()
        break
    held.append(c)
print("held %d connections" % len(held))
print("refused: " + (refused or "never").strip())

first.sendall(b'{"op":"generate","id":"g","prompt":"The capital of France is","params":{"max_tokens":8,"temperature":0,"output_kind":"final"}}\n')
while True:
    line = lines.readline()
    if not line:
        print("first: closed")
        break
    out = json.loads(line)
    if out.get("finished") or "error" in out:
        print("first: %d tokens, %s" % (len(out["outputs"][0]["token_ids"]) if "outputs" in out else -1,
                                        out.get("error", {}).get("code", "finished")))
        break

before = cpu_seconds()
time.sleep(2)
print("cpu over 2 s of the shortage: %.2f s" % (cpu_seconds() - before))
again = greeting(connect(), limit)
print("refused again: " + (again or "never").strip())
for c in held:
    c.close()
time.sleep(0.5)
print("done")
PY
clients=$!
if ! timeout "$(scaled 120)" tail --pid="$clients" -f /dev/null; then
    kill "$clients" 2>/dev/null
    fail "the clients did not finish: $(cat "$tmp/clients")"
    exit 1
fi
cat "$tmp/clients"

expect "some clients were held before the daemon ran out" grep -qE '^held [1-9][0-9]* connections' "$tmp/clients"
expect "a new client is refused with too_many_requests, naming the shortage" \
    grep -qE '^refused: .*"too_many_requests".*out of file descriptors' "$tmp/clients"
expect "the client connected before is served: 8 tokens" grep -qxF 'first: 8 tokens, finished' "$tmp/clients"
cpu=$(sed -nE 's/^cpu over 2 s of the shortage: ([0-9.]+) s$/\1/p' "$tmp/clients")
expect "the daemon does not spin while out of descriptors (${cpu:-?} s of CPU in 2 s)" \
    awk -v c="${cpu:-9}" 'BEGIN { exit !(c < 0.5) }'
expect "another client is refused too" grep -qE '^refused again: .*too_many_requests' "$tmp/clients"
expect "the shortage is logged once" test "$(grep -c 'cannot accept connections' "$tmp/log")" -eq 1
if "$ctl" --socket "$sock" generate --max-tokens 4 --temperature 0 "Hello" >"$tmp/after" 2>&1; then
    pass "once clients let go, a new one is served"
else
    fail "once clients let go, a new one is served: $(cat "$tmp/after")"
fi
expect "the daemon says it accepts again" grep -q 'accepting connections again' "$tmp/log"
expect "the daemon is still running" kill -0 "$pid"

echo "$passed passed, $failed failed"
((failed == 0))
