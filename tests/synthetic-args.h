/* SPDX-License-Identifier: MIT */
#pragma once

/* The synthetic model's configuration as command-line options: what tests/write-synthetic-model
 * takes, and what the architecture fixtures record so that a test makes the same file. */

#include <stdio.h>

#include "synthetic-llama.h"

void synthetic_llama_usage(FILE *out);

/* Parses the options in argv[1..argc) into cfg (defaults: 2 layers, n_embd 256, n_ff 512,
 * 4 heads, 2 KV heads, F32, tied output, seed 1); *ret_next is the index of the first
 * argument that is not an option. 0, 1 for --help, or -EINVAL (told on stderr). String
 * options point into argv. */
int synthetic_llama_parse_args(int argc, char **argv, struct synthetic_llama_config *cfg, int *ret_next);
