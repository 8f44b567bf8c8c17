#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# asyncllmctl as a user runs it, against the real daemon and model: every command, over the
# socket and over D-Bus (a private bus), the prompt from stdin, Ctrl-C (SIGINT) and SIGTERM
# aborting the request in the daemon, and each exit status with the message that goes with it.
set -u
. "${ASYNCLLM_SRCDIR:?ASYNCLLM_SRCDIR must name the source tree}/tests/daemon-test-lib.sh"

# check NAME EXIT STDERR-TEXT COMMAND...: runs asyncllmctl's COMMAND with a time limit; passes
# when it exits with EXIT and (unless empty) its stderr holds STDERR-TEXT. Output in $tmp/out.
check() {
    local name=$1 want_rc=$2 want_err=$3
    shift 3
    timeout "$(scaled 60)" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
    local rc=$?
    if [[ $rc -eq $want_rc ]] && { [[ -z $want_err ]] || grep -qF -- "$want_err" "$tmp/err"; }; then
        pass "$name"
    else
        fail "$name: exit $rc (wanted $want_rc), stderr: $(head -c 600 "$tmp/err"), stdout: $(head -c 300 "$tmp/out")"
    fi
}

out_has() { grep -qF -- "$1" "$tmp/out"; }

# Starts a daemon in the background; its pid goes into $started.
start_daemon() { # log, then arguments
    local log=$1
    shift
    "$daemon" --model "$model" --max-model-len 1024 "$@" >"$log" 2>&1 &
    started=$!
    pids+=("$started")
}

# Waits until `asyncllmctl list` (with the given global options) shows what grep -q $1 finds,
# or, with $1 empty, shows nothing.
wait_list() {
    local want=$1 end=$((SECONDS + $(scaled 30)))
    shift
    while ((SECONDS < end)); do
        local now
        now=$("$ctl" "$@" list 2>/dev/null)
        if [[ -z $want && -z $now ]] || [[ -n $want && $now == *"$want"* ]]; then
            return 0
        fi
        sleep 0.1
    done
    return 1
}

aborted_count() { # requests the daemon counts as aborted
    "$ctl" "$@" metrics | sed -n 's/^vllm:request_success_total{.*finished_reason="abort"} //p'
}

# waits up to the scaled limit for a background job; its exit status
wait_job() {
    local pid=$1 end=$((SECONDS + $(scaled 30)))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < end)); do sleep 0.05; done
    kill -0 "$pid" 2>/dev/null && { kill -KILL "$pid"; echo "job $pid did not end in time" >&2; }
    wait "$pid"
}

echo "== usage"
check "--help" 0 "" "$ctl" --help
expect "--help lists the commands and exit statuses" bash -c "grep -q '^Commands:' '$tmp/out' && grep -q 'reset-prefix-cache' '$tmp/out' && grep -q '130' '$tmp/out' && grep -q '^  75 ' '$tmp/out'"
check "--version" 0 "" "$ctl" --version
expect "--version prints the version" grep -qE '^asyncllmctl [0-9]' "$tmp/out"
for command in generate chat abort pause resume sleep wake-up rpc reset-prefix-cache drain profile tokenize detokenize health status list metrics; do
    check "$command --help" 0 "" "$ctl" "$command" --help
