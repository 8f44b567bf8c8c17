/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>

#include "batch.h"

int batch_validate(const struct batch *b, const struct batch_limits *limits, struct error *err) {
        if (b->n_tokens == 0 || b->n_tokens > limits->max_tokens)
                return error_set(err, EINVAL, "batch of %u tokens; 1 to %u allowed", b->n_tokens, limits->max_tokens);
        if (b->n_outputs > b->n_tokens)
                return error_set(err, EINVAL, "batch asks for %u outputs from %u tokens", b->n_outputs, b->n_tokens);
        for (uint32_t i = 0; i < b->n_outputs; i++) {
                if (b->output_tokens[i] < 0 || (uint32_t) b->output_tokens[i] >= b->n_tokens)
                        return error_set(err, EINVAL, "output token index %d out of range", b->output_tokens[i]);
                if (i > 0 && b->output_tokens[i] <= b->output_tokens[i - 1])
                        return error_set(err, EINVAL, "output token indices must rise: %d follows %d",
                                         b->output_tokens[i], b->output_tokens[i - 1]);
        }
        if (b->n_hidden > b->n_tokens || (b->n_hidden && !b->hidden))
                return error_set(err, EINVAL, "batch asks for %u hidden states from %u tokens%s", b->n_hidden, b->n_tokens,
                                 b->hidden ? "" : " and gives no room for them");
        for (uint32_t i = 0; i < b->n_hidden; i++) {
                if (b->hidden_tokens[i] < 0 || (uint32_t) b->hidden_tokens[i] >= b->n_tokens)
                        return error_set(err, EINVAL, "hidden-state token index %d out of range", b->hidden_tokens[i]);
                if (i > 0 && b->hidden_tokens[i] <= b->hidden_tokens[i - 1])
                        return error_set(err, EINVAL, "hidden-state token indices must rise: %d follows %d",
                                         b->hidden_tokens[i], b->hidden_tokens[i - 1]);
        }
        for (uint32_t t = 0; t < b->n_tokens; t++) {
                if (b->tokens[t] < 0 || (uint32_t) b->tokens[t] >= limits->n_vocab)
                        return error_set(err, EINVAL, "token id %d outside the vocabulary [0, %u)", b->tokens[t], limits->n_vocab);
                if (b->seq_ids[t] < 0 || (uint32_t) b->seq_ids[t] >= b->n_seqs)
                        return error_set(err, EINVAL, "token %u names sequence %d of %u", t, b->seq_ids[t], b->n_seqs);
                const struct batch_seq *seq = &b->seqs[b->seq_ids[t]];
                int32_t pos = b->positions[t];
                if (pos < 0 || (uint32_t) pos >= limits->max_model_len ||
                    (uint32_t) pos / limits->block_size >= seq->n_blocks)
                        return error_set(err, EINVAL, "position %d is outside its sequence's %u KV blocks (max_model_len %u)",
                                         pos, seq->n_blocks, limits->max_model_len);
                for (uint32_t j = 0; j <= (uint32_t) pos / limits->block_size; j++)
                        if (seq->block_table[j] < 0 || (uint32_t) seq->block_table[j] >= limits->n_blocks)
                                return error_set(err, EINVAL, "block id %d outside the KV pool of %u blocks",
                                                 seq->block_table[j], limits->n_blocks);
        }
        return 0;
}
