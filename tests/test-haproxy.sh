#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Scale-out as units/haproxy-asyncllmd.cfg describes it, with a real haproxy: three daemons on
# loopback behind it, 300 requests from 30 clients all answered while one daemon is killed
# mid-run (those in flight on it end with an error status the client sees, nothing hangs);
# the health checks take it out, and put it back once it is restarted.
set -u
units=${ASYNCLLMD_UNITS:?ASYNCLLMD_UNITS must name the units folder}
command -v haproxy >/dev/null || { echo "SKIP: no haproxy (scripts/setup installs it)"; exit 77; }
. "$(dirname "$0")/http-test-lib.sh"

ports=($(free_port) $(free_port) $(free_port))
front=$(free_port)
declare -A daemon_pid
start() { # instance index
    "$daemon" --model "$model" --max-model-len 512 --bus none --socket "$tmp/d$1.sock" --port "${ports[$1]}" \
        >>"$tmp/d$1.log" 2>&1 &
    daemon_pid[$1]=$!
    pids+=($!)
}
ready() { curl -s -o /dev/null --retry 60 --retry-connrefused --retry-delay 1 "http://127.0.0.1:$1/health"; }
for i in 0 1 2; do start $i; done
for i in 0 1 2; do ready "${ports[$i]}"; done

# the recipe, its ports ours
sed -e "s/127.0.0.1:8000/127.0.0.1:$front/" -e "s/127.0.0.1:8001/127.0.0.1:${ports[0]}/" \
    -e "s/127.0.0.1:8002/127.0.0.1:${ports[1]}/" -e "s/127.0.0.1:8003/127.0.0.1:${ports[2]}/" \
    "$units/haproxy-asyncllmd.cfg" >"$tmp/haproxy.cfg"
# and a stats socket, to read the servers' states
sed -i "s|^    maxconn 4096|    maxconn 4096\n    stats socket $tmp/haproxy.stat level admin|" "$tmp/haproxy.cfg"
haproxy -c -f "$tmp/haproxy.cfg" >"$tmp/check.out" 2>&1
expect "the recipe is valid haproxy configuration ($(tail -n 1 "$tmp/check.out"))" grep -qi "valid" "$tmp/check.out"
haproxy -f "$tmp/haproxy.cfg" -db >"$tmp/haproxy.log" 2>&1 &
pids+=($!)
ready "$front"
server_state() { # name: UP, DOWN, ...
    python3 -c 'import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b"show stat\n")
data = b""
while chunk := s.recv(65536):
    data += chunk
for line in data.decode().splitlines():
    f = line.split(",")
    if len(f) > 17 and f[0] == "asyncllmd" and f[1] == sys.argv[2]:
        print(f[17].split()[0])' "$tmp/haproxy.stat" "$1"
}
wait_state() { # name, state
    local end=$((SECONDS + $(scaled 20)))
    while [[ $(server_state "$1") != "$2" ]] && ((SECONDS < end)); do sleep 0.2; done
    [[ $(server_state "$1") == "$2" ]]
}

# 30 clients, 10 requests each; daemon 1 is killed once a third of them are answered.
client() { # index: one line per request, its HTTP status (000: no answer) and curl's exit (18: cut short)
    for r in $(seq 10); do
        code=$(curl -s -o /dev/null -w '%{http_code}' --max-time "$(scaled 120)" "http://127.0.0.1:$front/v1/completions" \
            -d "{\"prompt\": \"Client $1 asks $r\", \"max_tokens\": 12, \"ignore_eos\": true, \"stream\": $(((r % 2)) && echo true || echo false)}")
        echo "$code $?"
    done >"$tmp/client.$1"
}
clients=()
for c in $(seq 30); do
    client "$c" &
    clients+=($!)
done
end=$((SECONDS + $(scaled 120)))
while (($(cat "$tmp"/client.* 2>/dev/null | wc -l) < 100)) && ((SECONDS < end)); do sleep 0.1; done
kill -KILL "${daemon_pid[1]}"
wait "${clients[@]}"
cat "$tmp"/client.* >"$tmp/codes"
total=$(wc -l <"$tmp/codes") ok=$(grep -c '^200 0$' "$tmp/codes") none=$(grep -c '^000 ' "$tmp/codes")
hung=$(grep -c ' 28$' "$tmp/codes") # curl's timeout
summary="$(sort "$tmp/codes" | uniq -c | tr '\n' ' ')"
expect "300 requests, every one answered, none hung (status and curl exit: ${summary})" \
    test "$total" = 300 -a "$none" = 0 -a "$hung" = 0
expect "all but those in flight on the killed daemon succeed ($ok of 300)" test "$ok" -ge 270
expect "the health checks take the killed daemon out" wait_state llm2 DOWN

# restarted, it is checked back in and served again
start 1
ready "${ports[1]}"
expect "the health checks put it back" wait_state llm2 UP
clients=()
for r in $(seq 30); do
    curl -s -o /dev/null --max-time "$(scaled 60)" "http://127.0.0.1:$front/v1/completions" \
        -d '{"prompt": "Back again", "max_tokens": 4}' &
    clients+=($!)
done
wait "${clients[@]}"
served=$(curl -s "http://127.0.0.1:${ports[1]}/metrics" | awk '/^vllm:e2e_request_latency_seconds_count/ { print $2 }')
expect "the restarted daemon serves again (${served:-0} requests)" test "${served:-0}" -gt 0

echo "$passed passed, $failed failed"
((failed == 0))