done
check "no command" 2 "no command given" "$ctl"
check "unknown command" 2 "unknown command 'frob'" "$ctl" frob
check "unknown option" 2 "unknown option --bogus" "$ctl" generate --bogus hi
check "missing value" 2 "option --max-tokens needs a value" "$ctl" generate hi --max-tokens
check "bad number" 2 "--temperature takes a number, got 'warm'" "$ctl" generate --temperature warm hi
check "bad integer" 2 "--max-tokens takes an integer, got '1.5'" "$ctl" generate --max-tokens 1.5 hi
check "bad token list" 2 "--prompt-token-ids takes comma-separated integers" "$ctl" generate --prompt-token-ids 1,x
check "bad logit bias" 2 "--logit-bias takes TOKEN=BIAS" "$ctl" generate --logit-bias 12 hi
check "bad output kind" 2 "--output-kind takes delta, cumulative or final" "$ctl" generate --output-kind all hi
check "bad --slo" 2 "--slo takes a number, got 'fast'" "$ctl" generate --slo fast hi
check "bad --ttft-slo" 2 "--ttft-slo takes a number, got '1s'" "$ctl" generate --ttft-slo 1s hi
check "--latency-sensitive takes no value" 2 "" "$ctl" generate --latency-sensitive=yes hi
check "two prompts" 2 "quote a prompt of several words" "$ctl" generate one two
check "token ids and a prompt" 2 "--prompt-token-ids is the whole prompt" "$ctl" generate --prompt-token-ids 1,2 hi
check "bad bus" 2 "--bus takes system or user" "$ctl" --bus session status
check "socket and bus" 2 "choose one" "$ctl" --socket "$tmp/x" --bus user status
check "global option after the command" 2 "--socket goes before the command" "$ctl" status --socket "$tmp/x"
check "bad pause mode" 2 "--mode takes abort, wait or keep" "$ctl" pause --mode later
check "bad sleep level" 2 "--level takes 1 or 2" "$ctl" sleep --level 3
check "bad wake-up tag" 2 "'brain' is neither" "$ctl" wake-up --tags weights,brain
check "rpc without a method" 2 "takes METHOD" "$ctl" rpc
check "rpc with bad JSON" 2 "the arguments are not JSON" "$ctl" rpc ping '{bad'
check "abort without an id" 2 "missing argument" "$ctl" abort
check "detokenize without ids" 2 "needs token ids" "$ctl" detokenize
check "detokenize of a word" 2 "'one' is not a token id" "$ctl" detokenize 1 one
check "tokenize of two texts" 2 "quote a text of several words" "$ctl" tokenize one two
check "profile of neither" 2 "takes start or stop, got 'go'" "$ctl" profile go
check "drain with a timeout of 0" 2 "--timeout takes seconds, more than 0" "$ctl" drain --timeout 0
check "rpc --timeout over D-Bus" 2 "--timeout is the socket's" "$ctl" --bus user rpc --timeout 1 ping
check "status with an argument" 2 "takes no arguments" "$ctl" status now
check "--id over D-Bus" 2 "--id does not go with --bus" "$ctl" --bus user generate --id x hi

echo "== cannot connect (exit 3)"
check "missing socket" 3 "cannot connect to $tmp/none.sock: the socket does not exist" "$ctl" --socket "$tmp/none.sock" status
expect "says how to start the daemon" grep -qF "systemctl start asyncllmd.socket" "$tmp/err"
check "\$ASYNCLLM_SOCKET is used" 3 "$tmp/env.sock" env ASYNCLLM_SOCKET="$tmp/env.sock" "$ctl" health
if command -v python3 >/dev/null; then
    python3 -c "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])" "$tmp/stale.sock"
    check "nobody listening" 3 "nobody listens on it" "$ctl" --socket "$tmp/stale.sock" generate hi
fi
check "no bus" 3 "cannot connect to the user bus" env DBUS_SESSION_BUS_ADDRESS="unix:path=$tmp/nobus" "$ctl" --bus user status

# The daemon under test: on its socket and, when dbus-daemon is there, on a private user bus.
# Engine steps stall while $tmp/stall exists, for health's "stalled".
. "$(dirname "$0")/private-bus.sh"
start_private_bus "$tmp/bus" || echo "SKIP: no dbus-daemon, the --bus checks are not run"
sock=$tmp/asyncllmd.sock
export DBUS_SESSION_BUS_ADDRESS=${bus_address:-unix:path=$tmp/nobus}
ASYNCLLMD_FAULT_STALL_MS=$((3000 * slowdown)) ASYNCLLMD_FAULT_STALL_FILE=$tmp/stall \
    start_daemon "$tmp/daemon.log" --socket "$sock" --health-stall-timeout "$(scaled 1)" ${bus_address:+--bus user}
if ! wait_ready "$sock"; then
    echo "FAIL: asyncllmd did not start: $(cat "$tmp/daemon.log")"
    exit 1
