/* SPDX-License-Identifier: MIT */
/* Writes a synthetic model (tests/synthetic-llama.h) to a file from command-line options
 * (tests/synthetic-args.h), so that scripts (tests/make-arch-fixtures) make the same files
 * as the C tests do from the same options. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "synthetic-args.h"

int main(int argc, char **argv) {
        struct synthetic_llama_config cfg;
        int next, r;

        r = synthetic_llama_parse_args(argc, argv, &cfg, &next);
        if (r == 1) {
                fputs("usage: write-synthetic-model [OPTION...] OUTPUT.gguf\n", stdout);
                synthetic_llama_usage(stdout);
                return EXIT_SUCCESS;
        }
        if (r < 0 || next + 1 != argc) {
                fputs("usage: write-synthetic-model [OPTION...] OUTPUT.gguf\n", stderr);
                synthetic_llama_usage(stderr);
                return 2;
        }
        r = synthetic_llama_write(argv[next], &cfg);
        if (r < 0) {
                fprintf(stderr, "write-synthetic-model: cannot write %s: %s\n", argv[next],
                        r == -EINVAL ? "a configuration the generator cannot express" : strerror(-r));
                return EXIT_FAILURE;
        }
        return EXIT_SUCCESS;
}
