# SPDX-License-Identifier: MIT
# Shared by the HTTP front's shell tests (sourced): tests/daemon-test-lib.sh, a skip when curl
# is missing, and free loopback ports.
. "${ASYNCLLM_SRCDIR:?ASYNCLLM_SRCDIR must name the source tree}/tests/daemon-test-lib.sh"
command -v curl >/dev/null || { echo "SKIP: no curl (scripts/setup installs it)"; exit 77; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
