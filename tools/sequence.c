/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sequence.h"

struct sequence {
        const struct backend *backend;
        uint32_t max_batch_tokens;
        uint32_t max_model_len;
        uint32_t n_kv_blocks;
        uint32_t n_vocab;
        uint32_t length;
        uint32_t n_prompt; /* the first feed after a reset is the prompt */
        int32_t *block_table; /* (n_kv_blocks) the identity: this sequence owns the pool */
        int32_t *positions;   /* (max_batch_tokens) */
        int32_t *seq_ids;     /* (max_batch_tokens) all zero */
        int32_t *outputs;     /* (max_batch_tokens) */
};

int sequence_new(const struct backend *backend, const struct backend_options *options, uint32_t n_vocab,
                 struct sequence **ret, struct error *err) {
        const struct backend_kv_geometry *kv = &backend->kv;
        if ((uint64_t) kv->n_blocks * kv->block_size < options->max_model_len)
                return error_set(err, EINVAL, "a KV pool of %u blocks of %u tokens cannot hold max_model_len %u",
                                 kv->n_blocks, kv->block_size, options->max_model_len);
        struct sequence *s = calloc(1, sizeof(*s));
        if (!s)
                return error_set(err, ENOMEM, "out of memory");
        s->backend = backend;
        s->max_batch_tokens = options->max_batch_tokens;
        s->max_model_len = options->max_model_len;
        s->n_kv_blocks = kv->n_blocks;
        s->n_vocab = n_vocab;
        s->block_table = calloc(kv->n_blocks, sizeof(int32_t));
        s->positions = calloc(options->max_batch_tokens, sizeof(int32_t));
        s->seq_ids = calloc(options->max_batch_tokens, sizeof(int32_t));
        s->outputs = calloc(options->max_batch_tokens, sizeof(int32_t));
        if (!s->block_table || !s->positions || !s->seq_ids || !s->outputs) {
                sequence_free(s);
                return error_set(err, ENOMEM, "out of memory");
        }
        for (uint32_t i = 0; i < kv->n_blocks; i++)
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
        if (n == 0)
                return error_set(err, EINVAL, "nothing to feed");
        if (n > s->max_model_len - s->length)
                return error_set(err, ENOSPC, "%zu more tokens would make the sequence longer than max_model_len %u",
                                 n, s->max_model_len);
        if (s->length == 0)
                s->n_prompt = (uint32_t) n;
        struct batch_seq seq = { s->block_table, s->n_kv_blocks, s->n_prompt };
        for (size_t done = 0; done < n;) {
                uint32_t chunk = (uint32_t) (n - done < s->max_batch_tokens ? n - done : s->max_batch_tokens);
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
                float *rows;
                int r = s->backend->forward(s->backend->impl, &b, &rows, err);
                if (r < 0)
                        return r;
                if (b.n_outputs)
                        memcpy(all_logits ? logits + done * s->n_vocab : logits, rows,
                               (size_t) b.n_outputs * s->n_vocab * sizeof(float));
                s->length += chunk;
                done += chunk;
        }
        return 0;
}
