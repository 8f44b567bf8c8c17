# SPDX-License-Identifier: MIT
# Shared by the daemon's shell tests (sourced): the daemon and model they run (a skip
# when the model or curl is missing), a scratch folder and the processes to stop at exit,
# the pass/fail tally, scaled timeouts and free loopback ports.
daemon=${ASYNCLLMD:?ASYNCLLMD must name the asyncllmd binary}
model=${ASYNCLLM_MODEL:?ASYNCLLM_MODEL must name the model}
[[ -f $model ]] || { echo "SKIP: $model is missing; run scripts/fetch-model"; exit 77; }
command -v curl >/dev/null || { echo "SKIP: no curl (scripts/setup installs it)"; exit 77; }
. "${ASYNCLLM_SRCDIR:?ASYNCLLM_SRCDIR must name the source tree}/tests/shell-test-lib.sh"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
