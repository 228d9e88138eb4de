// llamafile's tinyBLAS (ggml-cpu/llamafile/sgemm.cpp), which ggml-cpu's MUL_MAT runs for 2 or more
// activation rows on F32, F16, BF16 and the Q8_0-activation types when the weight is not
// repacked, as built for x86 with AVX-512 (and AVX512-BF16). Per output one accumulator: sixteen
// float lanes over the row, 16 values at a time (32 for BF16's vdpbf16ps), reduced by
// _mm512_reduce_add_ps; for the quantized types eight lanes, one fused multiply-add per block,
// hsum at the end, which is vec_dot's order for Q8_0, Q4_0 and Q5_0 (checked against
// libggml-cpu's llamafile_sgemm) but not for IQ4_NL (vec_dot's two accumulators).
#pragma once

#include "ggml_dots.h"
#include "ggml_float_dots.h"

namespace strata {

// Whether tinyBLAS takes a weight of this type and row length (its KN must divide k).
static inline bool sgemm_takes(int type, int64_t k) {
    switch (type) {
        case T_F32: case T_F16: return k % 16 == 0;
        case T_BF16: return k % 32 == 0;
        case T_IQ4_NL: return true;
        default: return false;  // Q8_0, Q4_0, Q5_0: tinyBLAS's numbers are vec_dot's
    }
}

template <typename Load>
static inline float sgemm16(int64_t k, Load load) {
    float acc[16] = {};
#if STRATA_AVX512
    __m512 v = _mm512_setzero_ps();
    for (int64_t i = 0; i < k; i += 16) {
        __m512 a, b;
        load.vec(i, a, b);
        v = _mm512_fmadd_ps(a, b, v);
    }
    _mm512_storeu_ps(acc, v);
#else
    for (int64_t i = 0; i < k; i += 16)
        for (int l = 0; l < 16; ++l) {
            float a, b;
            load.one(i + l, a, b);
            acc[l] = std::fmaf(a, b, acc[l]);
        }
#endif
    return reduce16(acc);
}

static inline float sgemm_bf16(const uint16_t* w, const uint16_t* x, int64_t k) {
    float acc[16] = {};
#if STRATA_AVX512 && defined(__AVX512BF16__)
    __m512 v = _mm512_setzero_ps();
    for (int64_t i = 0; i < k; i += 32)
        v = _mm512_dpbf16_ps(v, (__m512bh)_mm512_loadu_si512(w + i), (__m512bh)_mm512_loadu_si512(x + i));
    _mm512_storeu_ps(acc, v);
#else
    for (int64_t i = 0; i < k; i += 32) dpbf16(acc, w + i, x + i);
#endif
    return reduce16(acc);
}

static inline float sgemm_iq4_nl(const uint8_t* w, const ActQ8_0* y, int64_t nb) {
    Acc8 acc = acc8_zero();
    for (int64_t i = 0; i < nb; ++i, w += 18) acc8_fma(acc, load_f16(w) * y[i].d, block32_lanes(T_IQ4_NL, w, y[i].qs));
    return hsum8(acc);
}

// One output in tinyBLAS's order (sgemm_takes(type, k) must hold).
static inline float sgemm_dot(int type, const uint8_t* w, const uint8_t* a, int64_t k) {
    switch (type) {
        case T_F32: return sgemm16(k, LoadF32{(const float*)w, (const float*)a});
        case T_F16: return sgemm16(k, LoadF16{(const uint16_t*)w, (const uint16_t*)a});
        case T_BF16: return sgemm_bf16((const uint16_t*)w, (const uint16_t*)a, k);
        case T_IQ4_NL: return sgemm_iq4_nl(w, (const ActQ8_0*)a, k / 32);
    }
    return 0.0f;
}

}  // namespace strata
