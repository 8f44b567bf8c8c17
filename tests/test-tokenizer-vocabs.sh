#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# tests/test-tokenizer-vocabs on llama.cpp's vocabulary files and cases (tests/vocab-fixtures-lib.sh).
set -u
. "${ASYNCLLM_SRCDIR:?ASYNCLLM_SRCDIR must name the source tree}/tests/vocab-fixtures-lib.sh"
run_with_vocabs test-tokenizer-vocabs