fi
S=(--socket "$sock")

echo "== generate"
check "greedy" 0 "" "$ctl" "${S[@]}" generate --temperature 0 --max-tokens 8 "The capital of France is"
expect "greedy says Paris" out_has "Paris"
check "\$ASYNCLLM_SOCKET" 0 "" env ASYNCLLM_SOCKET="$sock" "$ctl" generate --temperature 0 --max-tokens 8 "The capital of France is"
expect "through \$ASYNCLLM_SOCKET too" out_has "Paris"
cp "$tmp/out" "$tmp/greedy"
# (this greedy text ends in a word: a newline at the end would be asyncllmctl's)
expect "no newline added when stdout is not a terminal" test -n "$(tail -c 1 "$tmp/greedy")"
for kind in cumulative final; do
    check "--output-kind $kind" 0 "" "$ctl" "${S[@]}" generate --output-kind "$kind" --temperature 0 --max-tokens 8 "The capital of France is"
    expect "--output-kind $kind prints the same text" cmp -s "$tmp/out" "$tmp/greedy"
done
check "seeded run 1" 0 "" "$ctl" "${S[@]}" generate --seed 1234 --temperature 1 --max-tokens 16 "Once upon a time"
cp "$tmp/out" "$tmp/seeded"
check "seeded run 2" 0 "" "$ctl" "${S[@]}" generate --seed 1234 --temperature 1 --max-tokens 16 "Once upon a time"
expect "the same seed gives the same text" cmp -s "$tmp/out" "$tmp/seeded"
check "--stop" 0 "" "$ctl" "${S[@]}" generate --temperature 0 --max-tokens 12 --stop . "The capital of France is"
expect "the text ends before the stop string" bash -c "[[ \$(cat '$tmp/out') == ' Paris' ]]"
check "-n 2 --json" 0 "" "$ctl" "${S[@]}" generate -n 2 --seed 5 --max-tokens 4 --json "Hello"
expect "--json: one finished line" bash -c "[[ \$(grep -c '\"finished\":true' '$tmp/out') == 1 ]]"
expect "--json: both completions" grep -qF '"index":1' "$tmp/out"
expect "--json: every line is an output of the request" bash -c "! grep -vq '^{\"id\":\"c1\",\"outputs\":' '$tmp/out'"
check "-n 2 as text" 0 "" "$ctl" "${S[@]}" generate -n 2 --seed 5 --max-tokens 4 "Hello"
expect "-n 2: each completion labelled" bash -c "grep -qx -- '--- completion 0 ---' '$tmp/out' && grep -qx -- '--- completion 1 ---' '$tmp/out'"
check "--chat --system" 0 "" "$ctl" "${S[@]}" generate --chat --system "Answer in one word." --temperature 0 --max-tokens 8 --json "What is the capital of France?"
expect "--chat renders the template (a longer prompt)" bash -c "grep -qE '\"prompt_tokens\":[0-9]{2,}' '$tmp/out'"
printf 'The capital of France is\n' >"$tmp/prompt"
check "prompt from stdin with -" 0 "" bash -c "'$ctl' --socket '$sock' generate --temperature 0 --max-tokens 8 - <'$tmp/prompt'"
expect "stdin prompt (trailing newline dropped) gives the same text" cmp -s "$tmp/out" "$tmp/greedy"
check "prompt from stdin without an argument" 0 "" bash -c "'$ctl' --socket '$sock' generate --temperature 0 --max-tokens 8 <'$tmp/prompt'"
expect "the same again" cmp -s "$tmp/out" "$tmp/greedy"
# prompts too big for the daemon: refused with a message that names the limit, and the
# daemon serves the next request
python3 -c "print('word ' * 2000000)" >"$tmp/huge"
check "a 10 MB prompt from stdin" 1 "max-line-bytes" bash -c "'$ctl' --socket '$sock' generate --max-tokens 4 - <'$tmp/huge'"
head -c 300000 /dev/zero | tr '\0' 'x' | sed 's/x/x /g' >"$tmp/long"
check "a prompt longer than max_model_len" 1 "max_model_len" bash -c "'$ctl' --socket '$sock' generate --max-tokens 4 - <'$tmp/long'"
check "served after both" 0 "" bash -c "'$ctl' --socket '$sock' generate --temperature 0 --max-tokens 8 - <'$tmp/prompt'"
expect "the same text after both" cmp -s "$tmp/out" "$tmp/greedy"
check "--prompt-token-ids" 0 "" "$ctl" "${S[@]}" generate --prompt-token-ids 504,3575,282 --temperature 0 --max-tokens 4 --json
expect "three prompt tokens" grep -qF '"prompt_tokens":3' "$tmp/out"
check "every sampling flag" 0 "" "$ctl" "${S[@]}" generate --json --max-tokens 6 --min-tokens 2 --temperature 0.7 \
    --top-p 0.9 --top-k 40 --min-p 0.05 --seed 3 --stop "zzz" --stop "yyy" --stop-token-id 2 --include-stop-str-in-output \
    --ignore-eos --logprobs 2 --prompt-logprobs 1 --presence-penalty 0.5 --frequency-penalty 0.5 \
    --repetition-penalty 1.1 --logit-bias 28=-100,29=-5 --logit-bias '{"30": -100}' --allowed-token-ids 260,281,284 \
    --no-skip-special-tokens --priority 1 --latency-sensitive --slo 0.5 --id flags1 "Once upon a time"
