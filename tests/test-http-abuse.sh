#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The HTTP front under what careless and hostile clients do, against the real daemon and model:
# /metrics as Prometheus's own linter reads it and counting exactly what was sent, chunked
# bodies (whole, over the limit, malformed), 500 connections at once, clients beyond
# max-connections, and afterwards no file descriptor left behind and the daemon still serving.
set -u
ctl=${ASYNCLLMCTL:?ASYNCLLMCTL must name the asyncllmctl binary}
. "$(dirname "$0")/http-test-lib.sh"

# 500 clients and the daemon's 500 sockets for them
(($(ulimit -n) >= 2048)) || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# start_daemon PORT LOG ARGS...: started and answering /health, its pid in $daemon_pid
start_daemon() {
    local port=$1 log=$2
    shift 2
    "$daemon" --model "$model" --max-model-len 1024 --bus none --port "$port" "$@" >"$log" 2>&1 &
    daemon_pid=$!
    pids+=("$daemon_pid")
    local end=$((SECONDS + $(scaled 60)))
    until curl -s -o /dev/null "http://127.0.0.1:$port/health"; do
        ((SECONDS < end)) || { echo "FAIL: the daemon never answered on port $port"; cat "$log"; exit 1; }
        sleep 0.2
    done
}
open_fds() { ls "/proc/$1/fd" | wc -l; }
# fds_settle PID WANT: waits (a few seconds) for PID's open fds to come back within 3 of WANT
fds_settle() {
    local end=$((SECONDS + $(scaled 10)))
    while (($(open_fds "$1") > $2 + 3)) && ((SECONDS < end)); do sleep 0.2; done
    fds_now=$(open_fds "$1")
    ((fds_now <= $2 + 3 && fds_now >= $2 - 3))
}

port=$(free_port)
sock=$tmp/d.sock
base=http://127.0.0.1:$port
start_daemon "$port" "$tmp/daemon.log" --socket "$sock" --max-connections 600 --max-line-bytes 65536 --client-timeout 5
pid=$daemon_pid
fds_at_start=$(open_fds "$pid")

# --- /metrics: Prometheus's linter, vLLM's names and types, and exact counts ---------------
curl -s "$base/metrics" >"$tmp/metrics.0"
"$ctl" --socket "$sock" metrics >"$tmp/metrics.socket" 2>&1
expect "the socket's metrics op gives /metrics' text" cmp -s "$tmp/metrics.0" "$tmp/metrics.socket"

started=$EPOCHREALTIME
for i in 1 2 3; do
    curl -s -o "$tmp/out.$i" -w '%{http_code}\n' --max-time "$(scaled 60)" "$base/v1/completions" \
        -d '{"prompt": "Hi", "max_tokens": 4, "ignore_eos": true}'
done >"$tmp/codes"
took=$(python3 -c 'import sys; print(float(sys.argv[2]) - float(sys.argv[1]))' "$started" "$EPOCHREALTIME")
curl -s "$base/metrics" >"$tmp/metrics.1"
if command -v promtool >/dev/null; then
    promtool check metrics <"$tmp/metrics.1" >"$tmp/lint" 2>&1
    rc=$?
    # What vLLM's names force and nothing else: the colon in every vllm: name (vLLM's
    # prometheus_client exposes them so), and the _total of the iteration_tokens_total histogram.
    grep -vxE "vllm:[a-z0-9_]+ metric names should not contain ':'" "$tmp/lint" |
        grep -vxF 'vllm:iteration_tokens_total non-counter metrics should not have "_total" suffix' >"$tmp/lint.rest"
    rest=$(head -c 300 "$tmp/lint.rest")
    expect "promtool check metrics: no error, no lint beyond vLLM's names (rc $rc)${rest:+: $rest}" \
        bash -c "[[ $rc == 0 || $rc == 3 ]] && [[ ! -s '$tmp/lint.rest' ]]"
