#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `asyncllmctl chat` on a real terminal (tmux), against the real daemon and model: two turns,
# the second of which must reach the daemon with the first in its history; an answer stopped
# with Ctrl-C (the request aborted in the daemon, the prompt back); Ctrl-C while typing; and
# Ctrl-D ending the chat with exit status 0.
set -u
ctl=${ASYNCLLMCTL:?ASYNCLLMCTL must name the asyncllmctl binary}
daemon=${ASYNCLLMD:?ASYNCLLMD must name the asyncllmd binary}
model=${ASYNCLLM_MODEL:?ASYNCLLM_MODEL must name the model}
[[ -f $model ]] || { echo "SKIP: $model is missing; run scripts/fetch-model"; exit 77; }
command -v tmux >/dev/null || { echo "FAIL: tmux is needed for this test"; exit 1; }
slowdown=${ASYNCLLM_TEST_SLOWDOWN:-1}
scaled() { echo $(($1 * slowdown)); }

tmp=$(mktemp -d)
server=asyncllmctl-chat-$$ # a tmux server of our own
daemon_pid=""
cleanup() {
    tmux -L "$server" kill-server 2>/dev/null
    [[ -n $daemon_pid ]] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
passed=0 failed=0
pass() { passed=$((passed + 1)); echo "ok: $1"; }
fail() { failed=$((failed + 1)); echo "FAIL: $1"; echo "--- screen:"; screen | sed 's/^/| /'; }
expect() {
    local name=$1
    shift
    if "$@"; then pass "$name"; else fail "$name"; fi
}

sock=$tmp/asyncllmd.sock
# Engine steps take 200 ms more while $tmp/slow exists: an answer then lasts long enough to be
# interrupted, however fast the machine.
ASYNCLLMD_FAULT_STALL_MS=200 ASYNCLLMD_FAULT_STALL_FILE=$tmp/slow \
    "$daemon" --model "$model" --max-model-len 1024 --socket "$sock" >"$tmp/daemon.log" 2>&1 &
daemon_pid=$!
end=$((SECONDS + $(scaled 60)))
until "$ctl" --socket "$sock" health >/dev/null 2>&1; do
    ((SECONDS < end)) || { echo "FAIL: asyncllmd did not start: $(cat "$tmp/daemon.log")"; exit 1; }
    sleep 0.2
done

screen() { tmux -L "$server" capture-pane -p -t chat; }
# The screen's last line that is not empty.
last_line() { screen | sed '/^[[:space:]]*$/d' | tail -n 1; }
prompts() { screen | grep -c '^>'; }
# Waits until the screen shows the prompt ("> ", trailing blank trimmed by tmux) on its last
# line, and n prompts in all.
wait_prompt() {
    local n=$1 end=$((SECONDS + $(scaled 60)))
    while ((SECONDS < end)); do
        [[ $(last_line) == ">" && $(prompts) -ge $n ]] && return 0
        sleep 0.1
    done
    return 1
}
stat() { # a counter of the daemon's stats
    "$ctl" --socket "$sock" status --json | grep -oE "\"$1\":[0-9]+" | cut -d: -f2
}
aborted_count() {
    "$ctl" --socket "$sock" metrics | sed -n 's/^vllm:request_success_total{.*finished_reason="abort"} //p'
}

# Greedy, so that the answers are the same every time.
tmux -L "$server" new-session -d -s chat -x 120 -y 50 \
    "'$ctl' --socket '$sock' chat --temperature 0 --max-tokens 48; echo \$? >'$tmp/exit'; sleep 600"
expect "the chat shows its prompt" wait_prompt 1

# prefix_cache_queries counts every prompt's tokens (prompt_tokens only those computed).
queries0=$(stat prefix_cache_queries)
tmux -L "$server" send-keys -t chat "What is the capital of France?" Enter
expect "turn 1 answered" wait_prompt 2
expect "turn 1: the answer is on the screen" bash -c "tmux -L '$server' capture-pane -p -t chat | grep -A1 -F '> What is the capital' | tail -n 1 | grep -q '^[^>]'"
queries1=$(stat prefix_cache_queries) hits1=$(stat prefix_cache_hits)

tmux -L "$server" send-keys -t chat "And of Germany?" Enter
expect "turn 2 answered" wait_prompt 3
queries2=$(stat prefix_cache_queries) hits2=$(stat prefix_cache_hits)
# Turn 2's prompt holds turn 1 (question and answer) and its own shorter question: longer
# than turn 1's, which it could not be without the history; and it starts as turn 1 did.
first=$((queries1 - queries0)) second=$((queries2 - queries1))
expect "turn 2 sent the history ($second prompt tokens after $first)" test "$second" -gt "$first"
expect "turn 2 began with turn 1's prompt (prefix cache hits)" test "$hits2" -gt "$hits1"

aborted=$(aborted_count)
touch "$tmp/slow"
tmux -L "$server" send-keys -t chat "Write a long story about a dragon who learns to cook." Enter
# Ctrl-C once the answer has started to come
end=$((SECONDS + $(scaled 60)))
until [[ $(last_line) != ">"* ]] || ((SECONDS >= end)); do sleep 0.05; done
sleep 0.3
tmux -L "$server" send-keys -t chat C-c
expect "the prompt comes back after Ctrl-C" wait_prompt 4
rm -f "$tmp/slow"
expect "the answer was cut short (^C on screen)" bash -c "tmux -L '$server' capture-pane -p -t chat | grep -qF '^C'"
expect "the daemon counted the answer as aborted" test "$(aborted_count)" -eq $((aborted + 1))
expect "no request left in flight" test "$(stat requests_in_flight)" -eq 0

# Ctrl-C while typing drops the line, and the chat goes on.
tmux -L "$server" send-keys -t chat "this line is dropped"
sleep 0.2
tmux -L "$server" send-keys -t chat C-c
expect "Ctrl-C while typing gives a new prompt" wait_prompt 5

tmux -L "$server" send-keys -t chat C-d
end=$((SECONDS + $(scaled 10)))
until [[ -s $tmp/exit ]] || ((SECONDS >= end)); do sleep 0.1; done
expect "Ctrl-D ends the chat with exit status 0" test "$(cat "$tmp/exit" 2>/dev/null)" = 0

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