expect "logprobs come back" grep -qF '"logprobs":[[{' "$tmp/out"
expect "--id names the request" grep -qF '"id":"flags1"' "$tmp/out"
check "the scheduling class reaches the daemon" 0 "" "$ctl" "${S[@]}" generate --json --latency-sensitive --slo 0.5 \
    --ttft-slo 2 --max-tokens 4 --temperature 0 "The capital of France is"
expect "a latency-sensitive request finishes" grep -qF '"finished":true' "$tmp/out"
check "best-effort with SLOs" 0 "" "$ctl" "${S[@]}" generate --slo 0.05 --ttft-slo 0.5 --max-tokens 2 "Hi"
expect "only the allowed tokens come" bash -c "! grep -oE '\"token_ids\":\\[[0-9,]*\\]' '$tmp/out' | grep -oE '[0-9]+' | grep -qvxE '260|281|284'"

echo "== the tokenizer and the drain"
check "tokenize" 0 "" "$ctl" "${S[@]}" tokenize "The capital of France is"
cp "$tmp/out" "$tmp/ids"
check "tokenize from stdin" 0 "" bash -c "echo 'The capital of France is' | '$ctl' --socket '$sock' tokenize"
expect "the same ids from stdin" cmp -s "$tmp/out" "$tmp/ids"
check "the ids as a prompt" 0 "" "$ctl" "${S[@]}" generate --prompt-token-ids "$(tr ' ' , <"$tmp/ids")" --temperature 0 \
    --max-tokens 8
expect "give the text of the prompt" cmp -s "$tmp/out" "$tmp/greedy"
check "detokenize" 0 "" "$ctl" "${S[@]}" detokenize $(cat "$tmp/ids")
expect "the text back" test "$(cat "$tmp/out")" = "The capital of France is"
check "detokenize out of range" 1 "out of range" "$ctl" "${S[@]}" detokenize 99999999
check "drain with nothing in flight" 0 "" "$ctl" "${S[@]}" drain --timeout 5
check "profile without the daemon's profile-dir" 1 "set profile-dir" "$ctl" "${S[@]}" profile start
"$ctl" "${S[@]}" generate --id drain1 --ignore-eos --max-tokens 900 "Once upon a time" >/dev/null 2>&1 &
job=$!
if wait_list "/drain1" "${S[@]}"; then
    check "drain times out while a request runs" 124 "1 request still in flight after 0.1 s" "$ctl" "${S[@]}" drain --timeout 0.1
    check "rpc within its timeout" 0 "" "$ctl" "${S[@]}" rpc --timeout 60 ping
    "$ctl" "${S[@]}" abort "$("$ctl" "${S[@]}" list | grep /drain1)"
    check "drain once it ends" 0 "" "$ctl" "${S[@]}" drain --timeout 60