else
    echo "SKIP (not counted): no promtool (scripts/setup installs the prometheus package): /metrics not linted"
fi
expect "3 completions of 4 tokens: 200 each" test "$(grep -c '^200$' "$tmp/codes")" = 3
python3 - "$tmp/metrics.0" "$tmp/metrics.1" "$took" <<'EOF' >"$tmp/verdict" 2>&1 && pass "/metrics: vLLM's names and types, buckets as vLLM writes them, and the histograms moved by exactly 3 requests, 9 gaps, 12 steps" || fail "/metrics after 3 requests: $(tail -n 3 "$tmp/verdict")"
import re, sys
def parse(path):
    types, values = {}, {}
    for line in open(path):
        line = line.rstrip("\n")
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
        elif line and not line.startswith("#"):
            key, _, v = line.rpartition(" ")
            values[key] = float(v)
    return types, values
types, before = parse(sys.argv[1])
types_after, after = parse(sys.argv[2])
wall = float(sys.argv[3])
assert types == types_after
want = {"histogram": ["vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                      "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
                      "vllm:iteration_tokens_total", "vllm:request_prompt_tokens", "vllm:request_generation_tokens"],
        "gauge": ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"],
        "counter": ["vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:request_success_total",
                    "vllm:prompt_tokens_total", "vllm:generation_tokens_total"]}
for kind, names in want.items():
    for n in names:
        assert types.get(n) == kind, (n, types.get(n), kind)
model = re.search(r'model_name="([^"]*)"', open(sys.argv[1]).read()).group(1)
labels = '{model_name="%s"}' % model
def delta(name):
    return after[name + labels] - before[name + labels]
# every histogram: cumulative buckets, +Inf equal to the count; bounds written as vLLM's are
for name, kind in types.items():
    if kind != "histogram":
        continue
    buckets = [(k, v) for k, v in after.items() if k.startswith(name + "_bucket{")]
    assert buckets and all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), name
    assert buckets[-1][0].endswith(',le="+Inf"}') and buckets[-1][1] == after[name + "_count" + labels], name
    for k, _ in buckets[:-1]:  # Python's repr, as prometheus_client writes them: "0.005", "1.0"
        le = re.search(r',le="([^"]*)"}$', k).group(1)
        assert repr(float(le)) == le, k
for name, le in (("vllm:time_to_first_token_seconds", "0.005"), ("vllm:iteration_tokens_total", "1.0")):
    assert '%s_bucket{model_name="%s",le="%s"}' % (name, model, le) in after, (name, le)
counts = {n: delta(n + "_count") for n in want["histogram"]}
print(counts)
assert counts == {"vllm:time_to_first_token_seconds": 3, "vllm:inter_token_latency_seconds": 9,
                  "vllm:e2e_request_latency_seconds": 3, "vllm:request_queue_time_seconds": 3,
                  "vllm:iteration_tokens_total": 12, "vllm:request_prompt_tokens": 3,
                  "vllm:request_generation_tokens": 3}, counts
# each step computes its prompt tokens or one token a request: the prompts, then 3 x 3 decodes
assert delta("vllm:iteration_tokens_total_sum") == delta("vllm:prompt_tokens_total") + 9
assert delta("vllm:request_generation_tokens_sum") == 12 and delta("vllm:generation_tokens_total") == 12
# the three ran one after another, each inside the wall time the client saw
e2e, ttft, queue, itl = (delta(n + "_sum") for n in ("vllm:e2e_request_latency_seconds",
                         "vllm:time_to_first_token_seconds", "vllm:request_queue_time_seconds",
                         "vllm:inter_token_latency_seconds"))
print("sums: e2e %.4f ttft %.4f queue %.4f itl %.4f wall %.4f" % (e2e, ttft, queue, itl, wall))
assert 0 < e2e <= wall and 0 < ttft <= e2e and 0 <= queue <= ttft and 0 < itl <= e2e
EOF

