/* SPDX-License-Identifier: MIT */
#include <errno.h>

#include "engine-config.h"
#include "sampling-params.h"

void engine_config_init_default(struct engine_config *c) {
        *c = (struct engine_config) {
                .max_num_seqs = 64,
                .max_num_batched_tokens = 1024,
                .enable_chunked_prefill = true,
                .long_prefill_token_threshold = 0,
                .max_model_len = 0,
                .block_size = 16,
                .kv_cache_space = UINT64_C(256) << 20,
                .gpu_memory_utilization = 0.9,
                .tensor_parallel_size = 1,
                .enable_prefix_caching = true,
                .scheduling_policy = SCHEDULING_FCFS,
                .seed = 0,
                .max_logprobs = SAMPLING_DEFAULT_MAX_LOGPROBS,
                .decode_stall_limit = 2.0,
                .slo_admission = SLO_ADMISSION_REJECT,
                .default_slo = 0.05,
                .default_ttft_slo = 1.0,
                .slo_kv_reserve = 0.1,
                .slo_aim_factor = 1.05,
        };
}

/* A factor setting: 0 (off), or more than 1 and at most 1000. */
static bool valid_factor(double x) {
        return x == 0 || (x > 1 && x <= 1000);
}

int engine_config_finalize(struct engine_config *c, uint32_t model_context_len, struct error *err) {
        if (c->max_model_len == 0)
                c->max_model_len = model_context_len;
        if (c->max_model_len > model_context_len)
                return error_set(err, EINVAL, "max_model_len %u is longer than the model's context length %u",
                                 c->max_model_len, model_context_len);
        if (c->max_num_seqs < 1 || c->max_num_seqs > 4096)
                return error_set(err, EINVAL, "max_num_seqs must be in [1, 4096], got %u", c->max_num_seqs);
        if (c->max_num_batched_tokens < c->max_num_seqs)
                return error_set(err, EINVAL, "max_num_batched_tokens (%u) must be at least max_num_seqs (%u)",
                                 c->max_num_batched_tokens, c->max_num_seqs);
        if (!c->enable_chunked_prefill && c->max_num_batched_tokens < c->max_model_len)
                return error_set(err, EINVAL,
                                 "without chunked prefill, max_num_batched_tokens (%u) must be at least max_model_len (%u)",
                                 c->max_num_batched_tokens, c->max_model_len);
        if (c->block_size < 1 || c->block_size > 1024)
                return error_set(err, EINVAL, "block_size must be in [1, 1024], got %u", c->block_size);
        if (!valid_factor(c->decode_stall_limit))
                return error_set(err, EINVAL, "decode_stall_limit must be 0 (no limit) or in (1, 1000], got %g",
                                 c->decode_stall_limit);
        if (!(c->default_slo > 0 && c->default_slo <= 3600))
                return error_set(err, EINVAL, "default_slo must be in (0, 3600] seconds per token, got %g", c->default_slo);
        if (!(c->default_ttft_slo > 0 && c->default_ttft_slo <= 3600))
                return error_set(err, EINVAL, "default_ttft_slo must be in (0, 3600] seconds, got %g", c->default_ttft_slo);
        if (c->tensor_parallel_size < 1)
                return error_set(err, EINVAL, "tensor_parallel_size must be at least 1, got %u", c->tensor_parallel_size);
        if (!(c->gpu_memory_utilization >= 0 && c->gpu_memory_utilization < 1))
                return error_set(err, EINVAL, "gpu_memory_utilization must be a fraction in [0, 1), got %g",
                                 c->gpu_memory_utilization);
        if (!(c->slo_kv_reserve >= 0 && c->slo_kv_reserve < 1))
                return error_set(err, EINVAL, "slo_kv_reserve must be a fraction in [0, 1), got %g", c->slo_kv_reserve);
        if (!valid_factor(c->slo_aim_factor))
                return error_set(err, EINVAL, "slo_aim_factor must be 0 (aim at the slo) or in (1, 1000], got %g",
                                 c->slo_aim_factor);
        if (c->max_logprobs < 0)
                return error_set(err, EINVAL, "max_logprobs must be >= 0, got %d", c->max_logprobs);
        return 0;
}

const char *const scheduling_policy_names[] = {
        [SCHEDULING_FCFS] = "fcfs", [SCHEDULING_PRIORITY] = "priority", [SCHEDULING_SLO] = "slo", NULL,
};

const char *const slo_admission_names[] = {
        [SLO_ADMISSION_REJECT] = "reject", [SLO_ADMISSION_DEMOTE] = "demote", NULL,
};
