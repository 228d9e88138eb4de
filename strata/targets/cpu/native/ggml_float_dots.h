// ggml-cpu's float dot products (vec.cpp: ggml_vec_dot_f32, _f16, _bf16) as built for x86 with
// AVX-512 (and AVX512-BF16): sixteen-lane accumulators, the same fused multiply-adds, the same
// reductions (GGML_F32x16_REDUCE: sum[0] += sum[2], sum[1] += sum[3], sum[0] += sum[1], then
// gcc's _mm512_reduce_add_ps: halves, quarters, pairs). The portable build runs the lanes in
// arrays with fmaf and gives the same floats.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "ggml_blocks.h"

#if defined(__AVX512F__) && !defined(STRATA_PORTABLE)
#define STRATA_AVX512 1
#include <immintrin.h>
#else
#define STRATA_AVX512 0
#endif

namespace strata {

// _mm512_reduce_add_ps as gcc expands it
static inline float reduce16(const float v[16]) {
    float t3[8], t6[4];
    for (int i = 0; i < 8; ++i) t3[i] = v[i + 8] + v[i];
    for (int i = 0; i < 4; ++i) t6[i] = t3[i + 4] + t3[i];
    return (t6[0] + t6[2]) + (t6[1] + t6[3]);
}

// Four accumulators of sixteen lanes over 64 values at a time, reduced to one float.
template <typename Load>
static inline float dot16x4(int64_t np, Load load) {
    float sum[4][16] = {};
#if STRATA_AVX512
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; ++j) {
            __m512 a, b;
            load.vec(i + 16 * j, a, b);
            acc[j] = _mm512_fmadd_ps(a, b, acc[j]);
        }
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(sum[j], acc[j]);
#else
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; ++j)
            for (int l = 0; l < 16; ++l) {
                float a, b;
                load.one(i + 16 * j + l, a, b);
                sum[j][l] = std::fmaf(a, b, sum[j][l]);
            }
#endif
    for (int l = 0; l < 16; ++l) {
        sum[0][l] += sum[2][l];
        sum[1][l] += sum[3][l];
        sum[0][l] += sum[1][l];
    }
    return reduce16(sum[0]);
}

struct LoadF32 {
    const float *w, *x;
    void one(int64_t i, float& a, float& b) const { a = w[i]; b = x[i]; }
#if STRATA_AVX512
    void vec(int64_t i, __m512& a, __m512& b) const { a = _mm512_loadu_ps(w + i); b = _mm512_loadu_ps(x + i); }
#endif
};

struct LoadF16 {
    const uint16_t *w, *x;
    void one(int64_t i, float& a, float& b) const { a = f16_to_f32(w[i]); b = f16_to_f32(x[i]); }
#if STRATA_AVX512
    void vec(int64_t i, __m512& a, __m512& b) const {
        a = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(w + i)));
        b = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(x + i)));
    }
#endif
};

// ggml_vec_dot_f32: a float sum; leftovers added one by one (not fused, as the oracle's build).
static inline float dot_f32(const float* w, const float* x, int64_t k) {
    const int64_t np = k & ~(int64_t)63;
    float sum = dot16x4(np, LoadF32{w, x});
    for (int64_t i = np; i < k; ++i) sum += w[i] * x[i];
    return sum;
}

// ggml_vec_dot_f16 (x already float16): a double sum; leftovers as float products.
static inline float dot_f16(const uint16_t* w, const uint16_t* x, int64_t k) {
    const int64_t np = k & ~(int64_t)63;
    double sum = dot16x4(np, LoadF16{w, x});
    for (int64_t i = np; i < k; ++i) sum += (double)(f16_to_f32(w[i]) * f16_to_f32(x[i]));
    return (float)sum;
}

// vdpbf16ps as Intel specifies it: per lane, acc += odd product, then += even product, each sum
// rounded to nearest even, denormal inputs and results flushed to zero (the products are exact).
static inline float ftz(float v) { return std::fabs(v) < FLT_MIN ? std::copysign(0.0f, v) : v; }
static inline float bf16_daz(uint16_t h) { return (h & 0x7f80) == 0 ? 0.0f : bf16_to_f32(h); }

static inline void dpbf16(float acc[16], const uint16_t* w, const uint16_t* x) {
    for (int l = 0; l < 16; ++l) {
        acc[l] = ftz(acc[l] + bf16_daz(w[2 * l + 1]) * bf16_daz(x[2 * l + 1]));
        acc[l] = ftz(acc[l] + bf16_daz(w[2 * l]) * bf16_daz(x[2 * l]));
    }
}

// ggml_vec_dot_bf16 with AVX512-BF16: two accumulators over 64 values at a time (32 pairs
// each), each reduced and added to a double; leftovers as float products.
static inline float dot_bf16(const uint16_t* w, const uint16_t* x, int64_t k) {
    float c1[16] = {}, c2[16] = {};
    int64_t i = 0;
#if STRATA_AVX512 && defined(__AVX512BF16__)
    __m512 a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps();
    for (; i + 64 <= k; i += 64) {
        a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_loadu_si512(w + i), (__m512bh)_mm512_loadu_si512(x + i));
        a2 = _mm512_dpbf16_ps(a2, (__m512bh)_mm512_loadu_si512(w + i + 32), (__m512bh)_mm512_loadu_si512(x + i + 32));
    }
    _mm512_storeu_ps(c1, a1);
    _mm512_storeu_ps(c2, a2);
#else
    for (; i + 64 <= k; i += 64) {
        dpbf16(c1, w + i, x + i);
        dpbf16(c2, w + i + 32, x + i + 32);
    }
#endif
    double sum = 0.0;
    sum += (double)reduce16(c1);
    sum += (double)reduce16(c2);
    for (; i < k; ++i) sum += (double)(bf16_to_f32(w[i]) * bf16_to_f32(x[i]));
    return (float)sum;
}

}  // namespace strata
