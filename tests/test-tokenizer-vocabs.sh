#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# tests/test-tokenizer-vocabs on llama.cpp's vocabulary files and cases, which
# tests/extract-vocab-fixtures copies out of the pinned llama-cpp-python sdist (checksum
# verified; pip-downloaded into .peer/ when missing there) into the build tree, once.
# $ASYNCLLM_VOCABS names another folder holding them.
set -u
build=${ASYNCLLM_BUILDDIR:?ASYNCLLM_BUILDDIR must name the build tree}
src=${ASYNCLLM_SRCDIR:?ASYNCLLM_SRCDIR must name the source tree}
vocabs=${ASYNCLLM_VOCABS:-$build/tests/vocab}
if [[ ! -f $vocabs/SOURCE ]]; then
    "$src/tests/extract-vocab-fixtures" --download "$vocabs" || {
        echo "FAIL: no vocabulary files in $vocabs (tests/extract-vocab-fixtures said why above)"
        exit 1
    }
fi
ASYNCLLM_VOCABS=$vocabs exec "$build/tests/test-tokenizer-vocabs"
