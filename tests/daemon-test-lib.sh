# SPDX-License-Identifier: MIT
# Shared by the shell tests of the daemon on the real model (sourced): asyncllmd ($daemon),
# asyncllmctl ($ctl) and the model ($model; a skip when it is missing), then
# tests/shell-test-lib.sh.
ctl=${ASYNCLLMCTL:?ASYNCLLMCTL must name the asyncllmctl binary}
daemon=${ASYNCLLMD:?ASYNCLLMD must name the asyncllmd binary}
model=${ASYNCLLM_MODEL:?ASYNCLLM_MODEL must name the model}
[[ -f $model ]] || { echo "SKIP: $model is missing; run scripts/fetch-model"; exit 77; }
. "${ASYNCLLM_SRCDIR:?ASYNCLLM_SRCDIR must name the source tree}/tests/shell-test-lib.sh"
