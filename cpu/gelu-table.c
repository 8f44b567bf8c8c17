/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <math.h>
#include <pthread.h>

#include "float16.h"
#include "gelu-table.h"

#define GELU_SQRT_2_OVER_PI 0.79788456080286535587989211986876f
#define GELU_COEF_A 0.044715f

static float table[1 << 16];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void build_table(void) {
        for (uint32_t h = 0; h < (1u << 16); h++) {
                float x = f16_to_f32((uint16_t) h);
                float gelu = 0.5f * x * (1.0f + tanhf(GELU_SQRT_2_OVER_PI * x * fmaf(GELU_COEF_A * x, x, 1.0f)));
                table[h] = f16_to_f32(f32_to_f16(gelu));
        }
}

const float *gelu_table(void) {
        pthread_once(&table_once, build_table);
        return table;
}