else
    fail "list never showed the request: $("$ctl" "${S[@]}" list 2>&1)"
fi
wait_job "$job"

echo "== the daemon refuses (exit 1)"
check "invalid temperature" 1 "temperature must be in [0, 2]" "$ctl" "${S[@]}" generate --temperature -1 hi
check "invalid --slo" 1 "slo must be a number of seconds per output token, more than 0 and at most 3600, got -1" \
    "$ctl" "${S[@]}" generate --latency-sensitive --slo -1 hi
check "invalid --ttft-slo" 1 "ttft_slo must be a number of seconds to the first token, more than 0 and at most 3600, got 7200" \
    "$ctl" "${S[@]}" generate --ttft-slo 7200 hi
check "chat goes on after a refused turn" 0 "slo must be" bash -c "printf 'hi\\n' | '$ctl' --socket '$sock' chat --slo 0"
check "rpc unknown method" 1 "nope" "$ctl" "${S[@]}" rpc nope
check "abort unknown id" 1 "no request nope is in flight" "$ctl" "${S[@]}" abort nope

echo "== abort from a second asyncllmctl"
"$ctl" "${S[@]}" generate --id long1 --ignore-eos --max-tokens 900 "Once upon a time" >"$tmp/long.out" 2>"$tmp/long.err" &
job=$!
if wait_list "/long1" "${S[@]}"; then
    pass "list shows the request as SERIAL/ID"
    check "abort SERIAL/ID" 0 "" "$ctl" "${S[@]}" abort "$("$ctl" "${S[@]}" list | grep /long1)"
else
    fail "list never showed the request: $("$ctl" "${S[@]}" list 2>&1)"
fi
wait_job "$job"
rc=$?
expect "the aborted generate exits 1" test "$rc" -eq 1
expect "and says it was aborted" grep -qF "the request was aborted in the daemon" "$tmp/long.err"

echo "== Ctrl-C and SIGTERM abort the request in the daemon"
# Job control gives the background job its own process group, where SIGINT is not ignored.
set -m
for signal in INT TERM; do
    want=$([[ $signal == INT ]] && echo 130 || echo 143)
    before=$(aborted_count "${S[@]}")
    "$ctl" "${S[@]}" generate --ignore-eos --max-tokens 900 "Once upon a time" >"$tmp/sig.out" 2>"$tmp/sig.err" &
    job=$!
    wait_list "/" "${S[@]}" || fail "SIG$signal: the request never showed in list"
    kill -"$signal" "$job"
    wait_job "$job"
    rc=$?
    expect "SIG$signal: exit $want (got $rc)" test "$rc" -eq "$want"
    expect "SIG$signal: no request left in flight" wait_list "" "${S[@]}"
    expect "SIG$signal: the daemon counted an abort" test "$(aborted_count "${S[@]}")" -eq $((before + 1))
done
set +m

echo "== control"
check "pause" 0 "" "$ctl" "${S[@]}" pause
check "status while paused" 0 "" "$ctl" "${S[@]}" status --json
expect "state is paused" grep -qF '"state":"paused"' "$tmp/out"
"$ctl" "${S[@]}" generate --temperature 0 --max-tokens 4 "The capital of France is" >"$tmp/held.out" 2>&1 &
job=$!
sleep 1
expect "a request waits while paused" kill -0 "$job"
check "resume" 0 "" "$ctl" "${S[@]}" resume
wait_job "$job"
expect "the waiting request then finishes" test $? -eq 0
check "pause --mode wait --keep-cache" 0 "" "$ctl" "${S[@]}" pause --mode wait --keep-cache
check "pause --mode keep" 0 "" "$ctl" "${S[@]}" pause --mode keep
check "resume again" 0 "" "$ctl" "${S[@]}" resume
check "sleep" 0 "" "$ctl" "${S[@]}" sleep
check "status while sleeping" 0 "" "$ctl" "${S[@]}" status
expect "state is sleeping" grep -qE '^State: +sleeping' "$tmp/out"
check "wake-up --tags kv_cache" 0 "" "$ctl" "${S[@]}" wake-up --tags kv_cache
check "sleep --level 2" 0 "" "$ctl" "${S[@]}" sleep --level 2
check "wake-up" 0 "" "$ctl" "${S[@]}" wake-up
check "generate after waking up" 0 "" "$ctl" "${S[@]}" generate --temperature 0 --max-tokens 8 "The capital of France is"
expect "the same text as before" cmp -s "$tmp/out" "$tmp/greedy"
check "rpc ping" 0 "" "$ctl" "${S[@]}" rpc ping
expect "pong" grep -qx '\["pong"\]' "$tmp/out"
check "rpc with arguments" 0 "" "$ctl" "${S[@]}" rpc reset_prefix_cache '{"preempt": true}'
check "rpc kv_cache_info" 0 "" "$ctl" "${S[@]}" rpc kv_cache_info
expect "kv_cache_info has its blocks" grep -qF '"num_blocks":' "$tmp/out"
check "reset-prefix-cache" 0 "" "$ctl" "${S[@]}" reset-prefix-cache
check "reset-prefix-cache --preempt" 0 "" "$ctl" "${S[@]}" reset-prefix-cache --preempt

