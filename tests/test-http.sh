#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The HTTP front as its clients use it, with curl against the real daemon and model: vLLM's
# OpenAI-compatible routes (the co-serving seed request word for word, streamed and not),
# OpenAI's error objects and statuses, a client that goes away mid-stream (its request is
# aborted), malformed HTTP, a body over the limit, many connections at once, and the refusal
# of an address beyond loopback.
set -u
ctl=${ASYNCLLMCTL:?ASYNCLLMCTL must name the asyncllmctl binary}
. "$(dirname "$0")/http-test-lib.sh"

port=$(free_port)
sock=$tmp/d.sock
base=http://127.0.0.1:$port
"$daemon" --model "$model" --max-model-len 4096 --bus none --socket "$sock" --port "$port" \
    --served-model-name facebook/opt-125m --max-line-bytes 65536 --client-timeout 3 >"$tmp/daemon.log" 2>&1 &
pids+=($!)
end=$((SECONDS + $(scaled 60)))
until curl -s -o /dev/null "$base/health"; do
    ((SECONDS < end)) || { echo "FAIL: the daemon never answered on port $port"; cat "$tmp/daemon.log"; exit 1; }
    sleep 0.2
done

# post PATH BODY: the answer in $tmp/out, the status in $status
post() { status=$(curl -s -o "$tmp/out" -w '%{http_code}' --max-time "$(scaled 120)" "$base$1" -H 'Content-Type: application/json' -d "$2"); }
# json EXPR: python's verdict on the answer (d), true or false
json() { python3 -c "import json, sys; d = json.load(open(sys.argv[1])); sys.exit(0 if ($1) else 1)" "$tmp/out" 2>/dev/null; }

status=$(curl -s -o "$tmp/out" -w '%{http_code}' "$base/health")
expect "GET /health: 200" test "$status" = 200
status=$(curl -s -o "$tmp/out" -w '%{http_code}' "$base/v1/models")
expect "GET /v1/models lists the served name" json "d['object'] == 'list' and d['data'][0]['id'] == 'facebook/opt-125m'"
status=$(curl -s -o "$tmp/out" -w '%{http_code}' "$base/version")
expect "GET /version" json "'version' in d"

# The co-serving seed request, word for word.
seed='{
  "model": "facebook/opt-125m",
  "messages": [{"role": "user", "content": "1 u are loved, sir: They that least lend it you shall lack you first. KING I fill a place"}],
  "temperature": 0.7, "length_penalty": 1.0, "max_tokens": 100, "min_tokens": 100,
  "is_latency_sensitive": "True", "slo": 0.05 }'
post /v1/chat/completions "$seed"
expect "the seed request: 200, 100 tokens, a chat.completion" json \
    "d['object'] == 'chat.completion' and d['usage']['completion_tokens'] == 100 and d['choices'][0]['finish_reason'] == 'length' and len(d['choices'][0]['message']['content']) > 0 and d['model'] == 'facebook/opt-125m'"
stream_seed=$(python3 -c 'import json, sys; d = json.loads(sys.argv[1]); d["stream"] = True; d["stream_options"] = {"include_usage": True}; print(json.dumps(d))' "$seed")
curl -sN --max-time "$(scaled 120)" "$base/v1/chat/completions" -d "$stream_seed" >"$tmp/stream"
python3 - "$tmp/stream" <<'EOF' && pass "the seed request streamed: SSE chunks, a role first, usage, [DONE]" || fail "the seed request streamed: $(head -c 400 "$tmp/stream")"
import json, sys
events = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
assert events[-1] == "[DONE]", events[-1]
chunks = [json.loads(e) for e in events[:-1]]
assert all(c["object"] == "chat.completion.chunk" for c in chunks)
assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 100
assert chunks[-2]["choices"][0]["finish_reason"] == "length"
assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
EOF

post /v1/completions '{"prompt": "The capital of France is", "max_tokens": 8, "n": 2, "logprobs": 2, "temperature": 1, "seed": 7}'
expect "completions: n = 2, logprobs, usage" json \
    "d['object'] == 'text_completion' and len(d['choices']) == 2 and len(d['choices'][1]['logprobs']['tokens']) == 8 and d['usage']['completion_tokens'] == 16"
