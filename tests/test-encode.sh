#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# encode (embeddings) against the real daemon and model: tests/encode-check on the socket and
# /v1/embeddings (llama-server's vectors for each pooling type, the same bits alone and in
# a crowd and from the prefix cache, dimensions and normalize, refusals, an abort); the same
# bits when every prompt is cut into 16-token chunks; asyncllmctl encode on the socket and on
# D-Bus (a private bus), its output the socket's vector and its refusals with their exit
# statuses.
set -u
. "$(dirname "$0")/http-test-lib.sh"
. "$ASYNCLLM_SRCDIR/tests/private-bus.sh"

# start NAME ARGS...: a daemon on $tmp/NAME.sock, ready
start() {
        local name=$1
        shift
        "$daemon" --model "$model" --max-model-len 2048 --socket "$tmp/$name.sock" "$@" >"$tmp/$name.log" 2>&1 &
        pids+=($!)
        wait_ready "$tmp/$name.sock" || { echo "FAIL: $name never answered"; cat "$tmp/$name.log"; exit 1; }
}

start_private_bus "$tmp/bus" || echo "note: no dbus-daemon: asyncllmctl --bus user encode is not checked"
export DBUS_SESSION_BUS_ADDRESS=$bus_address
port=$(free_port)
start main --port "$port" --bus "$([[ -n $bus_address ]] && echo user || echo none)"

python3 "$ASYNCLLM_SRCDIR/tests/encode-check" --socket "$tmp/main.sock" --http "http://127.0.0.1:$port" \
        --fixtures "$ASYNCLLM_SRCDIR/tests/fixtures" >"$tmp/check.out" 2>&1
status=$?
cat "$tmp/check.out"
passed=$((passed + $(grep -c '^ok: ' "$tmp/check.out")))
failed=$((failed + $(grep -c '^FAIL: ' "$tmp/check.out")))
((status == 0)) || grep -q '^FAIL: ' "$tmp/check.out" || fail "tests/encode-check failed (exit $status) without a FAIL line"

# ---- asyncllmctl encode: the socket's vector, on the socket and on D-Bus ----
texts=("The library opens at nine on weekdays and at ten on Saturdays." "umbrella"
        "def area(r):
    return 3.14159 * r * r")
for i in "${!texts[@]}"; do
        "$ctl" --socket "$tmp/main.sock" encode "${texts[$i]}" >"$tmp/ctl-$i" 2>"$tmp/ctl-$i.err"
        expect "asyncllmctl encode prints 576 components (text $i)" test "$(wc -w <"$tmp/ctl-$i")" = 576
        # the socket's own answer, printed the same way
        printf '{"op":"encode","id":"e","prompt":%s}\n' "$(python3 -c 'import json, sys; print(json.dumps(sys.argv[1]))' "${texts[$i]}")" |
                python3 -c '
import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); f = s.makefile("rw"); f.readline()
f.write(sys.stdin.read()); f.flush()
while True:
    m = json.loads(f.readline())
    if m.get("finished") or "error" in m: break
print(" ".join(json.dumps(x) for x in m["outputs"]["data"]))' "$tmp/main.sock" >"$tmp/socket-$i"
        expect "asyncllmctl encode gives the socket's vector, digit for digit (text $i)" cmp -s "$tmp/ctl-$i" "$tmp/socket-$i"
        if [[ -n $bus_address ]]; then
                "$ctl" --bus user encode "${texts[$i]}" >"$tmp/bus-$i" 2>"$tmp/bus-$i.err"
                expect "asyncllmctl --bus user encode (D-Bus Encode) gives the same vector (text $i)" \
                        cmp -s "$tmp/bus-$i" "$tmp/ctl-$i"
        fi
done
printf '%s' "${texts[1]}" | "$ctl" --socket "$tmp/main.sock" encode --json --pooling-type mean --no-normalize --dimensions 4 \
        >"$tmp/json" 2>&1
expect "asyncllmctl encode - --json: four components and the prompt's token count" \
        python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); sys.exit(0 if len(d["data"]) == 4 and d["prompt_tokens"] == 2 else 1)' "$tmp/json"
"$ctl" --socket "$tmp/main.sock" encode --dimensions 100000 hello >/dev/null 2>"$tmp/err"
rc=$?
expect "too many dimensions: exit 1 and the daemon's reason" bash -c "[[ $rc == 1 ]] && grep -q 'at most the model' '$tmp/err'"
"$ctl" --socket "$tmp/main.sock" encode --pooling-type max hello >/dev/null 2>"$tmp/err"
rc=$?
expect "an unknown pooling type: exit 2 naming the choices" bash -c "[[ $rc == 2 ]] && grep -q 'last, mean or cls' '$tmp/err'"
if [[ -n $bus_address ]]; then
        "$ctl" --bus user encode --dimensions 100000 hello >/dev/null 2>"$tmp/err"
        rc=$?
        expect "on D-Bus too: exit 1 and the reason" bash -c "[[ $rc == 1 ]] && grep -q 'at most the model' '$tmp/err'"
fi

# ---- aborted in flight by a pause in abort mode: exit 1 saying so, on the socket and D-Bus ----
python3 -c "print(' '.join('w%d' % i for i in range(450)))" >"$tmp/long" # some 1900 tokens
"$ctl" --socket "$tmp/main.sock" encode - <"$tmp/long" >"$tmp/out-socket" 2>"$tmp/err-socket" &
socket_pid=$!
if [[ -n $bus_address ]]; then
        "$ctl" --bus user encode - <"$tmp/long" >"$tmp/out-bus" 2>"$tmp/err-bus" &
        bus_pid=$!
fi
want=$([[ -n $bus_address ]] && echo 2 || echo 1)
end=$((SECONDS + $(scaled 30)))
until (($("$ctl" --socket "$tmp/main.sock" list 2>/dev/null | wc -l) >= want)) || ((SECONDS > end)); do sleep 0.05; done
"$ctl" --socket "$tmp/main.sock" pause --mode abort
"$ctl" --socket "$tmp/main.sock" resume
wait "$socket_pid"
rc=$?
expect "an encode aborted by a pause: exit 1, nothing printed, the reason said" \
        bash -c "[[ $rc == 1 && ! -s '$tmp/out-socket' ]] && grep -q 'aborted in the daemon' '$tmp/err-socket'"
if [[ -n $bus_address ]]; then
        wait "$bus_pid"
        rc=$?
        expect "the same over D-Bus (Encode fails with Aborted)" \
                bash -c "[[ $rc == 1 && ! -s '$tmp/out-bus' ]] && grep -q 'was aborted' '$tmp/err-bus'"
fi

# ---- every prompt cut into 16-token chunks: the same bits ----
start chunked --max-num-batched-tokens 16 --max-num-seqs 16 --no-enable-prefix-caching --bus none
for i in 0 2; do
        for pooling in last mean; do
                "$ctl" --socket "$tmp/main.sock" encode --pooling-type $pooling "${texts[$i]} ${texts[$i]}" >"$tmp/whole"
                "$ctl" --socket "$tmp/chunked.sock" encode --pooling-type $pooling "${texts[$i]} ${texts[$i]}" >"$tmp/chunks"
                expect "text $i twice ($pooling) in 16-token chunks: the same vector as in one step" cmp -s "$tmp/whole" "$tmp/chunks"
        done
done

echo "$passed passed, $failed failed"
if ((failed > 0)); then
        echo "--- daemon log"
        tail -n 40 "$tmp/main.log"
fi
((failed == 0))
