#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# asyncllmd serving Gemma 3 270M (Q4_K_M as downloaded), through asyncllmctl over the socket and
# D-Bus: greedy outputs streamed; the same bits (tokens, log-probabilities) alone, batched with
# other requests, from the prefix cache, prefilled in chunks of 7 tokens, over D-Bus, and after
# sleep and wake-up; abort; `asyncllmctl chat` equal to the Gemma turns rendered by hand and
# generated greedily; --chat-template replacing the built-in format with ChatML, and refusing a
# template that does not parse or a missing file at startup, naming the file.
set -u
ctl=${ASYNCLLMCTL:?ASYNCLLMCTL must name the asyncllmctl binary}
daemon=${ASYNCLLMD:?ASYNCLLMD must name the asyncllmd binary}
model=${ASYNCLLM_GEMMA_MODEL:?ASYNCLLM_GEMMA_MODEL must name the Gemma 3 file}
if [[ ! -f $model ]]; then
    echo "SKIP: $model is missing (scripts/fetch-model gemma3-270m fetches it; ASYNCLLM_GEMMA_MODEL names another path)"
    exit 77
fi
. "${ASYNCLLM_SRCDIR:?ASYNCLLM_SRCDIR must name the source tree}/tests/shell-test-lib.sh"

start_daemon() { # log, then arguments; the pid goes into $started
    local log=$1
    shift
    "$daemon" --model "$model" --max-model-len 1024 --threads 2 "$@" >"$log" 2>&1 &
    started=$!
    pids+=("$started")
}

# greedy OUT GLOBAL-OPTIONS... -- PROMPT: a greedy generation with log-probabilities, streamed
# (--output-kind cumulative: one line per token, the last one whole). OUT.lines is what came;
# OUT holds the last line's outputs (text, token ids, log-probabilities, finish reason): the
# request's id, metrics and cache counts stripped, so that the files compare bit for bit.
greedy() {
    local out=$1
    shift
    local opts=()
    while [[ $1 != -- ]]; do opts+=("$1"); shift; done
    shift
    timeout "$(scaled 120)" "$ctl" "${opts[@]}" generate --json --output-kind cumulative --temperature 0 \
        --max-tokens 10 --ignore-eos --logprobs 1 "$1" >"$out.lines" 2>"$out.err" </dev/null
    tail -n 1 "$out.lines" | sed -E 's/^\{"id":"[^"]*",//; s/,"finished":.*//' >"$out"
}
same() { # NAME FILE REFERENCE
    if [[ -s $2 ]] && cmp -s "$2" "$3"; then
        pass "$1"
    else
        fail "$1: $(head -c 400 "$2") $(head -c 200 "$2.err" 2>/dev/null), wanted $(head -c 400 "$3")"
    fi
}

# Prompts longer than a KV block (16 tokens), so that the prefix cache holds whole blocks.
p1="The lighthouse keeper wrote down the weather twice a day, the state of the tide, and every ship he could see on the horizon. One morning"
p2="Here is a short recipe for bread that needs only flour, water, salt and yeast, and an oven that gets hot enough:"
p3="In computer science, a hash table is a data structure that maps keys to values. It works by"

. "$(dirname "$0")/private-bus.sh"
start_private_bus "$tmp/bus" || echo "SKIP: no dbus-daemon, the D-Bus check is not run"
export DBUS_SESSION_BUS_ADDRESS=${bus_address:-unix:path=$tmp/nobus}

# A: the defaults (whole prompts in one step, prefix caching on), on the bus too.
# B: prompts prefilled 7 tokens a step, no prefix cache, and a ChatML template in place of the
# built-in Gemma turns.
cat >"$tmp/chatml.jinja" <<'EOF'
{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}
EOF
A=(--socket "$tmp/a.sock")
B=(--socket "$tmp/b.sock")
start_daemon "$tmp/a.log" "${A[@]}" ${bus_address:+--bus user}
start_daemon "$tmp/b.log" "${B[@]}" --long-prefill-token-threshold 7 --no-enable-prefix-caching \
    --chat-template "$tmp/chatml.jinja"
for d in a b; do
    if ! wait_ready "$tmp/$d.sock"; then
        echo "FAIL: asyncllmd ($d) did not start: $(cat "$tmp/$d.log")"
        exit 1
    fi
done
expect "A chats in the Gemma turns built in for gemma3" grep -qF "chat template: Gemma turns, built in" "$tmp/a.log"
expect "B chats with --chat-template's template" grep -qF "chat template: Jinja, from the template given in place of the file's" "$tmp/b.log"

echo "== alone, streamed"
for i in 1 2 3; do
    prompt=p$i
    greedy "$tmp/alone$i" "${A[@]}" -- "${!prompt}"
    expect "p$i: streamed, one line per token ($(wc -l <"$tmp/alone$i.lines") lines)" \
        test "$(wc -l <"$tmp/alone$i.lines")" -eq 10
    expect "p$i: ten tokens with their log-probabilities" \
        grep -qE '"token_ids":\[([0-9]+,){9}[0-9]+\],"cumulative_logprob":-[0-9.e-]+,"logprobs":\[\[\{' "$tmp/alone$i"
done

echo "== batched"
"$ctl" "${A[@]}" reset-prefix-cache >/dev/null
hits0=$(daemon_stat "$tmp/a.sock" prefix_cache_hits)
jobs=()
for i in 1 2 3; do
    prompt=p$i
    greedy "$tmp/batched$i" "${A[@]}" -- "${!prompt}" &
    jobs+=("$!")
