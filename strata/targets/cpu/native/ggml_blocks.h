// ggml's block formats as GGUF stores them, the half-precision conversions, and the activation
// blocks ggml-cpu quantizes a row to before a quantized dot product (its `vec_dot_type`), with
// ggml-cpu's x86 arithmetic (arch/x86/quants.c's AVX quantizers for Q8_0 and Q8_1, ggml-quants.c's
// reference quantizer for Q8_K, which x86 uses).
//
// Activation blocks are kept in an internal layout: the float16 scales are stored as the float
// they convert to (exact), so the dot products do not convert them again.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__F16C__) && !defined(STRATA_PORTABLE)
#include <immintrin.h>
#endif

namespace strata {

constexpr int QK = 32;    // values per block of the 32-value types
constexpr int QK_K = 256; // values per super-block of the K types

// ggml type ids (ggml.h)
enum GgmlType : int {
    T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q4_1 = 3, T_Q5_0 = 6, T_Q5_1 = 7, T_Q8_0 = 8,
    T_Q2_K = 10, T_Q3_K = 11, T_Q4_K = 12, T_Q5_K = 13, T_Q6_K = 14, T_IQ4_NL = 20,
    T_IQ4_XS = 23, T_BF16 = 30,
};

// ---------------------------------------------------------------------------------------------
// Half precision

#if defined(__F16C__) && !defined(STRATA_PORTABLE)
static inline float f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
static inline uint16_t f32_to_f16(float f) { return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
#else
static inline float f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else {
        float v = (float)mant * 5.9604644775390625e-8f;  // mant * 2^-24, exact
        std::memcpy(&bits, &v, 4);
        bits |= sign;
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// Round to nearest even, as F16C's vcvtps2ph and ggml's scalar conversion do.
static inline uint16_t f32_to_f16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return sign | (ax > 0x7f800000u ? 0x7e00 : 0x7c00);
    if (ax >= 0x477ff000u) return sign | 0x7c00;  // rounds past 65504
    if (ax < 0x38800000u) {                       // below 2^-14: a subnormal (or zero) half
        float v = std::fabs(f) * 16777216.0f;     // in units of 2^-24, exact
        return sign | (uint16_t)std::nearbyint(v);
    }
    ax += 0xc8000fffu + ((ax >> 13) & 1);  // rebias the exponent, round half to even
    return sign | (uint16_t)(ax >> 13);
}
#endif

static inline float round_f16(float f) { return f16_to_f32(f32_to_f16(f)); }

static inline float bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// ggml-cpu's fp32 -> bf16 on a machine with AVX512-BF16 (vcvtne2ps2bf16): round to nearest even,
// denormal inputs read as zero, a NaN stays a quiet NaN.
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64);
    if ((u & 0x7f800000u) == 0) return (uint16_t)((u >> 16) & 0x8000);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

static inline uint16_t load_u16(const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }
static inline float load_f16(const uint8_t* p) { return f16_to_f32(load_u16(p)); }

// ---------------------------------------------------------------------------------------------
// Weight blocks (GGUF's bytes): sizes, in the order of their fields

struct BlockInfo { int block; int bytes; };

static inline BlockInfo block_info(int type) {
    switch (type) {
        case T_F32: return {1, 4};
        case T_F16: case T_BF16: return {1, 2};
        case T_Q4_0: return {32, 18};   // d, qs[16]
        case T_Q4_1: return {32, 20};   // d, m, qs[16]
        case T_Q5_0: return {32, 22};   // d, qh[4], qs[16]
        case T_Q5_1: return {32, 24};   // d, m, qh[4], qs[16]
        case T_Q8_0: return {32, 34};   // d, qs[32]
        case T_Q2_K: return {256, 84};  // scales[16], qs[64], d, dmin
        case T_Q3_K: return {256, 110}; // hmask[32], qs[64], scales[12], d
        case T_Q4_K: return {256, 144}; // d, dmin, scales[12], qs[128]
        case T_Q5_K: return {256, 176}; // d, dmin, scales[12], qh[32], qs[128]
        case T_Q6_K: return {256, 210}; // ql[128], qh[64], scales[16], d
        case T_IQ4_NL: return {32, 18}; // d, qs[16]
        case T_IQ4_XS: return {256, 136}; // d, scales_h, scales_l[4], qs[128]
        default: return {0, 0};
    }
}

static const int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                         1, 13, 25, 38, 53, 69, 89, 113};

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K super-block (ggml's get_scale_min_k4).
static inline void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// The 16 signed 6-bit scales of a Q3_K super-block, minus 32.
static inline void q3k_scales(const uint8_t* s12, int8_t out[16]) {
    uint32_t aux[4];
    std::memcpy(aux, s12, 12);
    const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f, tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    std::memcpy(out, aux, 16);
    for (int i = 0; i < 16; ++i) out[i] = (int8_t)(out[i] - 32);
}

// ---------------------------------------------------------------------------------------------
// Activation blocks

struct ActQ8_0 { float d; int8_t qs[32]; };           // d: float16's value
struct ActQ8_1 { float d; float s; int8_t qs[32]; };  // s: float16(d_f32 * sum(qs))'s value
struct ActQ8_K { float d; int8_t qs[256]; int16_t bsums[16]; };

// quantize_row_q8_0 / _q8_1 as arch/x86/quants.c computes them with AVX: amax, d = amax / 127
// (kept as float16), q = round-half-even(x * (127 / amax)). ggml's reference quantizer
// (quantize_row_q8_0_ref) multiplies by 1/d instead and rounds half away from zero; x86 never
// runs it for activations.
static inline void quantize_q8_0(const float* x, ActQ8_0* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        y[i].d = round_f16(d);
        for (int j = 0; j < 32; ++j) y[i].qs[j] = (int8_t)std::nearbyint(x[j] * id);
    }
}

static inline void quantize_q8_1(const float* x, ActQ8_1* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        int sum = 0;
        for (int j = 0; j < 32; ++j) {
            const int q = (int)std::nearbyint(x[j] * id);
            y[i].qs[j] = (int8_t)q;
            sum += q;
        }
        y[i].d = round_f16(d);
        y[i].s = round_f16(d * (float)sum);  // the unrounded d, as ggml
    }
}

// quantize_row_q8_K_ref: m = the first value of largest magnitude, iscale = -127 / m,
// q = min(127, round-half-even(iscale * x)), d = 1 / iscale (float32), bsums of 16.
static inline void quantize_q8_K(const float* x, ActQ8_K* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK_K; ++j) {
            const float ax = std::fabs(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        if (amax == 0.0f) {
            std::memset(&y[i], 0, sizeof(ActQ8_K));
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; ++j) {
            const int v = (int)std::nearbyint(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < 16; ++j) {
            int sum = 0;
            for (int l = 0; l < 16; ++l) sum += y[i].qs[j * 16 + l];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

}  // namespace strata
