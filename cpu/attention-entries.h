/* SPDX-License-Identifier: MIT */
/* The set's attn_scores and attn_values (dot.h) for a set whose attention header
 * (attention-avx2.h, attention-avx512.h) defines attn_scores_runs() for head sizes that are
 * multiples of 64, attn_values_part() for up to four queries, and ATTN_FOLD_COLUMNS /
 * ATTN_LANE_COLUMNS, the columns one part takes folded (64 lanes) and by lane (16). Other
 * head sizes go one position at a time. Included once per set, at the end of its header. */

/* inlined with the head size constant for the common sizes: the loops over a row unroll */
__attribute__((target(DOT_TARGET))) static void DOT_FN(attn_scores)(const struct f16_rows *keys, unsigned n_pos, const float *q,
                                                                    size_t q_stride, unsigned n_q, size_t n, bool wide,
                                                                    float scale, float *scores, size_t scores_stride) {
        if (n == 64)
                attn_scores_runs(keys, n_pos, q, q_stride, n_q, 64, wide, scale, scores, scores_stride);
        else if (n == 128)
                attn_scores_runs(keys, n_pos, q, q_stride, n_q, 128, wide, scale, scores, scores_stride);
        else if (n % 64 == 0)
                attn_scores_runs(keys, n_pos, q, q_stride, n_q, n, wide, scale, scores, scores_stride);
        else
                attn_scores_by_position(wide ? DOT_FN(dot_f16_wide) : DOT_FN(dot_f16), keys, n_pos, q, q_stride, n_q, n, scale,
                                        scores, scores_stride);
}

__attribute__((target(DOT_TARGET))) static void DOT_FN(attn_values)(const struct f16_rows *values, unsigned n_pos,
                                                                    const float *w, size_t w_stride, unsigned n_q, size_t n,
                                                                    unsigned n_lanes, unsigned first_row, unsigned n_rows,
                                                                    float *lanes, size_t lanes_stride) {
        if (n % 64 != 0) {
                attn_values_by_position(DOT_FN(axpy_f16), values, n_pos, w, w_stride, n_q, n, n_lanes, first_row, n_rows,
                                        lanes, lanes_stride);
                return;
        }
        /* 64 lanes are folded as they are made, the lanes never going through memory: at a few
         * hundred positions a lane has only a few, and storing and re-reading them had cost
         * as much as the products */
        bool fold = n_lanes == 64;
        unsigned end_row = first_row + n_rows;
        if (end_row > 16)
                end_row = 16;
        if (end_row > n_pos)
                end_row = n_pos;
        for (unsigned e = first_row; e < end_row; e++)
                for (size_t i = 0; i < n; i += fold ? ATTN_FOLD_COLUMNS : ATTN_LANE_COLUMNS)
                        for (unsigned g0 = 0; g0 < n_q; g0 += 4) {
                                const float *wg = w + g0 * w_stride;
                                float *lg = lanes + g0 * lanes_stride;
                                /* a constant count of queries keeps the sums in registers */
                                switch (n_q - g0) {
                                case 1: attn_values_part(values, e, n_pos, wg, w_stride, 1, i, n, lg, lanes_stride, fold); break;
                                case 2: attn_values_part(values, e, n_pos, wg, w_stride, 2, i, n, lg, lanes_stride, fold); break;
                                case 3: attn_values_part(values, e, n_pos, wg, w_stride, 3, i, n, lg, lanes_stride, fold); break;
                                default: attn_values_part(values, e, n_pos, wg, w_stride, 4, i, n, lg, lanes_stride, fold); break;
                                }
                        }
}