cp "$tmp/out" "$tmp/first"
post /v1/completions '{"prompt": "The capital of France is", "max_tokens": 8, "n": 2, "logprobs": 2, "temperature": 1, "seed": 7}'
expect "completions: the same seed gives the same text" python3 -c "import json, sys; a, b = (json.load(open(f)) for f in sys.argv[1:]); sys.exit(0 if [c['text'] for c in a['choices']] == [c['text'] for c in b['choices']] else 1)" "$tmp/first" "$tmp/out"
post /v1/completions '{"prompt": "Count: 1, 2, 3,", "max_tokens": 40, "temperature": 0, "stop": [" 6"], "echo": true}'
expect "completions: stop ends it, echo puts the prompt first" json \
    "d['choices'][0]['finish_reason'] == 'stop' and d['choices'][0]['text'].startswith('Count: 1, 2, 3,') and ' 6' not in d['choices'][0]['text'][15:]"

# vLLM's other SamplingParams fields: bad_words, truncate_prompt_tokens, best_of.
post /v1/completions '{"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0}'
expect "completions: the greedy answer names Paris" json "'Paris' in d['choices'][0]['text']"
post /v1/completions '{"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0, "bad_words": ["Paris"]}'
expect "completions: bad_words keeps the word out" json "d['choices'][0]['text'] and 'Paris' not in d['choices'][0]['text']"
post /v1/chat/completions '{"messages": [{"role": "user", "content": "Say hello in French."}], "max_tokens": 8, "truncate_prompt_tokens": 4}'
expect "chat: truncate_prompt_tokens keeps the prompt's last 4 tokens" json "d['usage']['prompt_tokens'] == 4"
post /v1/completions '{"prompt": "Hi", "max_tokens": 2, "n": 2, "best_of": 2, "temperature": 1}'
expect "completions: best_of = n is accepted" test "$status" = 200
post /v1/completions '{"prompt": "Hi", "max_tokens": 2, "best_of": 3}'
expect "completions: best_of above n: 400 with vLLM's message" json \
    "d['error']['param'] == 'best_of' and 'does not yet support best_of' in d['error']['message']"
post /v1/completions '{"prompt": "Hi", "max_tokens": 2, "n": 3, "best_of": 2, "temperature": 1}'
expect "completions: best_of below n: 400 with vLLM's message" json \
    "d['error']['message'].endswith('best_of must be greater than or equal to n, got n=3 and best_of=2.')"

post /v1/completions '{"prompt": "Hi", "temperature": -1}'
expect "a bad field: 400 naming it" json "d['error']['code'] == 400 and d['error']['param'] == 'temperature' and 'temperature' in d['error']['message']"
post /v1/completions '{"prompt": "Hi", "top_k": "many"}'
expect "a mistyped field: 400 naming it" json "d['error']['param'] == 'top_k'"
post /v1/completions '{"prompt": "Hi", "model": "gpt-4"}'
expect "an unknown model: 404" test "$status" = 404
post /v1/chat/completions '{"prompt": "Hi"}'
expect "chat without messages: 400" json "d['error']['param'] == 'messages'"
post /v1/completions '{"prompt": '
expect "a body that ends early: 400" json "d['error']['code'] == 400 and 'ends early' in d['error']['message']"
post /v1/nothing '{}'
expect "an unknown route: 404 with OpenAI's error object" json "d['error']['code'] == 404"
status=$(curl -s -o "$tmp/out" -w '%{http_code}' -X DELETE "$base/v1/models")
expect "a wrong method: 405" test "$status" = 405
python3 -c 'import json; print(json.dumps({"prompt": "x" * 70000}))' >"$tmp/big"
status=$(curl -s -o "$tmp/out" -w '%{http_code}' "$base/v1/completions" --data-binary @"$tmp/big")
expect "a body over max-line-bytes: 413" test "$status" = 413

