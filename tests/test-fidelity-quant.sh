#!/usr/bin/env bash
# test-fidelity on the default model requantized to each of the types below, against llama.cpp on
# the same files (tests/fixtures/greedy-TYPE.json and perplexity-TYPE.json, from
# tests/make-fixtures --quant).
# tests/requantize makes each file here as llama-quantize made it for the fixtures, and its sha256
# must be the one the fixtures record: no llama.cpp build is needed, and a file that is not the
# fixtures' fails rather than being compared. The files stay in the build tree for the next run.
set -u
build=${ASYNCLLM_BUILDDIR:?ASYNCLLM_BUILDDIR must name the build tree}
fixtures=${ASYNCLLM_FIXTURES:?ASYNCLLM_FIXTURES must name tests/fixtures}
model=${ASYNCLLM_MODEL:?ASYNCLLM_MODEL must name the default model}
[[ -f $model ]] || { echo "FAIL: $model is missing; run scripts/fetch-model"; exit 1; }
mkdir -p "$build/tests/models" || exit 1
# tests/requantize's TYPE in lower case, as the fixtures are named (tests/fixtures/README.md);
# ASYNCLLM_FIDELITY_TYPES, a space-separated list of them, runs only those.
types=(${ASYNCLLM_FIDELITY_TYPES:-q5_0 q5_1 q4_k_m q5_k_m q6_k q3_k_m q2_k q2_k-ffn})
failed=0
for type in "${types[@]}"; do
    upper=${type^^}
    want=$(grep -o '"model_sha256": "[0-9a-f]*"' "$fixtures/greedy-$type.json" | cut -d'"' -f4)
    [[ -n $want ]] || { echo "FAIL: $fixtures/greedy-$type.json records no model_sha256"; exit 1; }
    file=$build/tests/models/requantized-$type.gguf
    if [[ ! -f $file ]] || [[ $(sha256sum "$file" | cut -d' ' -f1) != "$want" ]]; then
        "$build/tests/requantize" "$model" "$file" "$upper" || { echo "FAIL: tests/requantize $upper"; exit 1; }
    fi
    got=$(sha256sum "$file" | cut -d' ' -f1)
    if [[ $got != "$want" ]]; then
        echo "FAIL: $file (tests/requantize $model $upper) has sha256 $got, not llama-quantize's $want" \
             "that the fixtures were made on: is $model the default model (scripts/fetch-model)?"
        exit 1
    fi
    echo "== $upper: $file (sha256 $got, as llama-quantize's)"
    ASYNCLLM_MODEL=$file ASYNCLLM_FIDELITY_TYPE=$type "$build/tests/test-fidelity" || failed=1
done
exit $failed
