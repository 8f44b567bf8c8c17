# SPDX-License-Identifier: MIT
# Sourced by the tests that read llama.cpp's vocabulary files. ensure_vocabs sets and exports
# $ASYNCLLM_VOCABS, a folder that holds them: tests/extract-vocab-fixtures copies them out of
# the pinned llama-cpp-python sdist (checksum verified; pip-downloaded into .peer/ when missing
# there) into the build tree, once; $ASYNCLLM_VOCABS names another folder. run_with_vocabs
# PROGRAM then runs PROGRAM from the build tree with it.
ensure_vocabs() {
    local build=${ASYNCLLM_BUILDDIR:?ASYNCLLM_BUILDDIR must name the build tree}
    local src=${ASYNCLLM_SRCDIR:?ASYNCLLM_SRCDIR must name the source tree}
    local vocabs=${ASYNCLLM_VOCABS:-$build/tests/vocab}
    # One extraction at a time: the tests share the folder, and make -j check runs them together.
    mkdir -p "$(dirname "$vocabs")"
    exec 9>"$vocabs.lock"
    flock 9
    if [[ ! -f $vocabs/SOURCE ]]; then
        "$src/tests/extract-vocab-fixtures" --download "$vocabs" || {
            echo "FAIL: no vocabulary files in $vocabs (tests/extract-vocab-fixtures said why above)"
            exit 1
        }
    fi
    exec 9>&-
    export ASYNCLLM_VOCABS=$vocabs
}
run_with_vocabs() {
    ensure_vocabs
    exec "$ASYNCLLM_BUILDDIR/tests/$1"
}