# Malformed HTTP and a head over the limit: answered or closed, the daemon unharmed.
python3 - "$port" <<'EOF' && pass "malformed HTTP and a huge header are refused" || fail "malformed HTTP"
import socket, sys
for payload in (b"GARBAGE\r\n\r\n", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n"):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
    try:
        s.sendall(payload)
    except OSError:
        pass
    data = s.recv(4096)
    assert data == b"" or data.startswith(b"HTTP/1.1 4"), data[:100]
    s.close()
EOF

# A client that leaves mid-stream: its request is aborted at its next token, long before its
# 3500 tokens would have ended it.
curl -sN --max-time 2 "$base/v1/completions" -d '{"prompt": "Tell a long story.", "max_tokens": 3500, "ignore_eos": true, "stream": true}' >/dev/null
running_now() { "$ctl" --socket "$sock" status 2>/dev/null | awk '/^Running:/ { print $2 }'; }
end=$((SECONDS + $(scaled 5)))
while [[ $(running_now) != 0 ]] && ((SECONDS < end)); do sleep 0.2; done
running=$(running_now)
expect "a stream whose client left is aborted (running: ${running:-?})" test "${running:-x}" = 0

# A client that leaves a whole (not streamed) answer it waits for: aborted at once too.
curl -s --max-time 1 "$base/v1/completions" -d '{"prompt": "Tell a long story.", "max_tokens": 3500, "ignore_eos": true}' >/dev/null
end=$((SECONDS + $(scaled 3)))
while [[ $(running_now) != 0 ]] && ((SECONDS < end)); do sleep 0.1; done
running=$(running_now)
expect "a whole answer whose client left is aborted (running: ${running:-?})" test "${running:-x}" = 0

# An admin on the socket sees an HTTP client's request in list and may abort it: the stream
# ends with finish_reason abort and [DONE].
curl -sN --max-time "$(scaled 60)" "$base/v1/completions" \
    -d '{"prompt": "Tell a long story.", "max_tokens": 3500, "ignore_eos": true, "stream": true}' >"$tmp/aborted" &
curl_pid=$!
end=$((SECONDS + $(scaled 10)))
until http_id=$("$ctl" --socket "$sock" list 2>/dev/null | grep -m1 '^http/') || ((SECONDS >= end)); do sleep 0.1; done
"$ctl" --socket "$sock" abort "$http_id" >"$tmp/abort.out" 2>&1
wait "$curl_pid"
expect "an admin lists the HTTP request (${http_id:-none}) and aborts it: finish_reason abort, [DONE]" \
    grep -q '"finish_reason":"abort"' "$tmp/aborted"
expect "the aborted stream still ends with [DONE]" grep -q '^data: \[DONE\]' "$tmp/aborted"

# A client sending its request a byte at a time is cut after client-timeout (3 s), not before.
python3 - "$port" <<'EOF_PY' && pass "a slow client is cut at client-timeout" || fail "a slow client: $(cat "$tmp/slow" 2>/dev/null)"
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
t0 = time.time()
while time.time() - t0 < 20:
    try:
        s.sendall(b"a")
        s.settimeout(0.5)
        if s.recv(1) == b"":
            break
    except socket.timeout:
        continue
    except OSError:
        break
took = time.time() - t0

print("cut after %.1f s" % took)
sys.exit(0 if 2.5 <= took <= 7 else 1)
EOF_PY

status=$(curl -s -o "$tmp/out" -w '%{http_code}' "$base/tokenize" -d '{"prompt": "Hello world"}')
expect "POST /tokenize" json "d['count'] == len(d['tokens']) and d['count'] >= 2"
ids=$(python3 -c 'import json, sys; print(json.dumps({"tokens": json.load(open(sys.argv[1]))["tokens"]}))' "$tmp/out")
status=$(curl -s -o "$tmp/out" -w '%{http_code}' "$base/detokenize" -d "$ids")
expect "POST /detokenize gives the text back" json "d['prompt'] == 'Hello world'"
status=$(curl -s -o "$tmp/out" -w '%{http_code}' "$base/tokenize" -d '{"messages": [{"role": "user", "content": "Hi"}]}')
expect "POST /tokenize of messages (the chat template)" json "d['count'] > 5"
# /metrics: vLLM's names, labelled with the served name, counting what HTTP requests did.
metric() { # name (with labels): its value in $tmp/metrics
        python3 -c 'import sys
for l in open(sys.argv[1]):
    k, _, v = l.rstrip("\n").rpartition(" ")
    if k == sys.argv[2]:
        print(int(float(v)))' "$tmp/metrics" "$1"
}
names=('vllm:e2e_request_latency_seconds_count{model_name="facebook/opt-125m"}'
       'vllm:inter_token_latency_seconds_count{model_name="facebook/opt-125m"}'
       'vllm:generation_tokens_total{model_name="facebook/opt-125m"}'
       'vllm:request_success_total{model_name="facebook/opt-125m",finished_reason="length"}')
curl -s "$base/metrics" >"$tmp/metrics"
before=(); for n in "${names[@]}"; do before+=("$(metric "$n")"); done
for i in 1 2 3; do post /v1/completions '{"prompt": "Hi", "max_tokens": 4, "ignore_eos": true}'; done
curl -s "$base/metrics" >"$tmp/metrics"
after=(); for n in "${names[@]}"; do after+=("$(metric "$n")"); done
expect "GET /metrics counts 3 requests, 9 gaps, 12 tokens, 3 ended by length (${before[*]} -> ${after[*]})" \
        test "$((after[0] - before[0])) $((after[1] - before[1])) $((after[2] - before[2])) $((after[3] - before[3]))" = "3 9 12 3"

# Many clients at once: every one answered.
for i in $(seq 100); do
    curl -s -o "$tmp/many.$i" -w '%{http_code}\n' --max-time "$(scaled 120)" "$base/v1/completions" -d '{"prompt": "Hello", "max_tokens": 4}' &
done >"$tmp/codes"
wait_for=$((SECONDS + $(scaled 150)))
while (($(grep -c . "$tmp/codes") < 100)) && ((SECONDS < wait_for)); do sleep 0.2; done
expect "100 clients at once: all answered 200 ($(sort "$tmp/codes" | uniq -c | tr '\n' ' '))" test "$(grep -c '^200$' "$tmp/codes")" = 100
status=$(curl -s -o /dev/null -w '%{http_code}' "$base/health")
expect "the daemon is healthy afterwards" test "$status" = 200

# With an API key: the /v1 routes want it, /health does not; any address may be bound.
printf 'sk-test-%s\n' "$RANDOM$RANDOM" >"$tmp/key"
key=$(head -n 1 "$tmp/key")
port2=$(free_port)
"$daemon" --model "$model" --max-model-len 256 --bus none --socket "$tmp/k.sock" --host 0.0.0.0 --port "$port2" \
    --api-key-file "$tmp/key" >"$tmp/k.log" 2>&1 &
pids+=($!)
end=$((SECONDS + $(scaled 60)))
until curl -s -o /dev/null "http://127.0.0.1:$port2/health"; do
    ((SECONDS < end)) || break
    sleep 0.2
done
keyed() { curl -s -o "$tmp/out" -w '%{http_code}' "http://127.0.0.1:$port2/v1/completions" -d '{"prompt": "Hi", "max_tokens": 2}' "$@"; }
expect "with a key, no key: 401" test "$(keyed)" = 401
expect "with a key, the wrong key: 401" test "$(keyed -H 'Authorization: Bearer sk-wrong')" = 401
expect "with a key, the key: 200 (bound to 0.0.0.0)" test "$(keyed -H "Authorization: Bearer $key")" = 200
expect "with a key, /health needs none" test "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port2/health")" = 200
"$daemon" --model "$model" --bus none --socket "$tmp/f.sock" --port "$port2" --api-key x --api-key-file "$tmp/key" >"$tmp/out" 2>&1
expect "--api-key and --api-key-file together are refused" grep -q "not both" "$tmp/out"