echo "== status and friends"
check "health" 0 "" "$ctl" "${S[@]}" health
expect "health says ok" grep -qx ok "$tmp/out"
check "health --json" 0 "" "$ctl" "${S[@]}" health --json
expect "health --json" grep -qF '{"healthy":true,"status":"ok"}' "$tmp/out"
check "status" 0 "" "$ctl" "${S[@]}" status
for row in "Model:" "State:" "Running:" "Waiting:" "KV cache usage:" "Prefix cache hit rate:" "Memory:" "Prompt tokens/s:" "Generation tokens/s:"; do
    expect "status shows $row" grep -qF "$row" "$tmp/out"
done
expect "status shows the policy" grep -qE "^Scheduling policy: +fcfs$" "$tmp/out"
expect "status shows no SLO rows under fcfs" bash -c "! grep -q 'SLO admission' '$tmp/out'"
expect "status has no colour when stdout is not a terminal" bash -c "! grep -q $'\\033' '$tmp/out'"
check "status --json" 0 "" "$ctl" "${S[@]}" status --json
for key in model state num_requests_running num_requests_waiting kv_cache_usage prefix_cache_hit_rate \
    prompt_tokens_per_second generation_tokens_per_second requests_in_flight scheduling_policy slo_rejected slo_demoted \
    step_model_samples step_model_error_p50 step_model_error_p99 memory_weights_bytes memory_kv_cache_bytes \
    device_memory_free_bytes device_memory_total_bytes; do
    expect "status --json has $key" grep -qF "\"$key\":" "$tmp/out"
done
check "list" 0 "" "$ctl" "${S[@]}" list
expect "nothing in flight" test ! -s "$tmp/out"
check "list --json" 0 "" "$ctl" "${S[@]}" list --json
expect "list --json" grep -qxF '{"requests":[]}' "$tmp/out"
check "metrics" 0 "" "$ctl" "${S[@]}" metrics
expect "Prometheus text" grep -q '^vllm:num_requests_running{' "$tmp/out"
for metric in 'asyncllm_slo_rejected_total{' 'asyncllm_slo_demoted_total{' 'asyncllm_step_model_error{.*quantile="0.5"}' \
    'asyncllm_step_model_error{.*quantile="0.99"}'; do
    expect "metrics has $metric" grep -q "^$metric" "$tmp/out"
done

echo "== health: stalled (exit 5)"
touch "$tmp/stall"
"$ctl" "${S[@]}" generate --max-tokens 2 "Hi" >/dev/null 2>&1 &
job=$!
# health turns stalled once the hanging first step (3 s) outlasts the stall timeout (1 s)
end=$((SECONDS + $(scaled 3)))
until timeout "$(scaled 60)" "$ctl" "${S[@]}" health >/dev/null 2>&1; [[ $? -eq 5 ]] || ((SECONDS >= end)); do sleep 0.1; done
check "health while the engine stalls" 5 "" "$ctl" "${S[@]}" health
expect "health says stalled" grep -q '^stalled' "$tmp/out"
rm -f "$tmp/stall"
wait_job "$job"

