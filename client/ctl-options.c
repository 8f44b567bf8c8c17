/* SPDX-License-Identifier: MIT */
/* Option parsing shared by the commands: getopt_long() restarted for each command's own
 * options, and its failures put in words. */
#include "config.h"

#include <getopt.h>
#include <string.h>

#include "ctl.h"

void ctl_options_begin(void) {
        optind = 0; /* glibc: start over, the global options' state forgotten */
        opterr = 0; /* ctl_option_failure() says it better */
}

int ctl_option_failure(const struct ctl *ctl, int opt, char *const *argv) {
        const char *given = argv[optind - 1];
        char short_option[3] = { '-', (char) optopt, 0 };
        const char *help = ctl->command ? ctl->command : "";

        /* getopt_long() leaves a clustered short option's text behind: name the letter. */
        if (optopt > 0 && optopt < 128 && (given[0] != '-' || given[1] != '-'))
                given = short_option;
        if (opt == ':')
                return ctl_fail(ctl, CTL_EXIT_USAGE, "option %s needs a value; `%s %s%s--help` shows what it takes", given,
                                ctl->program, help, *help ? " " : "");
        if (ctl->command && (strncmp(given, "--socket", 8) == 0 || strncmp(given, "--bus", 5) == 0))
                return ctl_fail(ctl, CTL_EXIT_USAGE, "%s goes before the command: %s %s ... %s ...", given, ctl->program,
                                given, ctl->command);
        return ctl_fail(ctl, CTL_EXIT_USAGE, "unknown option %s; `%s %s%s--help` lists the options", given, ctl->program,
                        help, *help ? " " : "");
}
