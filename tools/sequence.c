/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>

#include "model.h"
#include "sequence.h"

struct sequence {
        struct cpu_runner *runner;
        struct cpu_runner_config config;
        uint32_t n_vocab;
        uint32_t length;
        uint32_t n_prompt; /* the first feed after a reset is the prompt */
        int32_t *block_table; /* (n_kv_blocks) the identity: this sequence owns the pool */
        int32_t *positions;   /* (max_batch_tokens) */
        int32_t *seq_ids;     /* (max_batch_tokens) all zero */
        int32_t *outputs;     /* (max_batch_tokens) */
};

int sequence_new(struct cpu_runner *runner, const struct cpu_runner_config *config, struct sequence **ret,
                 struct error *err) {
        if ((uint64_t) config->n_kv_blocks * config->block_size < config->max_model_len)
                return error_set(err, EINVAL, "a KV pool of %u blocks of %u tokens cannot hold max_model_len %u",
                                 config->n_kv_blocks, config->block_size, config->max_model_len);
        struct sequence *s = calloc(1, sizeof(*s));
        if (!s)
                return error_set(err, ENOMEM, "out of memory");
        s->runner = runner;
        s->config = *config;
        s->block_table = calloc(config->n_kv_blocks, sizeof(int32_t));
        s->positions = calloc(config->max_batch_tokens, sizeof(int32_t));
        s->seq_ids = calloc(config->max_batch_tokens, sizeof(int32_t));
        s->outputs = calloc(config->max_batch_tokens, sizeof(int32_t));
        if (!s->block_table || !s->positions || !s->seq_ids || !s->outputs) {
                sequence_free(s);
                return error_set(err, ENOMEM, "out of memory");
        }
        for (uint32_t i = 0; i < config->n_kv_blocks; i++)
                s->block_table[i] = (int32_t) i;
        *ret = s;
        return 0;
}

void sequence_free(struct sequence *s) {
        if (!s)
                return;
        free(s->block_table);
        free(s->positions);
        free(s->seq_ids);
        free(s->outputs);
        free(s);
}

void sequence_reset(struct sequence *s) {
        s->length = 0;
        s->n_prompt = 0;
}

uint32_t sequence_length(const struct sequence *s) {
        return s->length;
}

int sequence_feed(struct sequence *s, const int32_t *tokens, size_t n, bool all_logits, float *logits,
                  struct error *err) {
        const struct model *m = cpu_runner_model(s->runner);

        if (n == 0)
                return error_set(err, EINVAL, "nothing to feed");
        if (n > s->config.max_model_len - s->length)
                return error_set(err, ENOSPC, "%zu more tokens would make the sequence longer than max_model_len %u",
                                 n, s->config.max_model_len);
        if (s->length == 0)
                s->n_prompt = (uint32_t) n;
        struct batch_seq seq = { s->block_table, s->config.n_kv_blocks, s->n_prompt };
        for (size_t done = 0; done < n;) {
                uint32_t chunk = (uint32_t) (n - done < s->config.max_batch_tokens ? n - done : s->config.max_batch_tokens);
                bool last_chunk = done + chunk == n;
                for (uint32_t i = 0; i < chunk; i++) {
                        s->positions[i] = (int32_t) (s->length + i);
                        s->outputs[i] = (int32_t) i;
                }
                struct batch b = {
                        .n_tokens = chunk,
                        .tokens = tokens + done,
                        .positions = s->positions,
                        .seq_ids = s->seq_ids,
                        .n_seqs = 1,
                        .seqs = &seq,
                        .n_outputs = all_logits ? chunk : (last_chunk ? 1 : 0),
                        .output_tokens = all_logits ? s->outputs : s->outputs + chunk - 1,
                };
                float *out = all_logits ? logits + done * m->hp.n_vocab : logits;
                int r = cpu_runner_forward(s->runner, &b, out, err);
                if (r < 0)
                        return r;
                s->length += chunk;
                done += chunk;
        }
        return 0;
}