if [[ -n $bus_address ]]; then
    echo "== over D-Bus (--bus user)"
    B=(--bus user)
    check "bus: generate" 0 "" "$ctl" "${B[@]}" generate --temperature 0 --max-tokens 8 "The capital of France is"
    expect "bus: the same text as on the socket" cmp -s "$tmp/out" "$tmp/greedy"
    check "bus: generate --json --chat" 0 "" "$ctl" "${B[@]}" generate --json --chat --system "Be brief." --temperature 0 --max-tokens 4 "Hi"
    expect "bus: --json lines" grep -qF '"finished":true' "$tmp/out"
    check "bus: --prompt-token-ids and request fields" 0 "" "$ctl" "${B[@]}" generate --json --prompt-token-ids 504,3575,282 \
        --temperature 0 --max-tokens 4 --stop zzz --logit-bias 28=-100 --priority 1 --latency-sensitive --slo 1
    expect "bus: three prompt tokens" grep -qF '"prompt_tokens":3' "$tmp/out"
    check "bus: invalid params" 1 "temperature must be in [0, 2]" "$ctl" "${B[@]}" generate --temperature 3 hi
    check "bus: tokenize" 0 "" "$ctl" "${B[@]}" tokenize "The capital of France is"
    expect "bus: the socket's ids" cmp -s "$tmp/out" "$tmp/ids"
    check "bus: detokenize" 0 "" "$ctl" "${B[@]}" detokenize $(cat "$tmp/ids")
    expect "bus: the text back" test "$(cat "$tmp/out")" = "The capital of France is"
    check "bus: detokenize out of range" 1 "out of range" "$ctl" "${B[@]}" detokenize 99999999
    check "bus: drain" 0 "" "$ctl" "${B[@]}" drain --timeout 5
    check "bus: the scheduling class" 0 "" "$ctl" "${B[@]}" generate --latency-sensitive --slo 0.5 --ttft-slo 2 \
        --max-tokens 2 "Hi"
    check "bus: invalid --slo" 1 "slo must be a number of seconds per output token, more than 0 and at most 3600, got 0" \
        "$ctl" "${B[@]}" generate --slo 0 hi
    check "bus: stats carry the policy" 0 "" "$ctl" "${B[@]}" status --json
    expect "bus: scheduling_policy and the slo counters" bash -c \
        "grep -qF '\"scheduling_policy\":\"fcfs\"' '$tmp/out' && grep -qF '\"slo_rejected\":0' '$tmp/out'"
    check "bus: status" 0 "" "$ctl" "${B[@]}" status
    expect "bus: status shows the model" grep -qF "Model:" "$tmp/out"
    check "bus: pause" 0 "" "$ctl" "${B[@]}" pause --mode abort
    check "bus: status --json while paused" 0 "" "$ctl" "${B[@]}" status --json
    expect "bus: paused" grep -qF '"state":"paused"' "$tmp/out"
    check "bus: resume" 0 "" "$ctl" "${B[@]}" resume
    check "bus: health" 0 "" "$ctl" "${B[@]}" health
    check "bus: sleep" 0 "" "$ctl" "${B[@]}" sleep --level 1
    check "bus: wake-up" 0 "" "$ctl" "${B[@]}" wake-up
    check "bus: rpc ping" 0 "" "$ctl" "${B[@]}" rpc ping
    expect "bus: pong" grep -qx '\["pong"\]' "$tmp/out"
    check "bus: reset-prefix-cache" 0 "" "$ctl" "${B[@]}" reset-prefix-cache --preempt
    check "bus: metrics" 0 "" "$ctl" "${B[@]}" metrics
    expect "bus: Prometheus text" grep -q '^vllm:num_requests_running{' "$tmp/out"
    "$ctl" "${S[@]}" metrics >"$tmp/socket-metrics" 2>&1
    expect "bus: the same metrics text as the socket's" cmp -s "$tmp/out" "$tmp/socket-metrics"
    check "bus: abort unknown" 1 "no request 9/bus9 is in flight" "$ctl" "${B[@]}" abort 9/bus9
    set -m
    "$ctl" "${B[@]}" generate --ignore-eos --max-tokens 900 "Once upon a time" >"$tmp/sig.out" 2>"$tmp/sig.err" &
    job=$!
    if wait_list "/bus" "${B[@]}"; then
        pass "bus: list shows the request"
        kill -INT "$job"
        wait_job "$job"
        rc=$?
        expect "bus: SIGINT exits 130 (got $rc)" test "$rc" -eq 130
        expect "bus: no request left in flight" wait_list "" "${B[@]}"
    else
        fail "bus: list never showed the request"
        kill "$job"
    fi
    set +m
