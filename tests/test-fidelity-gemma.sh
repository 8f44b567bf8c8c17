#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test-fidelity on Gemma 3 270M as downloaded (Q4_K_M: Q5_0, Q4_K, Q8_0, Q6_K and F32 tensors),
# against llama.cpp on the same file (tests/fixtures/greedy-gemma3.json and
# perplexity-gemma3.json, from tests/make-fixtures --gemma). The file's sha256 must be the one
# the fixtures record, so that another file fails rather than being compared.
set -u
build=${ASYNCLLM_BUILDDIR:?ASYNCLLM_BUILDDIR must name the build tree}
fixtures=${ASYNCLLM_FIXTURES:?ASYNCLLM_FIXTURES must name tests/fixtures}
model=${ASYNCLLM_GEMMA_MODEL:?ASYNCLLM_GEMMA_MODEL must name the Gemma 3 file}
if [[ ! -f $model ]]; then
    echo "SKIP: $model is missing (scripts/fetch-model gemma3-270m fetches it; ASYNCLLM_GEMMA_MODEL names another path)"
    exit 77
fi
want=$(grep -o '"model_sha256": "[0-9a-f]*"' "$fixtures/greedy-gemma3.json" | cut -d'"' -f4)
[[ -n $want ]] || { echo "FAIL: $fixtures/greedy-gemma3.json records no model_sha256"; exit 1; }
got=$(sha256sum "$model" | cut -d' ' -f1)
if [[ $got != "$want" ]]; then
    echo "FAIL: $model has sha256 $got, not $want, the file the fixtures were made on"
    exit 1
fi
# A 262144-token vocabulary (the logits and their softmax at every step) and the K-quant
# products' plain references make the 28 continuations several times slower than SmolLM2's.
export CK_TIMEOUT_MULTIPLIER=$((${CK_TIMEOUT_MULTIPLIER:-1} * 4))
ASYNCLLM_MODEL=$model ASYNCLLM_FIDELITY_TYPE=gemma3 exec "$build/tests/test-fidelity"
