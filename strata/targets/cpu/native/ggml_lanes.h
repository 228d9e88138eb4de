// The float side of ggml-cpu's x86 dot products: eight float32 lanes (one __m256), each the
// running sum of its block's integer lane times the block's scale (one fused multiply-add per
// block), reduced by hsum_float_8's tree at the end. The integer lane sums are exact, so how they
// are computed (AVX2, VNNI or plain C) does not change a bit; the lanes and the float operations'
// order do, and both builds run the same ones: the portable build (no AVX2) keeps the eight lanes
// in an array and calls fmaf, which rounds once like vfmadd.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__AVX2__) && defined(__FMA__) && !defined(STRATA_PORTABLE)
#define STRATA_AVX2 1
#include <immintrin.h>
#else
#define STRATA_AVX2 0
#endif

namespace strata {

#if STRATA_AVX2
struct I8 { __m256i v; };
struct Acc8 { __m256 v; };

static inline I8 i8_load(const int32_t* s) { return {_mm256_loadu_si256((const __m256i*)s)}; }
static inline I8 i8_add(I8 a, I8 b) { return {_mm256_add_epi32(a.v, b.v)}; }
static inline Acc8 acc8_zero() { return {_mm256_setzero_ps()}; }
// acc + d * lanes, one rounding per lane (ggml: _mm256_fmadd_ps(set1(d), cvtepi32_ps(sumi), acc))
static inline void acc8_fma(Acc8& a, float d, I8 s) {
    a.v = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s.v), a.v);
}
static inline Acc8 acc8_add(Acc8 a, Acc8 b) { return {_mm256_add_ps(a.v, b.v)}; }
static inline float hsum8(Acc8 a) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(a.v, 1), _mm256_castps256_ps128(a.v));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}
#else
struct I8 { int32_t v[8]; };
struct Acc8 { float v[8]; };

static inline I8 i8_load(const int32_t* s) { I8 r; for (int l = 0; l < 8; ++l) r.v[l] = s[l]; return r; }
static inline I8 i8_add(I8 a, I8 b) { for (int l = 0; l < 8; ++l) a.v[l] += b.v[l]; return a; }
static inline Acc8 acc8_zero() { return Acc8{{0, 0, 0, 0, 0, 0, 0, 0}}; }
static inline void acc8_fma(Acc8& a, float d, I8 s) {
    for (int l = 0; l < 8; ++l) a.v[l] = std::fmaf(d, (float)s.v[l], a.v[l]);
}
static inline Acc8 acc8_add(Acc8 a, Acc8 b) { for (int l = 0; l < 8; ++l) a.v[l] += b.v[l]; return a; }
// hsum_float_8: the upper four lanes onto the lower, then lanes 2,3 onto 0,1, then 1 onto 0.
static inline float hsum8(Acc8 a) {
    const float r0 = a.v[4] + a.v[0], r1 = a.v[5] + a.v[1], r2 = a.v[6] + a.v[2], r3 = a.v[7] + a.v[3];
    return (r0 + r2) + (r1 + r3);
}
#endif

// ---------------------------------------------------------------------------------------------
// Integer lanes in plain C. ggml's x86 kernels put value p of a 32-value group (a block, or a
// 32-value slice of a super-block) in lane (p % 32) / 4: its bytes 4l..4l+3 of the 256-bit register.

// lanes[l] += sum over the four values of lane l of w * y, for `n` values (a multiple of 32)
static inline void lanes_add(int32_t lanes[8], const int32_t* w, const int8_t* y, int n) {
    for (int p = 0; p < n; ++p) lanes[(p & 31) >> 2] += w[p] * (int32_t)y[p];
}

}  // namespace strata
