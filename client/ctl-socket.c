/* SPDX-License-Identifier: MIT */
/* Connecting to the daemon's socket and running control ops on it, with errors that say
 * what to do about them. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ctl-socket.h"

/* Long enough for a daemon under load, short enough that a hung one is noticed. */
#define CONNECT_TIMEOUT_USEC (30ull * 1000000ull)

static int connect_failure(struct ctl *ctl, const char *path, int error) {
        const char *start = "Start it with `systemctl start asyncllmd.socket`, or run `asyncllmd --socket PATH` "
                            "and pass the same path with --socket or $ASYNCLLM_SOCKET";
        switch (error) {
        case -ENOENT:
                return ctl_fail(ctl, CTL_EXIT_CONNECT, "cannot connect to %s: the socket does not exist. "
                                "Is asyncllmd running? %s", path, start);
        case -ECONNREFUSED:
                return ctl_fail(ctl, CTL_EXIT_CONNECT, "cannot connect to %s: nobody listens on it "
                                "(asyncllmd is not running, or did not clean up). %s", path, start);
        case -EACCES:
        case -EPERM:
                return ctl_fail(ctl, CTL_EXIT_CONNECT, "cannot connect to %s: permission denied. Join the "
                                "asyncllm group (`usermod -aG asyncllm $USER`, then log in again), or run as root",
                                path);
        case -ENAMETOOLONG:
                return ctl_fail(ctl, CTL_EXIT_CONNECT, "%s: choose a shorter --socket path",
                                asyncllm_client_error(ctl->client));
        default:
                return ctl_fail(ctl, CTL_EXIT_CONNECT, "cannot connect to %s: %s", path,
                                asyncllm_client_error(ctl->client));
        }
}

int ctl_socket_connect(struct ctl *ctl) {
        char *path = NULL;
        int r;

        if (ctl->client)
                return CTL_EXIT_OK;
        if (asyncllm_client_new(&ctl->client) < 0 ||
            (!ctl->socket_path && asyncllm_default_socket_path(&path) < 0))
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "out of memory");
        const char *target = ctl->socket_path ? ctl->socket_path : path;
        asyncllm_client_set_timeout(ctl->client, CONNECT_TIMEOUT_USEC);
        r = asyncllm_client_connect(ctl->client, target);
        asyncllm_client_set_timeout(ctl->client, 0); /* generation and a draining pause take their time */
        if (r < 0) {
                int status = connect_failure(ctl, target, r);
                free(path);
                ctl->client = asyncllm_client_free(ctl->client);
                return status;
        }
        free(path);
        return CTL_EXIT_OK;
}

int ctl_socket_failure(struct ctl *ctl, int error) {
        const char *code = asyncllm_client_error_code(ctl->client);
        const char *message = asyncllm_client_error(ctl->client);
        if (!code && error == -EMSGSIZE) /* refused before sending: longer than the daemon reads */
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "%s", message);
        if (!code && error != -ENOMEM)
                return ctl_fail(ctl, CTL_EXIT_CONNECT, "lost the connection to asyncllmd: %s", message);
        if (code && strcmp(code, "permission_denied") == 0)
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "%s (control commands need root or the asyncllm-admin group)",
                                message);
        if (code && strcmp(code, "unknown_op") == 0)
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "%s (the daemon is older than this asyncllmctl)", message);
        return ctl_fail(ctl, code ? ctl_exit_for_code(code) : CTL_EXIT_REQUEST, "%s", message);
}

int ctl_socket_call(struct ctl *ctl, const char *op, const char *args_json, char **ret_result) {
        int status = ctl_socket_connect(ctl);
        if (status != CTL_EXIT_OK)
                return status;
        int r = asyncllm_client_call(ctl->client, op, args_json, ret_result);
        return r < 0 ? ctl_socket_failure(ctl, r) : CTL_EXIT_OK;
}