# --- chunked request bodies ------------------------------------------------------------------
python3 -c 'import json; print(json.dumps({"prompt": "Hello there", "ignore_eos": True, "max_tokens": 3}))' >"$tmp/small"
status=$(curl -s -o "$tmp/out" -w '%{http_code}' --max-time "$(scaled 60)" -H 'Transfer-Encoding: chunked' \
    "$base/v1/completions" --data-binary @"$tmp/small")
expect "curl's chunked body: 200, 3 tokens" bash -c "[[ $status == 200 ]] && grep -q '\"completion_tokens\":3' '$tmp/out'"
python3 - "$port" <<'EOF' >"$tmp/chunked" 2>&1 && pass "chunked bodies: in pieces 200 (read whole), over max-line-bytes 413, malformed sizes 400 or closed" || fail "chunked bodies: $(tail -n 3 "$tmp/chunked")"
import json, socket, sys, time
port = int(sys.argv[1])
def exchange(pieces, pause):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    for p in pieces:
        try:
            s.sendall(p)
        except OSError:
            break  # answered and closed before the rest
        time.sleep(pause)
    data = b""
    while True:
        try:
            d = s.recv(65536)
        except ConnectionResetError:
            break
        if not d:
            break
        data += d
    s.close()
    return data
def chunks(body, size):
    return [b"%x\r\n%s\r\n" % (len(body[i:i + size]), body[i:i + size]) for i in range(0, len(body), size)] + [b"0\r\n\r\n"]
def status(data):
    return data.split(b" ", 2)[1] if data.startswith(b"HTTP/1.1 ") else data[:40]
# max_tokens last: a body cut short would be refused, or give another length
body = json.dumps({"prompt": "Hello there", "ignore_eos": True, "max_tokens": 3}).encode()
answer = exchange(chunks(body, 7), 0.05)
assert status(answer) == b"200", answer[:300]
d = json.loads(answer.partition(b"\r\n\r\n")[2])
assert d["usage"]["completion_tokens"] == 3, d
big = json.dumps({"prompt": "x" * 70000}).encode()
answer = exchange(chunks(big, 8192), 0)
assert status(answer) == b"413" and b'"error"' in answer, answer[:300]
for bad in (b"zz\r\nabc\r\n0\r\n\r\n", b"ffffffffffffffffffff\r\nabc\r\n0\r\n\r\n", b"-3\r\nabc\r\n0\r\n\r\n"):
    answer = exchange([bad], 0)
    assert answer == b"" or status(answer) in (b"400", b"413"), (bad, answer[:300])
    print(bad[:8], status(answer))
EOF
status=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$base/health")
expect "healthy after the chunked bodies" test "$status" = 200

# --- 500 connections at once -------------------------------------------------------------------
# all connected first, then every request sent at once; each answered 200 or refused cleanly
# (429 or 503 with OpenAI's error object), none left hanging, none reset without an answer
cat >"$tmp/many.py" <<'EOF'
import asyncio, collections, json, sys
port, n, timeout = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
body = json.dumps({"prompt": "Hello", "max_tokens": 2, "ignore_eos": True}).encode()
request = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
def verdict(data):
    if not data:
        return "closed without an answer"
    head, _, payload = data.partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1].decode()
    try:
        d = json.loads(payload)
    except ValueError:
        return status + " without JSON"
    if status == "200":
        return "200" if d["usage"]["completion_tokens"] == 2 else "200 of another length"
    if status in ("429", "503") and isinstance(d.get("error"), dict) and "message" in d["error"]:
        return status
    return status + " without OpenAI's error object"
async def one(go):
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as e:
        return "not connected: %s" % e
    await go.wait()
    try:
        writer.write(request)
        await writer.drain()
        return verdict(await asyncio.wait_for(reader.read(), timeout))
    except asyncio.TimeoutError:
        return "no answer in %g s" % timeout
    except OSError as e:
        return "reset: %s" % e
    finally:
        writer.close()
