#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The real daemon when memory or threads run out (tests/fault-preload.c, loaded with
# LD_PRELOAD): the N-th allocation fails, for N across the whole start-up and the first
# connections and requests; the N-th allocation of at least 1 MiB (weights, KV pool, scratch)
# fails; the N-th thread cannot be created. Each time the daemon either exits 1 with a line
# that names what it could not get, or serves: the greedy answer is the reference's bit for
# bit, or the request fails with an error; it never dies by a signal, never hangs, and a
# SIGTERM ends it. Then accept() fails with ENOMEM for 3 s: the waiting client is served
# after, the shortage logged once, no spinning. json-c's own allocations are spared (docs/reliability.md: json-c 0.16
# crashes or drops members when they fail). Exit 77 in a sanitizer build (its allocator
# cannot be interposed) or without the interposer.
set -u
. "$(dirname "$0")/daemon-test-lib.sh"
preload=${ASYNCLLM_FAULT_PRELOAD:-}
[[ -n $preload && -f $preload ]] || { echo "SKIP: no fault interposer (ASYNCLLM_FAULT_PRELOAD)"; exit 77; }
if ldd "$daemon" 2>/dev/null | grep -qE 'libasan|libtsan'; then
    echo "SKIP: a sanitizer's allocator cannot be interposed; this test runs in the plain build"
    exit 77
fi

# serve OUT ARGS...: the daemon (VAR=N settings in ARGS first) from start to SIGTERM, with one
# greedy request if it came up. OUT.verdict says what happened.
serve() {
    local out=$1 pid ready=0 end gen=- status
    shift
    rm -f "$out.sock"
    env ASYNCLLM_FAIL_ALLOC_SPARE=libjson-c "$@" LD_PRELOAD="$preload" \
        "$daemon" --model "$model" --threads 2 --bus none --socket "$out.sock" >"$out.log" 2>&1 &
    pid=$!
    end=$((SECONDS + $(scaled 60)))
    while ((SECONDS < end)) && kill -0 "$pid" 2>/dev/null; do
        "$ctl" --socket "$out.sock" health >/dev/null 2>&1 && { ready=1; break; }
        sleep 0.05
    done
    if ((ready)); then
        timeout "$(scaled 60)" "$ctl" --socket "$out.sock" generate --temperature 0 --max-tokens 8 "$prompt" \
            >"$out.gen" 2>&1 </dev/null
        gen=$?
        kill -TERM "$pid" 2>/dev/null
    elif kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid"
        echo "neither served nor exited within $(scaled 60) s" >"$out.verdict"
        wait "$pid"
        return
    fi
    end=$((SECONDS + $(scaled 60)))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < end)); do sleep 0.05; done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid"
        echo "did not end on SIGTERM" >"$out.verdict"
        wait "$pid"
        return
    fi
    wait "$pid"
    status=$?
    local said
    said=$(grep -vE '^asyncllmd: (serving|chat template|listening|Terminated)' "$out.log" | tail -n 1)
    if ((status > 128)); then
        echo "died by signal $((status - 128)): $said" >"$out.verdict"
    elif ((ready == 0)); then
        if ((status == 1)) && grep -qiE 'memory|allocate|cannot start' <<<"$said"; then
            echo "ok" >"$out.verdict"
        else
            echo "exited $status before serving, saying '$said'" >"$out.verdict"
        fi
    elif [[ $gen == 0 ]] && ! cmp -s "$out.gen" "$tmp/reference"; then
        echo "served a different answer: $(head -c 200 "$out.gen")" >"$out.verdict"
    elif ! [[ $gen =~ ^(0|1|3|4|75)$ ]]; then # an error, no connection, the engine dead, overloaded
        echo "the request ended with status $gen: $(head -c 200 "$out.gen")" >"$out.verdict"
    elif ((status != 0)) && ! grep -qiE 'memory|allocate' <<<"$said"; then
        echo "exited $status after serving, saying '$said'" >"$out.verdict"
    else
        echo "ok" >"$out.verdict"
    fi
}

