/* SPDX-License-Identifier: MIT */
/* A generation request as the commands build it, and the sampling options: one table gives
 * each flag its protocol name, its value's type and its line of --help, so that the three
 * never drift apart. Only types are checked here; ranges are the daemon's to check, and its
 * message names the parameter. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctl-generation.h"

int ctl_generation_take_prompt(struct ctl *ctl, struct ctl_generation *g, int argc, char **argv, bool chat,
                               const char *system, char **ret_stdin_prompt) {
        int n_args = argc - optind, status;
        if (g->prompt_token_ids) {
                if (n_args > 0 || chat)
                        return ctl_fail(ctl, CTL_EXIT_USAGE, "--prompt-token-ids is the whole prompt: drop %s",
                                        chat ? "--chat and --system" : "PROMPT");
        } else if (n_args > 1)
                return ctl_fail(ctl, CTL_EXIT_USAGE, "takes one PROMPT, got %d arguments; quote a prompt of several words",
                                n_args);
        else if (n_args == 1 && strcmp(argv[optind], "-") != 0)
                g->prompt = argv[optind];
        else if (n_args == 0 && ctl_is_terminal(stdin))
                return ctl_fail(ctl, CTL_EXIT_USAGE, "needs a prompt: give it as an argument, or - to read standard input");
        else {
                if ((status = ctl_read_stdin(ctl, "the prompt", ret_stdin_prompt)) != CTL_EXIT_OK)
                        return status;
                g->prompt = *ret_stdin_prompt;
        }
        if (chat) {
                if ((system && ctl_generation_add_message(g, "system", system) < 0) ||
                    ctl_generation_add_message(g, "user", g->prompt) < 0)
                        return ctl_fail(ctl, CTL_EXIT_REQUEST, "out of memory");
                g->prompt = NULL;
        }
        return CTL_EXIT_OK;
}

/* getopt_long() values of the sampling options: SAMPLING_OPTION_BASE + index in the table. */
#define SAMPLING_OPTION_BASE 0x1000

enum value_kind {
        VALUE_INTEGER,      /* a JSON integer */
        VALUE_NUMBER,       /* a finite JSON number */
        VALUE_TRUE,         /* no argument: true */
        VALUE_FALSE,        /* no argument: false */
        VALUE_STRING_LIST,  /* repeatable: each value is appended */
        VALUE_INTEGER_LIST, /* repeatable: comma-separated integers, appended */
        VALUE_LOGIT_BIAS,   /* a JSON object, or TOKEN=BIAS,... */
};

struct sampling_option {
        const char *name;  /* the flag, without "--" */
        const char *key;   /* the protocol's name */
        enum value_kind kind;
        bool request_level; /* beside the prompt, not in "params" */
        const char *metavar;
        const char *help;
};

static const struct sampling_option sampling_options[] = {
        { "max-tokens", "max_tokens", VALUE_INTEGER, false, "N", "tokens to generate at most, -1 for up to the context" },
        { "min-tokens", "min_tokens", VALUE_INTEGER, false, "N", "tokens to generate before EOS and stops count" },
        { "temperature", "temperature", VALUE_NUMBER, false, "T", "0 to 2; 0 is greedy (default 1)" },
        { "top-p", "top_p", VALUE_NUMBER, false, "P", "sample from the top P of probability, (0, 1]" },
        { "top-k", "top_k", VALUE_INTEGER, false, "K", "sample from the K most likely tokens; 0 or -1: all" },
        { "min-p", "min_p", VALUE_NUMBER, false, "P", "drop tokens below P times the most likely one" },
        { "seed", "seed", VALUE_INTEGER, false, "N", "the same seed gives the same text" },
        { "stop", "stop", VALUE_STRING_LIST, false, "TEXT", "end at this text (repeatable)" },
        { "stop-token-id", "stop_token_ids", VALUE_INTEGER_LIST, false, "ID[,ID...]", "end at these tokens (repeatable)" },
        { "bad-word", "bad_words", VALUE_STRING_LIST, false, "WORD", "never generate this word (repeatable)" },
        { "include-stop-str-in-output", "include_stop_str_in_output", VALUE_TRUE, false, NULL,
          "keep the stop text in the output" },
        { "ignore-eos", "ignore_eos", VALUE_TRUE, false, NULL, "go on after the end-of-sequence token" },
        { "logprobs", "logprobs", VALUE_INTEGER, false, "N", "log probabilities of each token and the top N" },
        { "prompt-logprobs", "prompt_logprobs", VALUE_INTEGER, false, "N", "the same for the prompt's tokens" },
        { "truncate-prompt-tokens", "truncate_prompt_tokens", VALUE_INTEGER, false, "N",
          "keep only the prompt's last N tokens; -1: as many as the context allows" },
        { "presence-penalty", "presence_penalty", VALUE_NUMBER, false, "X", "-2 to 2, against tokens already out" },
        { "frequency-penalty", "frequency_penalty", VALUE_NUMBER, false, "X", "-2 to 2, by how often they came" },
        { "repetition-penalty", "repetition_penalty", VALUE_NUMBER, false, "X", "> 0, 1 disables it" },
        { "logit-bias", "logit_bias", VALUE_LOGIT_BIAS, false, "BIAS",
          "TOKEN=BIAS[,TOKEN=BIAS...] or a JSON object {\"TOKEN\": BIAS}" },
        { "allowed-token-ids", "allowed_token_ids", VALUE_INTEGER_LIST, false, "ID[,ID...]",
          "sample only these tokens (repeatable)" },
        { "no-skip-special-tokens", "skip_special_tokens", VALUE_FALSE, false, NULL, "keep special tokens in the text" },
        { "priority", "priority", VALUE_INTEGER, true, "N", "lower runs first under the priority policy" },
        { "latency-sensitive", "latency_sensitive", VALUE_TRUE, true, NULL,
          "the slo policy serves it by deadline (default: best-effort)" },
        { "slo", "slo", VALUE_NUMBER, true, "SECONDS", "its target time per output token (default: the daemon's)" },
        { "ttft-slo", "ttft_slo", VALUE_NUMBER, true, "SECONDS",
          "its target time to the first token (default: the daemon's)" },
};

