// ggml's dequantize_row_* (ggml-quants.c) for one row: each value with ggml's float operations in
// its order, no fused multiply-adds (ggml-base is built without FMA), so a gathered row equals
// the gguf package's dequantizer bit for bit.
#pragma once

#include "ggml_dots.h"

namespace strata {

static inline void dequant_row(int type, const uint8_t* b, int64_t k, float* y) {
    switch (type) {
        case T_F32: std::memcpy(y, b, 4 * k); return;
        case T_F16: for (int64_t i = 0; i < k; ++i) y[i] = f16_to_f32(load_u16(b + 2 * i)); return;
        case T_BF16: for (int64_t i = 0; i < k; ++i) y[i] = bf16_to_f32(load_u16(b + 2 * i)); return;
    }
    const BlockInfo bi = block_info(type);
    for (int64_t ib = 0; ib < k / bi.block; ++ib, b += bi.bytes, y += bi.block) {
        switch (type) {
            case T_Q4_0: {
                const float d = load_f16(b);
                for (int j = 0; j < 16; ++j) { y[j] = ((b[2 + j] & 15) - 8) * d; y[j + 16] = ((b[2 + j] >> 4) - 8) * d; }
                break;
            }
            case T_Q4_1: {
                const float d = load_f16(b), m = load_f16(b + 2);
                for (int j = 0; j < 16; ++j) { y[j] = (b[4 + j] & 15) * d + m; y[j + 16] = (b[4 + j] >> 4) * d + m; }
                break;
            }
            case T_Q5_0: case T_Q5_1: {
                const bool one = type == T_Q5_1;
                const float d = load_f16(b), m = one ? load_f16(b + 2) : 0.0f;
                int32_t w[32];
                values_q5(b + (one ? 4 : 2), b + (one ? 8 : 6), one ? 0 : 16, w);
                for (int j = 0; j < 32; ++j) y[j] = one ? w[j] * d + m : w[j] * d;
                break;
            }
            case T_Q8_0: {
                const float d = load_f16(b);
                for (int j = 0; j < 32; ++j) y[j] = (int8_t)b[2 + j] * d;
                break;
            }
            case T_IQ4_NL: {
                const float d = load_f16(b);
                for (int j = 0; j < 16; ++j) { y[j] = d * kvalues_iq4nl[b[2 + j] & 15]; y[j + 16] = d * kvalues_iq4nl[b[2 + j] >> 4]; }
                break;
            }
            case T_Q2_K: {
                const float d = load_f16(b + 80), dmin = load_f16(b + 82);
                for (int p = 0; p < 256; ++p) {
                    const int n = p >> 7, j = (p >> 5) & 3, l = p & 31, sc = b[p >> 4];
                    const float dl = d * (sc & 15), ml = dmin * (sc >> 4);
                    y[p] = dl * ((b[16 + 32 * n + l] >> (2 * j)) & 3) - ml;
                }
                break;
            }
            case T_Q3_K: {
                const float d = load_f16(b + 108);
                int8_t sc[16];
                q3k_scales(b + 96, sc);
                for (int p = 0; p < 256; ++p) {
                    const int n = p >> 7, j = (p >> 5) & 3, l = p & 31;
                    const int q = ((b[32 + 32 * n + l] >> (2 * j)) & 3) - ((b[l] >> (4 * n + j)) & 1 ? 0 : 4);
                    y[p] = (d * sc[p >> 4]) * q;
                }
                break;
            }
            case T_Q4_K: case T_Q5_K: {
                const float d = load_f16(b), dmin = load_f16(b + 2);
                const uint8_t* qs = type == T_Q4_K ? b + 16 : b + 48;
                for (int p = 0; p < 256; ++p) {
                    const int sub = p >> 5, l = p & 31, j = sub >> 1;
                    int sc, m;
                    scale_min_k4(sub, b + 4, &sc, &m);
                    int q = (sub & 1) ? qs[32 * j + l] >> 4 : qs[32 * j + l] & 15;
                    if (type == T_Q5_K) q |= ((b[16 + l] >> sub) & 1) << 4;
                    y[p] = (d * sc) * q - dmin * m;
                }
                break;
            }
            case T_Q6_K: {
                const float d = load_f16(b + 208);
                const int8_t* sc = (const int8_t*)(b + 192);
                for (int p = 0; p < 256; ++p) {
                    const int n = p >> 7, kq = (p >> 5) & 3, l = p & 31;
                    const uint8_t lo = b[64 * n + 32 * (kq & 1) + l];
                    const int q = ((kq < 2 ? lo & 15 : lo >> 4) | (((b[128 + 32 * n + l] >> (2 * kq)) & 3) << 4)) - 32;
                    y[p] = d * sc[p >> 4] * q;
                }
                break;
            }
            case T_IQ4_XS: {
                const float d = load_f16(b);
                const uint16_t sh = load_u16(b + 2);
                for (int p = 0; p < 256; ++p) {
                    const int ib = p >> 5, l = p & 31;
                    const int ls = ((b[4 + ib / 2] >> (4 * (ib & 1))) & 15) | (((sh >> (2 * ib)) & 3) << 4);
                    const int q = l < 16 ? b[8 + 16 * ib + l] & 15 : b[8 + 16 * ib + l - 16] >> 4;
                    y[p] = (d * (ls - 32)) * kvalues_iq4nl[q];
                }
                break;
            }
        }
    }
}

}  // namespace strata