# Socket activation: the HTTP socket systemd passes (by the name asyncllmd-http) is served,
# the daemon's own Unix socket made beside it; one beyond loopback, without a key, refused.
if command -v systemd-socket-activate >/dev/null; then
        port3=$(free_port)
        systemd-socket-activate -l "127.0.0.1:$port3" --fdname=asyncllmd-http \
                "$daemon" --model "$model" --max-model-len 256 --bus none --socket "$tmp/a.sock" >"$tmp/a.log" 2>&1 &
        pids+=($!)
        status=$(curl -s -o "$tmp/out" -w '%{http_code}' --retry 60 --retry-connrefused --retry-delay 1 --max-time "$(scaled 120)" \
                "http://127.0.0.1:$port3/v1/completions" -d '{"prompt": "Hi", "max_tokens": 2}')
        expect "a socket-activated HTTP front answers (and says so: $(grep -c 'socket systemd passed' "$tmp/a.log"))" test "$status" = 200
        port4=$(free_port)
        timeout "$(scaled 60)" systemd-socket-activate -l "0.0.0.0:$port4" --fdname=asyncllmd-http \
                "$daemon" --model "$model" --max-model-len 256 --bus none --socket "$tmp/b.sock" >"$tmp/out" 2>&1 &
        sleep 0.5
        curl -s -o /dev/null --max-time 5 "http://127.0.0.1:$port4/health"
        wait $!
        expect "a passed socket beyond loopback, without a key, is refused" grep -q "not on a loopback address" "$tmp/out"