#define N_SAMPLING_OPTIONS (sizeof(sampling_options) / sizeof(*sampling_options))

int ctl_generation_init(struct ctl_generation *g) {
        *g = (struct ctl_generation) {
                .params = json_object_new_object(),
                .request_fields = json_object_new_object(),
        };
        if (!g->params || !g->request_fields) {
                ctl_generation_done(g);
                return -ENOMEM;
        }
        return 0;
}

void ctl_generation_done(struct ctl_generation *g) {
        json_object_put(g->prompt_token_ids);
        json_object_put(g->messages);
        json_object_put(g->params);
        json_object_put(g->request_fields);
        *g = (struct ctl_generation) { 0 };
}

int ctl_generation_add_message(struct ctl_generation *g, const char *role, const char *content) {
        struct json_object *m = json_object_new_object();
        if (!m || (!g->messages && !(g->messages = json_object_new_array())) ||
            json_object_object_add(m, "role", json_object_new_string(role)) < 0 ||
            json_object_object_add(m, "content", json_object_new_string(content)) < 0 ||
            json_object_array_add(g->messages, m) < 0) {
                json_object_put(m);
                return -ENOMEM;
        }
        return 0;
}

struct option *ctl_sampling_options_with(const struct option *own, size_t n_own) {
        struct option *all = calloc(n_own + N_SAMPLING_OPTIONS + 1, sizeof(*all));
        if (!all)
                return NULL;
        memcpy(all, own, n_own * sizeof(*own));
        for (size_t i = 0; i < N_SAMPLING_OPTIONS; i++) {
                bool takes_value = sampling_options[i].kind != VALUE_TRUE && sampling_options[i].kind != VALUE_FALSE;
                all[n_own + i] = (struct option) {
                        .name = sampling_options[i].name,
                        .has_arg = takes_value ? required_argument : no_argument,
                        .val = SAMPLING_OPTION_BASE + (int) i,
                };
        }
        return all;
}

bool ctl_sampling_is_option(int opt) {
        return opt >= SAMPLING_OPTION_BASE && opt < SAMPLING_OPTION_BASE + (int) N_SAMPLING_OPTIONS;
}

void ctl_sampling_help(FILE *f) {
        for (size_t i = 0; i < N_SAMPLING_OPTIONS; i++) {
                const struct sampling_option *o = &sampling_options[i];
                char flag[64];
                snprintf(flag, sizeof(flag), "--%s%s%s", o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
                if (strlen(flag) > 28)
                        fprintf(f, "      %s\n      %-28s  %s\n", flag, "", o->help);
                else
                        fprintf(f, "      %-28s  %s\n", flag, o->help);
        }
}

/* An integer as JSON, up to 2^64 - 1 (seeds); NULL when text is not one, or out of memory. */
static struct json_object *integer_value(const char *text) {
        char *end;
        errno = 0;
        long long v = strtoll(text, &end, 10);
        if (errno == ERANGE && v == LLONG_MAX) {
                errno = 0;
                unsigned long long u = strtoull(text, &end, 10);
                return !errno && end != text && !*end ? json_object_new_uint64(u) : NULL;
        }
        return !errno && end != text && !*end ? json_object_new_int64(v) : NULL;
}

int ctl_parse_integer(const struct ctl *ctl, const char *option, const char *text, struct json_object **ret) {
        if (!(*ret = integer_value(text)))
                return ctl_fail(ctl, CTL_EXIT_USAGE, "--%s takes an integer, got '%s'", option, text);
        return CTL_EXIT_OK;
}

static int parse_number(const struct ctl *ctl, const char *option, const char *text, struct json_object **ret) {
        char *end;
        errno = 0;
        double v = strtod(text, &end);
        if (errno || end == text || *end || !isfinite(v))
                return ctl_fail(ctl, CTL_EXIT_USAGE, "--%s takes a number, got '%s'", option, text);
        *ret = json_object_new_double(v);
        return *ret ? CTL_EXIT_OK : ctl_fail(ctl, CTL_EXIT_REQUEST, "out of memory");
}

int ctl_parse_int_list(const struct ctl *ctl, const char *option, const char *text, struct json_object **array) {
        char *copy = strdup(text), *save = NULL;
        int status = CTL_EXIT_OK;

        if (!copy || (!*array && !(*array = json_object_new_array()))) {
                free(copy);
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "out of memory");
        }
        if (!*text)
                status = ctl_fail(ctl, CTL_EXIT_USAGE, "--%s takes comma-separated integers, got nothing", option);
        for (char *item = strtok_r(copy, ",", &save); item && status == CTL_EXIT_OK; item = strtok_r(NULL, ",", &save)) {
                while (*item == ' ')
                        item++;
                struct json_object *v = integer_value(item);
                if (!v)
                        status = ctl_fail(ctl, CTL_EXIT_USAGE,
                                          "--%s takes comma-separated integers such as 1,2,3; '%s' is not one", option,
                                          item);
                else
                        json_object_array_add(*array, v);
        }
        free(copy);
        return status;
}

