/* SPDX-License-Identifier: MIT */
/* Output for people or for programs: extras such as colour only go to a terminal. */
#include "config.h"

#include <stdlib.h>
#include <unistd.h>

#include "ctl.h"

bool ctl_is_terminal(FILE *f) {
        return isatty(fileno(f)) == 1;
}

bool ctl_use_colour(FILE *f) {
        return ctl_is_terminal(f) && !getenv("NO_COLOR");
}
