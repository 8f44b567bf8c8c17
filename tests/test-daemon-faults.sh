#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# asyncllmd when the world misbehaves around it: its model file truncated to nothing, deleted,
# or rewritten in place while it serves (it serves on from memory, the same bits) and while it
# sleeps at level 2 (wake-up is refused, naming the file and what happened, and the daemon
# stays up); the daemon stopped (SIGSTOP) in the middle of a batch and continued (every
# request finishes, the same bits); a client that writes its request a byte every 0.2 s while
# another is served.
set -u
. "${ASYNCLLM_SRCDIR:?ASYNCLLM_SRCDIR must name the source tree}/tests/daemon-test-lib.sh"

prompt="The lighthouse keeper wrote down the weather twice a day"
greedy() { # SOCKET OUT: 16 greedy tokens and their log-probabilities
    timeout "$(scaled 60)" "$ctl" --socket "$1" generate --json --output-kind final --temperature 0 --max-tokens 16 \
        --logprobs 1 "$prompt" </dev/null 2>"$2.err" | sed -E 's/^\{"id":"[^"]*",//; s/,"finished":.*//' >"$2"
}
same() { # NAME FILE REFERENCE
    if [[ -s $2 ]] && cmp -s "$2" "$3"; then pass "$1"; else fail "$1: $(head -c 300 "$2") $(cat "$2.err")"; fi
}
start() { # NAME: a daemon on a copy of the model, $tmp/NAME.gguf, socket $tmp/NAME.sock
    cp "$model" "$tmp/$1.gguf"
    "$daemon" --model "$tmp/$1.gguf" --socket "$tmp/$1.sock" --max-model-len 512 --threads 2 >"$tmp/$1.log" 2>&1 &
    pids+=("$!")
    wait_ready "$tmp/$1.sock" || fail "$1: asyncllmd did not start: $(tail -n 5 "$tmp/$1.log")"
}
# wake_refused NAME TEXT: level-2 sleep, then a wake-up that fails naming the file and saying
# TEXT; the daemon still answers and says it sleeps.
wake_refused() {
    local s=$tmp/$1.sock
    "$ctl" --socket "$s" sleep --level 2 >/dev/null 2>&1
    if "$ctl" --socket "$s" wake-up >"$tmp/wake" 2>&1; then
        fail "$1: wake-up is refused"
    else
        expect "$1: wake-up is refused: $(cat "$tmp/wake")" grep -qF "model file $tmp/$1.gguf $2" "$tmp/wake"
    fi
    expect "$1: the daemon answers and sleeps" grep -q '^State: *sleeping' <("$ctl" --socket "$s" status)
}

start truncated
greedy "$tmp/truncated.sock" "$tmp/reference"
expect "a greedy reference" grep -q '"token_ids":\[' "$tmp/reference"
: >"$tmp/truncated.gguf"
greedy "$tmp/truncated.sock" "$tmp/after-truncation"
same "the model file truncated to nothing: served from memory, the same bits" "$tmp/after-truncation" "$tmp/reference"
wake_refused truncated "changed on disk since it was loaded (size 0 bytes"

start deleted
rm "$tmp/deleted.gguf"
greedy "$tmp/deleted.sock" "$tmp/after-deletion"
same "the model file deleted: served from memory, the same bits" "$tmp/after-deletion" "$tmp/reference"
wake_refused deleted "cannot be opened again since it was loaded (No such file or directory)"

start rewritten
# the same size, other bytes: the tensor data's last 4 KiB zeroed in place
size=$(stat -c %s "$tmp/rewritten.gguf")
dd if=/dev/zero of="$tmp/rewritten.gguf" bs=4096 seek=$((size / 4096 - 1)) count=1 conv=notrunc status=none
greedy "$tmp/rewritten.sock" "$tmp/after-rewrite"
same "the model file rewritten in place: served from memory, the same bits" "$tmp/after-rewrite" "$tmp/reference"
wake_refused rewritten "changed on disk since it was loaded (modification time"

# SIGSTOP in the middle of four requests, SIGCONT 2 s later
start stopped
jobs=()
for i in 0 1 2 3; do
    greedy "$tmp/stopped.sock" "$tmp/stopped$i" &
    jobs+=("$!")
done
sleep 0.3
pid=${pids[-1]}
kill -STOP "$pid"
sleep 2
kill -CONT "$pid"
wait "${jobs[@]}"
for i in 0 1 2 3; do
    same "request $i across SIGSTOP and SIGCONT: the same bits" "$tmp/stopped$i" "$tmp/reference"
done

# a byte every 0.2 s: the daemon serves another client meanwhile, then answers the slow one
line='{"op":"health","id":"slow"}'
(
    for ((i = 0; i < ${#line}; i++)); do
        printf '%s' "${line:i:1}"
        sleep 0.2
    done
    printf '\n'
    sleep 1
) | timeout "$(scaled 30)" socat - "UNIX-CONNECT:$tmp/stopped.sock" >"$tmp/slow" 2>&1 &
slow=$!
sleep 0.5
greedy "$tmp/stopped.sock" "$tmp/beside-slow"
same "a client served while another writes a byte at a time" "$tmp/beside-slow" "$tmp/reference"
wait "$slow"
expect "the slow client gets its answer" grep -q '"id":"slow","result"' "$tmp/slow"

echo "$passed passed, $failed failed"
((failed == 0))