done
wait "${jobs[@]}"
for i in 1 2 3; do same "p$i batched with the others: the same bits as alone" "$tmp/batched$i" "$tmp/alone$i"; done
expect "no prefix cache hits among them" test "$(daemon_stat "$tmp/a.sock" prefix_cache_hits)" -eq "$hits0"

echo "== prefix cache"
greedy "$tmp/cached1" "${A[@]}" -- "$p1"
same "p1 again, from the prefix cache: the same bits" "$tmp/cached1" "$tmp/alone1"
expect "the prompt came from the cache" grep -qE '"num_cached_tokens":[1-9]' "$tmp/cached1.lines"
expect "the daemon counted the hits" test "$(daemon_stat "$tmp/a.sock" prefix_cache_hits)" -gt "$hits0"

echo "== chunked prefill"
for i in 1 2; do
    prompt=p$i
    greedy "$tmp/chunked$i" "${B[@]}" -- "${!prompt}"
    same "p$i prefilled 7 tokens a step: the same bits" "$tmp/chunked$i" "$tmp/alone$i"
done

if [[ -n $bus_address ]]; then
    echo "== D-Bus"
    greedy "$tmp/bus1" --bus user -- "$p1"
    same "p1 over D-Bus: the same bits" "$tmp/bus1" "$tmp/alone1"
fi

echo "== abort"
"$ctl" "${A[@]}" generate --id long1 --ignore-eos --max-tokens 900 "$p2" >"$tmp/long.out" 2>"$tmp/long.err" &
job=$!
end=$((SECONDS + $(scaled 30)))
until "$ctl" "${A[@]}" list 2>/dev/null | grep -q /long1 || ((SECONDS >= end)); do sleep 0.1; done
"$ctl" "${A[@]}" abort "$("$ctl" "${A[@]}" list | grep /long1)" >/dev/null 2>&1
end=$((SECONDS + $(scaled 30)))
while kill -0 "$job" 2>/dev/null && ((SECONDS < end)); do sleep 0.05; done
kill -0 "$job" 2>/dev/null && kill -KILL "$job"
wait "$job"
expect "the aborted generate exits 1" test $? -eq 1
expect "and says it was aborted" grep -qF "the request was aborted in the daemon" "$tmp/long.err"
expect "no request left in flight" test "$(daemon_stat "$tmp/a.sock" requests_in_flight)" -eq 0

echo "== sleep and wake up"
for level in 1 2; do
    expect "sleep --level $level" "$ctl" "${A[@]}" sleep --level "$level"
    expect "wake-up" "$ctl" "${A[@]}" wake-up
done
greedy "$tmp/woken1" "${A[@]}" -- "$p1"
same "p1 after sleeping (level 2: weights dropped and reloaded): the same bits" "$tmp/woken1" "$tmp/alone1"

echo "== chat"
question="What is the capital of France?"
# asyncllmctl chat prints each answer and a newline; generate prints the text alone.
chat_equals_generate() { # NAME SOCKET-FILE RENDERED-PROMPT
    printf '%s\n' "$question" | timeout "$(scaled 120)" "$ctl" --socket "$2" chat --temperature 0 --max-tokens 10 \
        >"$tmp/chat.out" 2>"$tmp/chat.err"
    { timeout "$(scaled 120)" "$ctl" --socket "$2" generate --temperature 0 --max-tokens 10 "$3"; echo; } \
        >"$tmp/generate.out" 2>"$tmp/generate.err"
    if [[ -s $tmp/chat.out ]] && [[ $(wc -c <"$tmp/chat.out") -gt 1 ]] && cmp -s "$tmp/chat.out" "$tmp/generate.out"; then
        pass "$1"
    else
        fail "$1: chat said '$(cat "$tmp/chat.out")' ($(head -c 200 "$tmp/chat.err")), generate '$(cat "$tmp/generate.out")'"
    fi
}
chat_equals_generate "asyncllmctl chat = the Gemma turns rendered by hand, generated greedily" "$tmp/a.sock" \
    $'<start_of_turn>user\n'"$question"$'<end_of_turn>\n<start_of_turn>model\n'
chat_equals_generate "--chat-template: asyncllmctl chat = ChatML rendered by hand, generated greedily" "$tmp/b.sock" \
    $'<|im_start|>user\n'"$question"$'<|im_end|>\n<|im_start|>assistant\n'

echo "== --chat-template refused at startup"
printf '{%% for m in messages %%}[{{ m.role }}] {{ m.content }}\n' >"$tmp/unclosed.jinja"
for file_reason in "unclosed.jinja:chat template, line 1 column 54: the template ends before {% endfor %}" \
        "missing.jinja:No such file"; do
    file=$tmp/${file_reason%%:*} reason=${file_reason#*:}
    timeout "$(scaled 120)" "$daemon" --model "$model" --socket "$tmp/c.sock" --chat-template "$file" >"$tmp/c.log" 2>&1
    rc=$?
    if [[ $rc -eq 1 ]] && grep -qF -- "--chat-template $file: $reason" "$tmp/c.log"; then
        pass "refused, naming the file: $(tail -n 1 "$tmp/c.log")"
    else
        fail "$file: exit $rc: $(cat "$tmp/c.log")"
    fi
done

echo "$passed passed, $failed failed"
if [[ $failed -gt 0 ]]; then
    echo "--- daemon A log"
    tail -n 20 "$tmp/a.log"
    echo "--- daemon B log"
    tail -n 20 "$tmp/b.log"
fi
[[ $failed -eq 0 ]]
