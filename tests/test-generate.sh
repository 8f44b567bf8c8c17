#!/usr/bin/env bash
# asyncllm-generate as a user runs it: a real completion, the prompt from stdin, and a clear
# error with a non-zero exit for a missing, truncated or foreign model file and for bad usage.
set -u
gen=${ASYNCLLM_GENERATE:-./asyncllm-generate}
model=${ASYNCLLM_MODEL:?ASYNCLLM_MODEL must name the model}
[[ -f $model ]] || { echo "FAIL: $model is missing; run scripts/fetch-model"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0

check() { # name, expected exit, expected stderr text, command...
    local name=$1 want_rc=$2 want_err=$3
    shift 3
    "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [[ $rc -eq $want_rc ]] && { [[ -z $want_err ]] || grep -qF -- "$want_err" "$tmp/err"; }; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL: $name: exit $rc (wanted $want_rc), stderr: $(head -c 400 "$tmp/err")"
    fi
}

check "greedy completion" 0 "" "$gen" -t 2 --max-tokens 8 "The capital of France is"
grep -q "Paris" "$tmp/out" || { failed=$((failed + 1)); echo "FAIL: expected Paris, got: $(cat "$tmp/out")"; }

echo "The capital of France is" >"$tmp/prompt"
check "prompt from stdin" 0 "" bash -c "\"$gen\" -t 2 --max-tokens 8 - <\"$tmp/prompt\""
grep -q "Paris" "$tmp/out" || { failed=$((failed + 1)); echo "FAIL: stdin prompt gave: $(cat "$tmp/out")"; }

check "missing model" 1 "$tmp/none.gguf: cannot open" "$gen" --model "$tmp/none.gguf" "hi"
head -c 2000000 "$model" >"$tmp/cut.gguf"
check "truncated model" 1 "$tmp/cut.gguf" "$gen" --model "$tmp/cut.gguf" "hi"
check "truncated model says so" 1 "truncated" "$gen" --model "$tmp/cut.gguf" "hi"
printf 'NOTAGGUFFILE%.0s' {1..10} >"$tmp/junk.gguf"
check "foreign file" 1 "bad magic" "$gen" --model "$tmp/junk.gguf" "hi"
check "bad option value" 2 "--top-k" "$gen" --top-k banana "hi"
check "no prompt" 2 "expected one PROMPT" "$gen"
check "bad sampling value" 1 "top_p" "$gen" -t 2 --top-p 2 "hi"

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
