/* SPDX-License-Identifier: MIT */
/* Fuzzes the GGUF reader and the model loader on top of it: any byte string must give either
 * a model or an error, never a crash, a leak or an out-of-bounds read. Built with libFuzzer,
 * or with fuzz-main.c to replay the committed corpus as a regression test. */
#include "config.h"

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink; /* keeps the reads below from being optimized away */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct gguf_file *f = NULL;
        struct model *m = NULL;
        struct error err;

        if (gguf_parse(data, size, "fuzz-input", &f, &err) < 0)
                return 0;

        /* Touch what the parser hands out, so that a bad pointer or count shows here rather
         * than in a later user: every integer array element and every tensor's bytes. */
        uint64_t sum = 0;
        for (uint64_t i = 0; i < f->n_kv; i++) {
                const struct gguf_value *v = &f->kv[i].value;
                if (v->type != GGUF_VALUE_ARRAY)
                        continue;
                if (v->array.strings) {
                        for (uint64_t j = 0; j < v->array.count; j++) {
                                struct gguf_string s = v->array.strings[j];
                                sum += s.len ? (uint8_t) s.data[s.len - 1] : 0;
                        }
                } else if (v->array.type != GGUF_VALUE_ARRAY && v->array.type != GGUF_VALUE_F32 &&
                           v->array.type != GGUF_VALUE_F64 && v->array.type != GGUF_VALUE_BOOL) {
                        for (uint64_t j = 0; j < v->array.count; j++)
                                sum += (uint64_t) gguf_array_int(v, j);
                }
        }
        for (uint64_t i = 0; i < f->n_tensors; i++) {
                const struct gguf_tensor *t = &f->tensors[i];
                if (t->n_bytes)
                        sum += ((const uint8_t *) t->data)[0] + ((const uint8_t *) t->data)[t->n_bytes - 1];
        }
        sink = sum;

        /* model_from_gguf owns f from here, on failure too. */
        if (model_from_gguf(f, &m, &err) == 0) {
                sink = model_weight_bytes(m);
                model_free(m);
        }
        return 0;
}