async def main():
    go = asyncio.Event()
    tasks = [asyncio.create_task(one(go)) for _ in range(n)]
    await asyncio.sleep(0.5)
    go.set()
    outcomes = collections.Counter(await asyncio.gather(*tasks))
    print(dict(outcomes))
    sys.exit(0 if set(outcomes) <= {"200", "429", "503"} else 1)
asyncio.run(main())
EOF
python3 "$tmp/many.py" "$port" 500 "$(scaled 60)" >"$tmp/many" 2>&1
rc=$?
expect "500 connections at once (max-connections 600): each answered, 200 or a clean refusal: $(tail -n 1 "$tmp/many")" \
    test "$rc" = 0

# --- beyond a low max-connections ------------------------------------------------------------
# libmicrohttpd stops accepting at the limit: later clients wait in the listen backlog (not
# refused, not reset) and are served as connections close.
port2=$(free_port)
start_daemon "$port2" "$tmp/low.log" --socket "$tmp/low.sock" --max-connections 20 --client-timeout 2
low_pid=$daemon_pid
low_fds=$(open_fds "$low_pid")
python3 "$tmp/many.py" "$port2" 100 "$(scaled 60)" >"$tmp/many.low" 2>&1
expect "100 clients at max-connections 20: every one served in turn: $(tail -n 1 "$tmp/many.low")" \
    grep -qx "{'200': 100}" "$tmp/many.low"
# 20 idle connections hold every slot: a request waits until client-timeout cuts them (2 s), then
# is answered; the idle ones are closed, not left open.
python3 - "$port2" "$(scaled 20)" <<'EOF' >"$tmp/idle" 2>&1 && pass "idle clients holding max-connections: the next one waits for client-timeout, then is served ($(tail -n 1 "$tmp/idle"))" || fail "idle clients holding max-connections: $(tail -n 3 "$tmp/idle")"
import socket, sys, time
port, limit = int(sys.argv[1]), float(sys.argv[2])
idle = [socket.create_connection(("127.0.0.1", port), timeout=limit) for _ in range(20)]
time.sleep(0.3)
t0 = time.time()
s = socket.create_connection(("127.0.0.1", port), timeout=limit)
s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
answer = b""
while True:
    d = s.recv(4096)
    if not d:
        break
    answer += d
waited = time.time() - t0
assert answer.startswith(b"HTTP/1.1 200"), answer[:100]
for c in idle:
    assert c.recv(1) == b""  # closed by the daemon
print("answered after %.1f s" % waited)
assert 1.0 <= waited <= limit, waited
EOF
fds_settle "$low_pid" "$low_fds"
rc=$?
status=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "http://127.0.0.1:$port2/health")
expect "max-connections 20 afterwards: fds back ($low_fds at start, $fds_now now), /health $status" \
    bash -c "[[ $rc == 0 && $status == 200 ]]"

# --- afterwards: nothing left behind, still serving ----------------------------------------------
fds_settle "$pid" "$fds_at_start"
rc=$?
expect "open fds back to the start's ($fds_at_start at start, $fds_now now)" test "$rc" = 0
status=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$base/health")
expect "/health: 200" test "$status" = 200
curl -s "$base/metrics" >"$tmp/metrics.2"
running=$(sed -n 's/^vllm:num_requests_running{[^}]*} //p' "$tmp/metrics.2")
expect "num_requests_running: 0 (${running:-?})" test "${running:-x}" = 0
status=$(curl -s -o "$tmp/out" -w '%{http_code}' --max-time "$(scaled 60)" "$base/v1/completions" \
    -d '{"prompt": "The capital of France is", "max_tokens": 5, "ignore_eos": true}')
expect "a normal request still works" bash -c "[[ $status == 200 ]] && grep -q '\"completion_tokens\":5' '$tmp/out'"

echo "$passed passed, $failed failed"
((failed == 0))
