/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "decode-calibration.h"
#include "quantile.h"

#define CALIBRATION_CONTEXT 128
#define CALIBRATION_ROUNDS 3
_Static_assert(STEP_MODEL_CALIBRATED_DECODES <= CALIBRATION_CONTEXT, "a batch of decodes fits the token arrays");
#define MAX_DECODES STEP_MODEL_CALIBRATED_DECODES

struct calibration_batch {
        int32_t tokens[CALIBRATION_CONTEXT]; /* the prompt's, or one per decode */
        int32_t positions[CALIBRATION_CONTEXT];
        int32_t seq_ids[CALIBRATION_CONTEXT];
        int32_t outputs[MAX_DECODES];
        struct batch_seq seqs[MAX_DECODES];
        /* each decode's block table: the prompt's blocks (at most one a position), then one
         * of its own */
        int32_t tables[MAX_DECODES][CALIBRATION_CONTEXT + 1];
};

static int timed_step(const struct backend *backend, const struct batch *b, double *seconds, struct error *err) {
        float *logits;
        double started = monotonic_seconds();
        int r = backend->forward(backend->impl, b, &logits, err);
        *seconds = monotonic_seconds() - started;
        return r;
}

static int run_decodes(const struct backend *backend, struct calibration_batch *cb, uint32_t n, uint32_t context,
                       uint32_t n_vocab, double *seconds, struct error *err) {
        for (uint32_t i = 0; i < n; i++) {
                cb->tokens[i] = (int32_t) ((context + i) % n_vocab);
                cb->positions[i] = (int32_t) context;
                cb->seq_ids[i] = (int32_t) i;
                cb->outputs[i] = (int32_t) i;
        }
        struct batch b = { .n_tokens = n, .tokens = cb->tokens, .positions = cb->positions, .seq_ids = cb->seq_ids,
                           .n_seqs = n, .seqs = cb->seqs, .n_outputs = n, .output_tokens = cb->outputs };
        return timed_step(backend, &b, seconds, err);
}

int decode_calibration_run(const struct backend *backend, struct kv_blocks *kv, uint32_t max_decodes,
                           uint32_t max_tokens, uint32_t max_model_len, uint32_t n_vocab,
                           struct decode_calibration *ret, struct error *err) {
        uint32_t block = kv_blocks_block_size(kv);
        uint32_t context = CALIBRATION_CONTEXT < max_tokens ? CALIBRATION_CONTEXT : max_tokens;
        if (context >= max_model_len)
                context = max_model_len - 1;
        context -= context % block; /* so that each decode's token lands in a block of its own */
        uint32_t n = max_decodes < MAX_DECODES ? max_decodes : MAX_DECODES;
        if (n > max_tokens)
                n = max_tokens; /* a batch of them must fit the token budget */
        memset(ret, 0, sizeof(*ret));
        if (n == 0 || n_vocab == 0 || kv_blocks_n_free(kv) < context / block + n)
                return 0;

        struct calibration_batch *cb = calloc(1, sizeof(*cb));
        struct kv_block_list prompt = { 0 }, own = { 0 };
        int r = -ENOMEM;
        if (!cb || kv_blocks_allocate(kv, &prompt, context) < 0 || kv_blocks_allocate(kv, &own, n * block) < 0) {
                r = error_set(err, ENOMEM, "out of memory for the decode calibration");
                goto done;
        }
        uint32_t n_prompt_blocks = context / block;
        for (uint32_t i = 0; i < n; i++) {
                memcpy(cb->tables[i], prompt.ids, n_prompt_blocks * sizeof(int32_t));
                cb->tables[i][n_prompt_blocks] = own.ids[i];
                cb->seqs[i] = (struct batch_seq) { cb->tables[i], n_prompt_blocks + 1, context };
        }
        double seconds;
        if (context > 0) {
                for (uint32_t p = 0; p < context; p++) {
                        cb->tokens[p] = (int32_t) (p % n_vocab);
                        cb->positions[p] = (int32_t) p;
                        cb->seq_ids[p] = 0;
                }
                cb->outputs[0] = (int32_t) context - 1;
                struct batch b = { .n_tokens = context, .tokens = cb->tokens, .positions = cb->positions,
                                   .seq_ids = cb->seq_ids, .n_seqs = 1, .seqs = cb->seqs, .n_outputs = 1,
                                   .output_tokens = cb->outputs };
                if ((r = timed_step(backend, &b, &seconds, err)) < 0)
                        goto done;
        }
        /* the first decode step touches what the prompt did not (its scratch, the logits) */
        if ((r = run_decodes(backend, cb, n, context, n_vocab, &seconds, err)) < 0)
                goto done;
        double times[MAX_DECODES][CALIBRATION_ROUNDS];
        for (uint32_t round = 0; round < CALIBRATION_ROUNDS; round++)
                for (uint32_t k = 1; k <= n; k++)
                        if ((r = run_decodes(backend, cb, k, context, n_vocab, &times[k - 1][round], err)) < 0)
                                goto done;
        for (uint32_t k = 0; k < n; k++)
                ret->seconds[k] = quantile_sorting(times[k], CALIBRATION_ROUNDS, 0.5);
        ret->n = n;
        ret->context = context + 1; /* with its own token */
        r = 0;
done:
        kv_blocks_release(kv, &own);
        kv_blocks_release(kv, &prompt);
        kv_block_list_free(&own);
        kv_block_list_free(&prompt);
        free(cb);
        return r;
}
