#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# asyncllmd serving a synthetic model of each architecture (llama with Llama 3's rope_freqs,
# qwen2 with YaRN, qwen3, phi3 with its fused tensors and rope factors, mistral3 with YaRN and
# the attention temperature), Q4_K weights and the family's real vocabulary, through
# asyncllmctl over the socket: greedy outputs alone; the same bits batched together, from the
# prefix cache, prefilled 7 tokens a step, and preempted in a KV cache too small for the
# batch; abort. The models come from tests/write-synthetic-model, the vocabularies from
# tests/vocab-fixtures-lib.sh.
set -u
ctl=${ASYNCLLMCTL:?ASYNCLLMCTL must name the asyncllmctl binary}
daemon=${ASYNCLLMD:?ASYNCLLMD must name the asyncllmd binary}
writer=${ASYNCLLM_BUILDDIR:?ASYNCLLM_BUILDDIR must name the build tree}/tests/write-synthetic-model
. "${ASYNCLLM_SRCDIR:?ASYNCLLM_SRCDIR must name the source tree}/tests/vocab-fixtures-lib.sh"
ensure_vocabs
. "$ASYNCLLM_SRCDIR/tests/shell-test-lib.sh"

start_daemon() { # model, log, then arguments
    local model=$1 log=$2
    shift 2
    "$daemon" --model "$model" --threads 2 "$@" >"$log" 2>&1 &
    pids+=("$!")
}
stop_daemons() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
    pids=()
}

# greedy OUT SOCKET PROMPT: 80 greedy tokens with their log-probabilities; OUT holds the
# outputs (text, token ids, log-probabilities, finish reason), the request's id, metrics and
# cache counts stripped, so that the files compare bit for bit.
greedy() {
    timeout "$(scaled 120)" "$ctl" --socket "$2" generate --json --output-kind final --temperature 0 --max-tokens 80 --ignore-eos \
        --logprobs 1 "$3" >"$1.line" 2>"$1.err" </dev/null
    sed -E 's/^\{"id":"[^"]*",//; s/,"finished":.*//' "$1.line" >"$1"
}
# greedy_together OUT-PREFIX SOCKET: the three prompts in one batch, into OUT-PREFIX0..2. The
# engine is paused (its requests frozen, its cache kept) until all three wait in it, so that
# they run together however late a loaded machine starts one client.
greedy_together() {
    local jobs=() i end
    "$ctl" --socket "$2" pause --mode keep --keep-cache >/dev/null
    for i in 0 1 2; do
        greedy "$1$i" "$2" "${prompts[i]}" &
        jobs+=("$!")
    done
    end=$((SECONDS + $(scaled 30)))
    until (($("$ctl" --socket "$2" list 2>/dev/null | wc -l) == 3)) || ((SECONDS >= end)); do sleep 0.05; done
    "$ctl" --socket "$2" resume >/dev/null
    wait "${jobs[@]}"
}
same() { # NAME FILE REFERENCE
    if [[ -s $2 ]] && cmp -s "$2" "$3"; then
        pass "$1"
    else
        fail "$1: $(head -c 300 "$2") $(head -c 200 "$2.err" 2>/dev/null), wanted $(head -c 300 "$3")"
    fi
}

prompts=(
    "The lighthouse keeper wrote down the weather twice a day, the state of the tide, and every ship he could see."
    "Here is a short recipe for bread that needs only flour, water, salt and yeast, and a hot oven:"
    "In computer science, a hash table is a data structure that maps keys to values. It works by"
)

# NAME ARCHITECTURE VOCABULARY OPTIONS...: the variations each family's files carry, and the
# weight spreads of tests/make-arch-fixtures (logits a few tenths apart, not one token's
# certainty). phi3's original context, 128, is below every daemon's --max-model-len, so all
# three choose the long rope factors and their outputs compare.
untied="--embd-std 0.1 --untied --output-std 0.015"
models=(
    "llama|llama|llama-bpe|--rope-theta 500000 --rope-freqs $untied"
    "qwen2|qwen2|qwen2|--rope-theta 1000000 --rope-scaling yarn --rope-scaling-factor 4 --rope-original-context 64 $untied"
    "qwen3|qwen3|qwen2|--rope-theta 1000000 --embd-std 0.015"
    "phi3|phi3|phi-3|--rope-original-context 128 --rope-attn-factor 1.19 $untied"
    "mistral3|mistral3|llama-bpe|--rope-theta 1000000 --rope-scaling yarn --rope-scaling-factor 4 --rope-original-context 64 --yarn-log-multiplier 1 --attn-temperature-scale 0.1 $untied"
)