prompt="The capital of France is"
# The reference, and how many allocations a start, one request and a stop make.
: >"$tmp/reference"
serve "$tmp/count" ASYNCLLM_FAIL_COUNT_FILE="$tmp/counts"
cp "$tmp/count.gen" "$tmp/reference"
serve "$tmp/count" ASYNCLLM_FAIL_COUNT_FILE="$tmp/counts"
read -r _ allocations _ threads <"$tmp/counts"
expect "the daemon serves under the interposer ($allocations allocations, $threads threads)" \
    test "$(cat "$tmp/count.verdict")" = ok -a "$allocations" -gt 50
serve "$tmp/big" ASYNCLLM_FAIL_COUNT_FILE="$tmp/big-counts" ASYNCLLM_FAIL_ALLOC_MIN=1048576
read -r _ big _ _ <"$tmp/big-counts"

# sweep NAME VAR N...: each N a run; the runs that went wrong, named
sweep() {
    local name=$1 var=$2 n bad=()
    shift 2
    for n in "$@"; do
        serve "$tmp/run" "$var=$n" ${extra:+"$extra"}
        [[ $(cat "$tmp/run.verdict") == ok ]] || bad+=("N=$n: $(cat "$tmp/run.verdict")")
    done
    if ((${#bad[@]} == 0)); then
        pass "$name: $# runs, each an exit naming the shortage or a correct answer"
    else
        fail "$name: ${#bad[@]} of $# runs went wrong: $(printf '%s; ' "${bad[@]:0:5}")"
    fi
}

# Every one of the first 30, then every k-th so that about 50 runs cover the rest: the
# start, the connection, the request, its outputs and the stop.
stride=$(((allocations - 30) / 50 + 1))
extra=
sweep "the N-th allocation fails" ASYNCLLM_FAIL_ALLOC_AT $(seq 1 30) $(seq 31 "$stride" "$allocations")
extra=ASYNCLLM_FAIL_ALLOC_MIN=1048576
sweep "the N-th allocation of 1 MiB or more fails ($big of them)" ASYNCLLM_FAIL_ALLOC_AT $(seq 1 "$big")
extra=
sweep "the N-th thread cannot start ($threads of them)" ASYNCLLM_FAIL_THREAD_AT $(seq 1 "$threads")

# accept() failing with ENOMEM for 3 s while a client waits: it is served once accept works
# again; the shortage is logged once; the daemon pauses its listening socket rather than
# spin on it (spinning would burn the whole 3 s of a core).
rm -f "$tmp/a.sock"
ASYNCLLM_FAIL_ACCEPT_FILE="$tmp/no-accept" LD_PRELOAD="$preload" \
    "$daemon" --model "$model" --threads 2 --bus none --socket "$tmp/a.sock" >"$tmp/a.log" 2>&1 &
pid=$!
pids+=("$pid")
if wait_ready "$tmp/a.sock"; then
    cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }
    touch "$tmp/no-accept"
    timeout "$(scaled 60)" "$ctl" --socket "$tmp/a.sock" generate --temperature 0 --max-tokens 8 "$prompt" \
        >"$tmp/a.gen" 2>&1 </dev/null &
    client=$!
    sleep 0.5
    before=$(cpu_ticks)
    sleep 3
    ticks=$(($(cpu_ticks) - before))
    expect "the client waits while accept() fails" kill -0 "$client"
    rm -f "$tmp/no-accept"
    wait "$client"
    rc=$?
    expect "and is served once it works (exit $rc)" cmp -s "$tmp/a.gen" "$tmp/reference"
    expect "the shortage is logged once" test "$(grep -c 'cannot accept connections' "$tmp/a.log")" -eq 1
    expect "and its end" grep -q 'accepting connections again' "$tmp/a.log"
    # ticks are 1/100 s: a spinning loop takes some 300 in 3 s
    expect "no spinning meanwhile ($ticks ticks in 3 s)" test "$ticks" -lt 30
else
    fail "asyncllmd did not start under the accept fault: $(tail -n 3 "$tmp/a.log")"
fi

echo "$passed passed, $failed failed"
((failed == 0))
