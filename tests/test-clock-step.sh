#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The wall clock stepped back an hour and then forward an hour while the daemon serves
# latency-sensitive requests under the slo policy: libfaketime moves the daemon's
# CLOCK_REALTIME alone (as a step of the system clock does; its monotonic clock runs on).
# The step reaches the daemon (the HTTP front's "created" is an hour ahead); the requests
# finish with every token, none refused or demoted; health stays ok (no stall seen); each
# output's times are in order and span seconds, not an hour; a request after the steps is
# served too. Exit 77 without libfaketime (Debian's faketime package).
set -u
. "$(dirname "$0")/http-test-lib.sh"

faketime_lib=
for dir in /usr/lib/*/faketime /usr/lib/faketime /usr/local/lib/faketime; do
    [[ -f $dir/libfaketimeMT.so.1 ]] && faketime_lib=$dir/libfaketimeMT.so.1 && break
done
[[ -n $faketime_lib ]] || { echo "SKIP: libfaketime is not installed (apt-get install faketime)"; exit 77; }

# The offset libfaketime applies, re-read every second; the monotonic clock is left alone.
echo "+0" >"$tmp/offset"
port=$(free_port)
base=http://127.0.0.1:$port
LD_PRELOAD=$faketime_lib FAKETIME_TIMESTAMP_FILE=$tmp/offset FAKETIME_CACHE_DURATION=1 \
    FAKETIME_DONT_FAKE_MONOTONIC=1 ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
    "$daemon" --model "$model" --threads 2 --bus none --socket "$tmp/d.sock" --port "$port" \
    --scheduling-policy slo --max-model-len 1024 >"$tmp/d.log" 2>&1 &
pids+=($!)
wait_ready "$tmp/d.sock" || { echo "FAIL: asyncllmd did not start: $(tail -n 5 "$tmp/d.log")"; exit 1; }

created() { curl -s --max-time "$(scaled 30)" "$base/v1/models" | grep -oE '"created":[0-9]+' | head -n 1 | cut -d: -f2; }
expect "before the step, the daemon's wall clock is the real one" \
    test $(($(created) - $(date +%s))) -lt 60 -a $(($(date +%s) - $(created))) -lt 60

# generate OUT: latency-sensitive, SLOs no step-free run can miss; enough tokens to outlast
# the steps (fewer in a sanitizer build, which is slower)
tokens=$((400 / slowdown > 100 ? 400 / slowdown : 100))
generate() {
    timeout "$(scaled 300)" "$ctl" --socket "$tmp/d.sock" generate --json --output-kind final --ignore-eos \
        --max-tokens "$tokens" --latency-sensitive --ttft-slo 60 --slo 5 "Write a long story about a lighthouse." \
        >"$1" 2>"$1.err" </dev/null
}
jobs=()
for i in 0 1 2 3; do
    generate "$tmp/out$i" &
    jobs+=($!)
done
sleep 1
echo "-1h" >"$tmp/offset"
sleep 2
expect "stepped back: the daemon's wall clock is an hour behind" test $(($(date +%s) - $(created))) -gt 3000
expect "stepped back with requests in flight" test "$(daemon_stat "$tmp/d.sock" requests_in_flight)" -gt 0
echo "+1h" >"$tmp/offset"
sleep 2
expect "stepped forward: the daemon's wall clock is an hour ahead" test $(($(created) - $(date +%s))) -gt 3000
expect "stepped forward with requests in flight" test "$(daemon_stat "$tmp/d.sock" requests_in_flight)" -gt 0
rc=0
for job in "${jobs[@]}"; do wait "$job" || rc=$?; done
expect "the four requests finished (exit $rc)" test "$rc" -eq 0
generate "$tmp/out4"
expect "a request after the steps finished" test -s "$tmp/out4"

# Each output: every token, and its times in order, spanning seconds: the times come from
# the monotonic clock, anchored to the wall clock once at the start.
for i in 0 1 2 3 4; do
    expect "request $i: $tokens tokens, its times in order and under 10 minutes apart" python3 - "$tmp/out$i" "$tokens" <<'EOF'
import json, sys
o = json.loads(open(sys.argv[1]).readline())
m = o["metrics"]
times = [m[k] for k in ("arrival_time", "first_scheduled_time", "first_token_time", "last_token_time", "finished_time")]
c = o["outputs"][0]
ok = (len(c["token_ids"]) == int(sys.argv[2]) and c["finish_reason"] == "length" and times == sorted(times)
      and times[-1] - times[0] < 600)
if not ok:
    print(o["usage"], c["finish_reason"], times, file=sys.stderr)
sys.exit(0 if ok else 1)
EOF
done
expect "no request refused or demoted by the slo policy" \
    test "$(daemon_stat "$tmp/d.sock" slo_rejected)" -eq 0 -a "$(daemon_stat "$tmp/d.sock" slo_demoted)" -eq 0
expect "health is ok after the steps" "$ctl" --socket "$tmp/d.sock" health >/dev/null

echo "$passed passed, $failed failed"
((failed == 0))