seed=11
for entry in "${models[@]}"; do
    IFS='|' read -r name arch vocab options <<<"$entry"
    echo "== $name"
    model=$tmp/$name.gguf
    # shellcheck disable=SC2086 # the options are words
    if ! "$writer" --arch "$arch" --vocab "$ASYNCLLM_VOCABS/ggml-vocab-$vocab.gguf" --type Q4_K --embd-type Q8_0 \
        --seed $((seed++)) --ctx 4096 --layers 8 $options "$model" 2>"$tmp/writer.err"; then
        fail "$name: write-synthetic-model: $(cat "$tmp/writer.err")"
        continue
    fi
    # A: the defaults (prefix caching on). B: prompts prefilled 7 tokens a step, no prefix
    # cache. C: the smallest KV cache, 1 MiB: 16 blocks of 16 tokens at 4 KiB a token (8
    # layers of 2 KV heads of 64 dimensions, K and V in F16), too small for three sequences of
    # some 105 tokens (7 blocks each) at once.
    A=$tmp/$name-a.sock B=$tmp/$name-b.sock C=$tmp/$name-c.sock
    start_daemon "$model" "$tmp/$name-a.log" --socket "$A" --max-model-len 512
    start_daemon "$model" "$tmp/$name-b.log" --socket "$B" --max-model-len 512 --long-prefill-token-threshold 7 \
        --no-enable-prefix-caching
    start_daemon "$model" "$tmp/$name-c.log" --socket "$C" --max-model-len 160 --kv-cache-space 1MiB \
        --no-enable-prefix-caching
    ready=1
    for d in a b c; do
        s=$tmp/$name-$d.sock
        if ! wait_ready "$s"; then
            fail "$name: asyncllmd ($d) did not start: $(tail -n 5 "$tmp/$name-$d.log")"
            ready=0
        fi
    done
    if ((ready == 0)); then
        stop_daemons
        continue
    fi
    expect "$name: the daemon names the architecture" grep -qF "): $arch, 8 layers" "$tmp/$name-a.log"

    for i in 0 1 2; do
        greedy "$tmp/$name-alone$i" "$A" "${prompts[i]}"
        expect "$name p$i: 80 tokens with their log-probabilities" \
            grep -qE '"token_ids":\[([0-9]+,){79}[0-9]+\],"cumulative_logprob":-[0-9.e-]+,"logprobs":\[\[\{' \
            "$tmp/$name-alone$i"
    done

    "$ctl" --socket "$A" reset-prefix-cache >/dev/null
    greedy_together "$tmp/$name-batched" "$A"
    for i in 0 1 2; do same "$name p$i batched with the others: the same bits" "$tmp/$name-batched$i" "$tmp/$name-alone$i"; done

    greedy "$tmp/$name-cached0" "$A" "${prompts[0]}"
    same "$name p0 again, from the prefix cache: the same bits" "$tmp/$name-cached0" "$tmp/$name-alone0"
    expect "$name: the prompt came from the cache" grep -qE '"num_cached_tokens":[1-9]' "$tmp/$name-cached0.line"

    for i in 0 1; do
        greedy "$tmp/$name-chunked$i" "$B" "${prompts[i]}"
        same "$name p$i prefilled 7 tokens a step: the same bits" "$tmp/$name-chunked$i" "$tmp/$name-alone$i"
    done

    greedy_together "$tmp/$name-preempted" "$C"
    for i in 0 1 2; do
        same "$name p$i in a KV cache too small for all three: the same bits" "$tmp/$name-preempted$i" "$tmp/$name-alone$i"
    done
    expect "$name: the small KV cache preempted ($(daemon_stat "$C" preemptions) preemptions)" test "$(daemon_stat "$C" preemptions)" -gt 0

    "$ctl" --socket "$A" generate --id long1 --ignore-eos --max-tokens 480 "${prompts[1]}" >"$tmp/long.out" 2>"$tmp/long.err" &
    job=$!
    end=$((SECONDS + $(scaled 30)))
    until "$ctl" --socket "$A" list 2>/dev/null | grep -q /long1 || ((SECONDS >= end)); do sleep 0.05; done
    "$ctl" --socket "$A" abort "$("$ctl" --socket "$A" list | grep /long1)" >/dev/null 2>&1
    end=$((SECONDS + $(scaled 30)))
    while kill -0 "$job" 2>/dev/null && ((SECONDS < end)); do sleep 0.05; done
    kill -0 "$job" 2>/dev/null && kill -KILL "$job"
    wait "$job"
    rc=$?
    expect "$name: the aborted generate exits 1 (it exited $rc)" test "$rc" -eq 1
    expect "$name: no request left in flight" test "$(daemon_stat "$A" requests_in_flight)" -eq 0
    greedy "$tmp/$name-after-abort0" "$A" "${prompts[0]}"
    same "$name p0 after the abort: the same bits" "$tmp/$name-after-abort0" "$tmp/$name-alone0"
    stop_daemons
done

echo "$passed passed, $failed failed"
((failed == 0))
