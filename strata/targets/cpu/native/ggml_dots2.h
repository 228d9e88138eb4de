// Two weight rows at once with AVX-512 (VNNI, BW, DQ): row r's eight lanes in the low half of a
// 512-bit register, row r+1's in the high half. Each half runs exactly the operations of the
// one-row kernel (ggml_dots.h) on its row, so both rows' floats are bit for bit the same as
// one at a time; the second row rides along in the same instructions.
#pragma once

#include "ggml_dots.h"

#if STRATA_AVX2 && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
    defined(__AVX512VNNI__)
#define STRATA_ROWS2 1

namespace strata {

static inline __m512i dot_u8_x2(__m512i ux, __m512i y) { return _mm512_dpbusd_epi32(_mm512_setzero_si512(), ux, y); }

// |x| times y negated where x < 0: the products of _mm256_sign_epi8's trick, for 64 bytes
static inline __m512i dot_i8_x2(__m512i x, __m512i y) {
    const __m512i sy = _mm512_mask_sub_epi8(y, _mm512_movepi8_mask(x), _mm512_setzero_si512(), y);
    return dot_u8_x2(_mm512_abs_epi8(x), sy);
}

// Two blocks' 32 nibbles each: [row0 low, row0 high | row1 low, row1 high]
static inline __m512i nibbles32_x2(const uint8_t* p0, const uint8_t* p1) {
    const __m256i t = _mm256_set_m128i(_mm_loadu_si128((const __m128i*)p1), _mm_loadu_si128((const __m128i*)p0));
    const __m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(t), _mm256_srli_epi16(t, 4), 1);
    return _mm512_and_si512(_mm512_shuffle_i64x2(a, a, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(0x0f));
}

static inline __m512i join_x2(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

template <int TYPE>
static inline __m512i block32_lanes_x2(const uint8_t* b0, const uint8_t* b1, const int8_t* y) {
    const __m512i qy = _mm512_broadcast_i64x4(load256(y));
    switch (TYPE) {
        case T_Q4_0: return dot_i8_x2(_mm512_sub_epi8(nibbles32_x2(b0 + 2, b1 + 2), _mm512_set1_epi8(8)), qy);
        case T_Q4_1: return dot_u8_x2(nibbles32_x2(b0 + 4, b1 + 4), qy);
        case T_Q8_0: return dot_i8_x2(join_x2(load256(b0 + 2), load256(b1 + 2)), qy);
        default: return join_x2(block32_lanes(TYPE, b0, y).v, block32_lanes(TYPE, b1, y).v);
    }
}

static inline void acc_fma_x2(__m512& acc, float d0, float d1, __m512i lanes) {
    const __m512 d = _mm512_insertf32x8(_mm512_set1_ps(d0), _mm256_set1_ps(d1), 1);
    acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(lanes), acc);
}

static inline float hsum8_low(__m512 a) { return hsum8(Acc8{_mm512_castps512_ps256(a)}); }
static inline float hsum8_high(__m512 a) { return hsum8(Acc8{_mm512_extractf32x8_ps(a, 1)}); }

// dot_q8_0_type / dot_q8_1_type for the 2 * PAIRS rows at w, w + row_bytes, ...: a pair per
// 512-bit accumulator, the pairs' chains of fused multiply-adds interleaved (one chain alone
// waits on the fma's latency every block).
template <int TYPE, int BYTES, int PAIRS>
static void dotn_block32(const uint8_t* w, int64_t row_bytes, const void* act, int64_t nb, float* out) {
    constexpr bool Q81 = TYPE == T_Q4_1 || TYPE == T_Q5_1;
    constexpr int ROWS = 2 * PAIRS;
    __m512 acc[PAIRS];
    float summs[ROWS];
    for (int p = 0; p < PAIRS; ++p) acc[p] = _mm512_setzero_ps();
    for (int r = 0; r < ROWS; ++r) summs[r] = 0.0f;
    for (int64_t i = 0; i < nb; ++i) {
        float yd;
        const int8_t* qs;
        if constexpr (Q81) {
            const ActQ8_1& y = ((const ActQ8_1*)act)[i];
            for (int r = 0; r < ROWS; ++r) summs[r] = std::fmaf(load_f16(w + r * row_bytes + i * BYTES + 2), y.s, summs[r]);
            yd = y.d;
            qs = y.qs;
        } else {
            const ActQ8_0& y = ((const ActQ8_0*)act)[i];
            yd = y.d;
            qs = y.qs;
        }
        for (int p = 0; p < PAIRS; ++p) {
            const uint8_t* b0 = w + (2 * p) * row_bytes + i * BYTES;
            const uint8_t* b1 = b0 + row_bytes;
            acc_fma_x2(acc[p], load_f16(b0) * yd, load_f16(b1) * yd, block32_lanes_x2<TYPE>(b0, b1, qs));
        }
    }
    for (int p = 0; p < PAIRS; ++p) {
        out[2 * p] = hsum8_low(acc[p]) + summs[2 * p];
        out[2 * p + 1] = hsum8_high(acc[p]) + summs[2 * p + 1];
    }
}

// The four-row kernel of a type, or null where there is none (the caller takes rows one at a time).
using Dot4 = void (*)(const uint8_t*, int64_t, const void*, int64_t, float*);

static inline Dot4 dot4_of(int type) {
    switch (type) {
        case T_Q4_0: return dotn_block32<T_Q4_0, 18, 2>;
        case T_Q4_1: return dotn_block32<T_Q4_1, 20, 2>;
        case T_Q5_0: return dotn_block32<T_Q5_0, 22, 2>;
        case T_Q5_1: return dotn_block32<T_Q5_1, 24, 2>;
        case T_Q8_0: return dotn_block32<T_Q8_0, 34, 2>;
        default: return nullptr;
    }
}

}  // namespace strata
#else
#define STRATA_ROWS2 0
#endif
