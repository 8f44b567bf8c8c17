/* SPDX-License-Identifier: MIT */
/* asyncllmd: serves a language model to local programs over a Unix socket (and D-Bus). */
#include "config.h"

#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "log.h"
#include "server.h"
#include "settings.h"

int main(int argc, char **argv) {
        struct daemon_settings settings;
        struct server server;
        struct error err = { 0 };
        bool usage = false;
        sigset_t mask;

        /* Blocked before any thread starts, so that every thread inherits it and the event
         * loop's signalfd is the only place these signals go. */
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        /* A fixed threshold: glibc would otherwise raise it to the size of each large block
         * freed (the KV pool at sleep, a profile's spans), after which blocks that size come
         * from the heap and stay resident there once freed; a daemon that runs for months
         * then holds memory its peaks once needed. */
        mallopt(M_MMAP_THRESHOLD, 256 * 1024);
        log_setup();
        if (daemon_settings_load(&settings, argc, argv, &usage, &err) < 0) {
                log_error("%s", err.message);
                return usage ? 2 : 1;
        }
        if (settings.action == DAEMON_SETTINGS_HELP) {
                daemon_settings_help(stdout, argv[0]);
                daemon_settings_done(&settings);
                return 0;
        }
        if (settings.action == DAEMON_SETTINGS_PRINT) {
                daemon_settings_dump(&settings, stdout);
                daemon_settings_done(&settings);
                return 0;
        }
        if (settings.action == DAEMON_SETTINGS_VERSION) {
                printf("asyncllmd %s\n", PACKAGE_VERSION);
                daemon_settings_done(&settings);
                return 0;
        }
        log_set_max_level(settings.log_level);

        int status = 1;
        if (server_start(&server, &settings, argc, argv, &err) < 0)
                log_error("%s", err.message);
        else
                status = server_run(&server);
        server_done(&server);
        daemon_settings_done(&settings);
        return status;
}
