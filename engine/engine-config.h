/* SPDX-License-Identifier: MIT */
#pragma once

/* The engine's settings, with vLLM's names; defaults sized for a small CPU machine. */

#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "pooling.h"

enum scheduling_policy {
        SCHEDULING_FCFS,
        SCHEDULING_PRIORITY,
        SCHEDULING_SLO, /* latency-sensitive requests meet their deadlines; best-effort fills the rest */
};

/* What the slo policy does with a latency-sensitive request whose SLO it cannot meet. */
enum slo_admission {
        SLO_ADMISSION_REJECT, /* refuse it at once (-EAGAIN) with a retry hint */
        SLO_ADMISSION_DEMOTE, /* serve it as best-effort */
};

struct engine_config {
        uint32_t max_num_seqs;           /* requests running at once */
        uint32_t max_num_batched_tokens; /* tokens per step */
        bool enable_chunked_prefill;
        uint32_t long_prefill_token_threshold; /* a prefill chunk takes at most this many tokens; 0 = no cap */
        uint32_t max_model_len;          /* prompt + output; 0 = the model's context length */
        uint32_t block_size;             /* tokens per KV block */
        uint64_t kv_cache_space;         /* bytes for the KV pool */
        /* A GPU backend's share of the device's memory, weights, buffers and KV pool
         * together (vLLM's gpu_memory_utilization); 0: its pool is kv_cache_space too. */
        double gpu_memory_utilization;
        /* A GPU backend launches every step's kernels one by one instead of replaying CUDA
         * graphs for decode steps (vLLM's enforce_eager). */
        bool enforce_eager;
        /* GPUs a GPU backend splits the model over, one rank each (vLLM's
         * tensor_parallel_size). */
        uint32_t tensor_parallel_size;
        bool enable_prefix_caching;
        enum scheduling_policy scheduling_policy;
        uint64_t seed;                   /* seeds requests that bring no seed of their own */
        enum pooling_type default_pooling; /* encode requests that name no pooling type */
        int32_t max_logprobs;            /* the most logprobs a request may ask for */
        /* With decodes running, every step's prompt tokens are limited so that it is predicted
         * to take at most this many times its decodes alone (engine/stall-guard.h); 0 = no
         * limit. */
        double decode_stall_limit;
        /* The slo policy (engine/slo-policy.c). */
        enum slo_admission slo_admission;
        double default_slo;      /* seconds per output token for latency-sensitive requests without one */
        double default_ttft_slo; /* seconds to the first token for latency-sensitive requests without one */
        double slo_kv_reserve;   /* fraction of the KV blocks best-effort work may not take */
        /* Latency-sensitive tokens are aimed at the time a step of the latency-sensitive
         * decodes alone takes + this - 1 times a one-decode step's, never later than their
         * slo; 0 = at the slo. */
        double slo_aim_factor;
};

void engine_config_init_default(struct engine_config *c);

/* Resolves max_model_len against the model's context length and checks every value. */
int engine_config_finalize(struct engine_config *c, uint32_t model_context_len, struct error *err);

/* Each value's name, as the settings and the stats spell it; NULL-terminated. */
extern const char *const scheduling_policy_names[];
extern const char *const slo_admission_names[];