else
        echo "skip (not counted): no systemd-socket-activate for the socket-activation checks"
fi

# The slo policy's refusal: 429 with Retry-After, streamed or not (before any token, so the
# status says it).
port6=$(free_port)
"$daemon" --model "$model" --max-model-len 512 --bus none --socket "$tmp/s.sock" --port "$port6" \
        --scheduling-policy slo --slo-admission reject >"$tmp/s.log" 2>&1 &
pids+=($!)
slo_url=http://127.0.0.1:$port6/v1/completions
curl -s -o /dev/null --retry 60 --retry-connrefused --retry-delay 1 --max-time "$(scaled 120)" "$slo_url" \
        -d '{"prompt": "Hi", "max_tokens": 40, "ignore_eos": true}' # steps for the model to learn from
for stream in false true; do
        status=$(curl -s -D "$tmp/headers" -o "$tmp/out" -w '%{http_code}' --max-time "$(scaled 60)" "$slo_url" \
                -d "{\"prompt\": \"Hi\", \"max_tokens\": 2, \"latency_sensitive\": true, \"slo\": 0.000001, \"stream\": $stream}")
        expect "an SLO no step can meet (stream $stream): 429, Retry-After, type overloaded" \
                bash -c "[[ $status == 429 ]] && grep -qi '^retry-after: [0-9]' '$tmp/headers' && grep -q '\"type\":\"overloaded\"' '$tmp/out'"
done

# The engine's death: the request in flight gets 503 engine_dead, and the daemon exits 3.
port7=$(free_port)
ASYNCLLMD_FAULT_FAIL_STEP=6 "$daemon" --model "$model" --max-model-len 256 --bus none --socket "$tmp/x.sock" \
        --port "$port7" >"$tmp/x.log" 2>&1 &
dead_pid=$!
# (no --retry on the request: curl takes a 503 for a transient error and would ask again)
curl -s -o /dev/null --retry 60 --retry-connrefused --retry-delay 1 "http://127.0.0.1:$port7/version"
status=$(curl -s -o "$tmp/out" -w '%{http_code}' --max-time "$(scaled 120)" \
        "http://127.0.0.1:$port7/v1/completions" -d '{"prompt": "Hi", "max_tokens": 20}')
wait "$dead_pid"
rc=$?
expect "an engine that dies: 503 engine_dead to the request in flight, exit $rc" \
        bash -c "[[ $status == 503 && $rc == 3 ]] && grep -q engine_dead '$tmp/out'"

# SIGTERM drains: a stream in flight is answered to its end, then the daemon exits 0.
port5=$(free_port)
"$daemon" --model "$model" --max-model-len 512 --bus none --socket "$tmp/t.sock" --port "$port5" >"$tmp/t.log" 2>&1 &
term_pid=$!
curl -sN --retry 60 --retry-connrefused --retry-delay 1 --max-time "$(scaled 120)" "http://127.0.0.1:$port5/v1/completions" \
        -d '{"prompt": "Once", "max_tokens": 120, "ignore_eos": true, "stream": true}' >"$tmp/drain" &
curl_pid=$!
end=$((SECONDS + $(scaled 60)))
until grep -q '"text"' "$tmp/drain" 2>/dev/null || ((SECONDS > end)); do sleep 0.1; done
kill -TERM "$term_pid"
wait "$curl_pid"
wait "$term_pid"
rc=$?
expect "SIGTERM: the stream in flight ends whole ([DONE], length), then exit $rc" \
        bash -c "[[ $rc == 0 ]] && grep -q 'finish_reason\":\"length' '$tmp/drain' && grep -q 'data: \[DONE\]' '$tmp/drain'"

# An address beyond loopback is refused without an API key.
"$daemon" --model "$model" --max-model-len 256 --bus none --socket "$tmp/e.sock" --host 0.0.0.0 --port "$port" >"$tmp/out" 2>&1
rc=$?
expect "--host 0.0.0.0 is refused (exit $rc): $(tail -n 1 "$tmp/out")" grep -q "not a loopback address" "$tmp/out"

echo "$passed passed, $failed failed"
((failed == 0))