/* {"TOKEN": BIAS, ...} from a JSON object or from TOKEN=BIAS,TOKEN=BIAS. */
static int parse_logit_bias(const struct ctl *ctl, const char *text, struct json_object **ret) {
        const char *usage = "--logit-bias takes TOKEN=BIAS[,TOKEN=BIAS...] such as 50256=-100, "
                            "or a JSON object such as '{\"50256\": -100}'";
        struct json_object *bias = NULL;

        while (*text == ' ')
                text++;
        if (*text == '{') {
                bias = json_tokener_parse(text);
                if (!json_object_is_type(bias, json_type_object)) {
                        json_object_put(bias);
                        return ctl_fail(ctl, CTL_EXIT_USAGE, "%s; this is not a JSON object: %s", usage, text);
                }
                *ret = bias;
                return CTL_EXIT_OK;
        }
        char *copy = strdup(text), *save = NULL;
        if (!copy || !(bias = json_object_new_object())) {
                free(copy);
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "out of memory");
        }
        int status = *text ? CTL_EXIT_OK : ctl_fail(ctl, CTL_EXIT_USAGE, "%s", usage);
        for (char *item = strtok_r(copy, ",", &save); item && status == CTL_EXIT_OK; item = strtok_r(NULL, ",", &save)) {
                char *equals = strchr(item, '='), *end;
                struct json_object *v = NULL;
                if (!equals) {
                        status = ctl_fail(ctl, CTL_EXIT_USAGE, "%s; '%s' has no '='", usage, item);
                        break;
                }
                *equals = 0;
                errno = 0;
                long token = strtol(item, &end, 10);
                if (errno || end == item || *end || token < 0) {
                        status = ctl_fail(ctl, CTL_EXIT_USAGE, "%s; '%s' is not a token id", usage, item);
                        break;
                }
                if (parse_number(ctl, "logit-bias", equals + 1, &v) != CTL_EXIT_OK) {
                        status = CTL_EXIT_USAGE;
                        break;
                }
                char key[32];
                snprintf(key, sizeof(key), "%ld", token);
                json_object_object_add(bias, key, v);
        }
        free(copy);
        if (status != CTL_EXIT_OK) {
                json_object_put(bias);
                return status;
        }
        *ret = bias;
        return CTL_EXIT_OK;
}

int ctl_sampling_parse(const struct ctl *ctl, struct ctl_generation *g, int opt, const char *arg) {
        const struct sampling_option *o = &sampling_options[opt - SAMPLING_OPTION_BASE];
        struct json_object *into = o->request_level ? g->request_fields : g->params, *v = NULL, *list = NULL;
        int status = CTL_EXIT_OK;

        switch (o->kind) {
        case VALUE_INTEGER:
                status = ctl_parse_integer(ctl, o->name, arg, &v);
                break;
        case VALUE_NUMBER:
                status = parse_number(ctl, o->name, arg, &v);
                break;
        case VALUE_TRUE:
        case VALUE_FALSE:
                v = json_object_new_boolean(o->kind == VALUE_TRUE);
                break;
        case VALUE_STRING_LIST:
                if (!json_object_object_get_ex(into, o->key, &list)) {
                        list = json_object_new_array();
                        json_object_object_add(into, o->key, list);
                }
                return json_object_array_add(list, json_object_new_string(arg)) < 0
                               ? ctl_fail(ctl, CTL_EXIT_REQUEST, "out of memory")
                               : CTL_EXIT_OK;
        case VALUE_INTEGER_LIST:
                if (json_object_object_get_ex(into, o->key, &list))
                        return ctl_parse_int_list(ctl, o->name, arg, &list);
                status = ctl_parse_int_list(ctl, o->name, arg, &v);
                break;
        case VALUE_LOGIT_BIAS:
                status = parse_logit_bias(ctl, arg, &v);
                break;
        }
        if (status != CTL_EXIT_OK) {
                json_object_put(v);
                return status;
        }
        if (!v)
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "out of memory");
        json_object_object_add(into, o->key, v); /* a flag given twice keeps its last value */
        return CTL_EXIT_OK;
}
