/* SPDX-License-Identifier: MIT */
#pragma once

/* The commands. Each takes its arguments with argv[0] its own name, parses its options and
 * returns an exit status. */

#include "ctl.h"

int ctl_generate(struct ctl *ctl, int argc, char **argv); /* ctl-generate.c */
int ctl_chat(struct ctl *ctl, int argc, char **argv);     /* ctl-chat.c */
int ctl_encode(struct ctl *ctl, int argc, char **argv);   /* ctl-encode.c */

/* ctl-control.c */
int ctl_abort(struct ctl *ctl, int argc, char **argv);
int ctl_pause(struct ctl *ctl, int argc, char **argv);
int ctl_resume(struct ctl *ctl, int argc, char **argv);
int ctl_sleep(struct ctl *ctl, int argc, char **argv);
int ctl_wake_up(struct ctl *ctl, int argc, char **argv);
int ctl_rpc(struct ctl *ctl, int argc, char **argv);
int ctl_reset_prefix_cache(struct ctl *ctl, int argc, char **argv);
int ctl_drain(struct ctl *ctl, int argc, char **argv);
int ctl_profile(struct ctl *ctl, int argc, char **argv);

/* ctl-tokenizer.c */
int ctl_tokenize(struct ctl *ctl, int argc, char **argv);
int ctl_detokenize(struct ctl *ctl, int argc, char **argv);

/* ctl-status.c */
int ctl_health(struct ctl *ctl, int argc, char **argv);
int ctl_status(struct ctl *ctl, int argc, char **argv);
int ctl_list(struct ctl *ctl, int argc, char **argv);
int ctl_metrics(struct ctl *ctl, int argc, char **argv);
