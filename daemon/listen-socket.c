/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "listen-socket.h"

static int make_nonblocking(int fd, struct error *err) {
        int flags = fcntl(fd, F_GETFL);
        if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
                return error_set(err, errno, "cannot make the passed socket non-blocking: %s", strerror(errno));
        return 0;
}

/* The sockets systemd passed: the protocol's (named "asyncllmd", or the only one not named
 * "asyncllmd-http") into *ret_fd, 1; the HTTP front's ("asyncllmd-http") into *ret_http_fd. */
static int from_systemd(int *ret_fd, int *ret_http_fd, struct error *err) {
        char **names = NULL;
        int n = sd_listen_fds_with_names(1, &names), fd = -1, http = -1, r;
        if (n < 0)
                return error_set(err, -n, "cannot read the sockets systemd passed: %s", strerror(-n));
        for (int i = 0; i < n; i++) {
                const char *name = names && names[i] ? names[i] : "";
                if (strcmp(name, "asyncllmd-http") == 0)
                        http = SD_LISTEN_FDS_START + i;
                else if (n == 1 || strcmp(name, "asyncllmd") == 0)
                        fd = SD_LISTEN_FDS_START + i;
        }
        for (int i = 0; names && i < n; i++)
                free(names[i]);
        free(names);
        if (http >= 0) {
                if (sd_is_socket(http, AF_UNSPEC, SOCK_STREAM, 1) <= 0)
                        return error_set(err, EINVAL, "the socket systemd passed as \"asyncllmd-http\" is not a listening stream socket");
                if ((r = make_nonblocking(http, err)) < 0)
                        return r;
                *ret_http_fd = http;
        }
        if (n == 0 || (n == 1 && http >= 0))
                return 0;
        if (fd < 0)
                return error_set(err, EINVAL, "systemd passed %d sockets and none is named \"asyncllmd\" (FileDescriptorName=)", n);
        if (sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) <= 0)
                return error_set(err, EINVAL, "the socket systemd passed is not a listening Unix stream socket");
        if ((r = make_nonblocking(fd, err)) < 0)
                return r;
        *ret_fd = fd;
        return 1;
}

/* Creates the parent directory of path, one level (its own parent must exist). */
static int make_parent(const char *path, struct error *err) {
        char *dir = strdup(path), *slash;
        if (!dir)
                return error_set(err, ENOMEM, "out of memory");
        slash = strrchr(dir, '/');
        int r = 0;
        if (slash && slash != dir) {
                *slash = 0;
                if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                        r = error_set(err, errno, "cannot create the socket directory %s: %s", dir, strerror(errno));
        }
        free(dir);
        return r;
}

/* True when something accepts connections at addr. */
static bool someone_listens(const struct sockaddr_un *addr) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return false;
        bool live = connect(fd, (const struct sockaddr *) addr, sizeof(*addr)) == 0;
        close(fd);
        return live;
}

int listen_socket_open(const char *path, int *ret_fd, bool *ret_activated, int *ret_http_fd, struct error *err) {
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        struct stat st;
        *ret_http_fd = -1;
        int r = from_systemd(ret_fd, ret_http_fd, err);
        if (r != 0) {
                *ret_activated = r > 0;
                return r < 0 ? r : 0;
        }
        *ret_activated = false;
        if (strlen(path) >= sizeof(addr.sun_path))
                return error_set(err, ENAMETOOLONG, "socket path %s is longer than %zu bytes", path, sizeof(addr.sun_path) - 1);
        memcpy(addr.sun_path, path, strlen(path) + 1);
        if ((r = make_parent(path, err)) < 0)
                return r;
        if (lstat(path, &st) == 0) {
                if (!S_ISSOCK(st.st_mode))
                        return error_set(err, EEXIST, "%s exists and is not a socket; remove it or choose --socket", path);
                if (someone_listens(&addr))
                        return error_set(err, EADDRINUSE, "%s: another daemon is already listening there", path);
                unlink(path); /* stale, left by a daemon that did not stop cleanly */
        }
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return error_set(err, errno, "cannot create a socket: %s", strerror(errno));
        /* group members connect; others do not (the unit's SocketMode= does the same) */
        mode_t old = umask(0117);
        r = bind(fd, (const struct sockaddr *) &addr, sizeof(addr));
        umask(old);
        if (r < 0 || listen(fd, SOMAXCONN) < 0) {
                r = error_set(err, errno, "cannot listen on %s: %s", path, strerror(errno));
                close(fd);
                return r;
        }
        *ret_fd = fd;
        return 0;
}