fi

echo "== the slo policy: an overloaded refusal (exit 75)"
start_daemon "$tmp/slo.log" --socket "$tmp/slo.sock" --scheduling-policy slo --slo-admission reject
if wait_ready "$tmp/slo.sock"; then
    SLO=(--socket "$tmp/slo.sock")
    # the step-time model judges nothing before it has seen a few steps; before it has
    # timed steps of latency-sensitive decodes alone it refuses only a time per token below
    # every step it ran
    check "slo: best-effort steps to learn from" 0 "" "$ctl" "${SLO[@]}" generate --ignore-eos --max-tokens 40 "Hi"
    check "slo: a latency-sensitive request within its SLOs" 0 "" "$ctl" "${SLO[@]}" generate --latency-sensitive \
        --slo 60 --ttft-slo 60 --ignore-eos --max-tokens 24 "Hi"
    check "slo: an SLO no step can meet is refused" 75 "retry after" "$ctl" "${SLO[@]}" generate --latency-sensitive \
        --slo 0.000001 --max-tokens 2 "Hi"
    expect "slo: the message is the daemon's" grep -qF "overloaded" "$tmp/err"
    check "slo: --json shows the error line" 75 "" "$ctl" "${SLO[@]}" generate --json --latency-sensitive \
        --slo 0.000001 --max-tokens 2 "Hi"
    expect "slo: code overloaded with retry_after" grep -qE '"code":"overloaded".*"retry_after":[0-9.]+' "$tmp/out"
    check "slo: best-effort with the same SLO runs" 0 "" "$ctl" "${SLO[@]}" generate --slo 0.000001 --max-tokens 2 "Hi"
    check "slo: chat goes on after an overloaded turn" 0 "retry after" bash -c \
        "printf 'hi\\n' | '$ctl' --socket '$tmp/slo.sock' chat --latency-sensitive --slo 0.000001 --max-tokens 2"
    check "slo: status" 0 "" "$ctl" "${SLO[@]}" status
    expect "slo: status shows the policy" grep -qE "^Scheduling policy: +slo$" "$tmp/out"
    expect "slo: status counts the refusals" grep -qE "^SLO admission: +3 refused, 0 demoted" "$tmp/out"
    expect "slo: status shows the step model" grep -qE "^Step model error: +[0-9.]+% median" "$tmp/out"
    check "slo: metrics" 0 "" "$ctl" "${SLO[@]}" metrics
    expect "slo: asyncllm_slo_rejected_total counts them" grep -qE '^asyncllm_slo_rejected_total\{.*\} 3$' "$tmp/out"
else
    fail "the slo asyncllmd did not start: $(cat "$tmp/slo.log")"
fi

echo "== engine dead (exit 4)"
ASYNCLLMD_FAULT_FAIL_STEP=2 start_daemon "$tmp/dead.log" --socket "$tmp/dead.sock"
if wait_ready "$tmp/dead.sock"; then
    check "generate when the engine fails" 4 "engine" "$ctl" --socket "$tmp/dead.sock" generate --max-tokens 8 "Hello there"
else
    fail "the second asyncllmd did not start: $(cat "$tmp/dead.log")"
fi

echo "$passed passed, $failed failed"
if [[ $failed -gt 0 ]]; then
    echo "--- daemon log"
    tail -n 40 "$tmp/daemon.log"
fi
[[ $failed -eq 0 ]]
