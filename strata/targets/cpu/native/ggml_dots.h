// ggml-cpu's quantized dot products (arch/x86/quants.c as built for x86 with AVX2: ggml_vec_dot_*),
// one row of a weight against one activation row already in its vec_dot_type blocks. Each returns
// the float ggml's AVX2 kernel returns: the same integer lanes, the same fused multiply-adds per
// block into eight float lanes, the same final reduction. Where ggml adds a scalar term, its
// compiler (gcc -O3 -march=native, -ffp-contract=fast by default) may fuse `a += b * c` or not;
// these fuse exactly where the oracle's build does (checked bit for bit against its
// libggml-cpu.so): the Q4_1 / Q5_1 block sums m * s and Q5_K's mins are fused (fmaf), IQ4_NL's
// odd last block is not.
// ggml's portable C kernels (quants.c's *_generic) sum in another order; the AVX2 numbers are the
// reference here, on every build.
#pragma once

#include "ggml_blocks.h"
#include "ggml_lanes.h"

namespace strata {

#if STRATA_AVX2
static inline __m256i nibbles32(const uint8_t* p) {  // low nibbles in bytes 0..15, high in 16..31
    const __m128i t = _mm_loadu_si128((const __m128i*)p);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0f));
}
// bit p of the 32-bit word at `p` -> byte p all ones
static inline __m256i bits32(const uint8_t* p) {
    uint32_t w;
    std::memcpy(&w, p, 4);
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)w),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
    const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(spread, sel), sel);
}
// lanes of unsigned x times signed y, four bytes a lane, exact
static inline __m256i dot_u8(__m256i ux, __m256i y) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), ux, y);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ux, y), _mm256_set1_epi16(1));
#endif
}
static inline __m256i dot_i8(__m256i x, __m256i y) {
    return dot_u8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}
static inline __m256i load256(const void* p) { return _mm256_loadu_si256((const __m256i*)p); }
#endif

// ---------------------------------------------------------------------------------------------
// 32-value blocks against Q8_0 / Q8_1

// The block's 32 integer values (the weight's q, offset removed for the signed types).
static inline void values_q4_0(const uint8_t* b, int32_t w[32]) {
    for (int j = 0; j < 16; ++j) { w[j] = (b[2 + j] & 15) - 8; w[j + 16] = (b[2 + j] >> 4) - 8; }
}
static inline void values_q4_1(const uint8_t* b, int32_t w[32]) {
    for (int j = 0; j < 16; ++j) { w[j] = b[4 + j] & 15; w[j + 16] = b[4 + j] >> 4; }
}
static inline void values_q5(const uint8_t* qh4, const uint8_t* qs, int offset, int32_t w[32]) {
    uint32_t qh;
    std::memcpy(&qh, qh4, 4);
    for (int j = 0; j < 16; ++j) {
        w[j] = ((qs[j] & 15) | (((qh >> j) & 1) << 4)) - offset;
        w[j + 16] = ((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - offset;
    }
}
static inline void values_iq4_nl(const uint8_t* b, int32_t w[32]) {
    for (int j = 0; j < 16; ++j) { w[j] = kvalues_iq4nl[b[2 + j] & 15]; w[j + 16] = kvalues_iq4nl[b[2 + j] >> 4]; }
}

// The integer lanes of one block of `type` against 32 activation quants.
static inline I8 block32_lanes(int type, const uint8_t* b, const int8_t* y) {
#if STRATA_AVX2
    const __m256i qy = load256(y);
    switch (type) {
        case T_Q4_0: return {dot_i8(_mm256_sub_epi8(nibbles32(b + 2), _mm256_set1_epi8(8)), qy)};
        case T_Q4_1: return {dot_u8(nibbles32(b + 4), qy)};
        case T_Q5_0: {
            const __m256i hi = _mm256_andnot_si256(bits32(b + 2), _mm256_set1_epi8((char)0xF0));
            return {dot_i8(_mm256_or_si256(nibbles32(b + 6), hi), qy)};
        }
        case T_Q5_1: {
            const __m256i hi = _mm256_and_si256(bits32(b + 4), _mm256_set1_epi8(0x10));
            return {dot_u8(_mm256_or_si256(nibbles32(b + 8), hi), qy)};
        }
        case T_Q8_0: return {dot_i8(load256(b + 2), qy)};
        case T_IQ4_NL: {
            const __m128i table = _mm_loadu_si128((const __m128i*)kvalues_iq4nl);
            const __m128i t = _mm_loadu_si128((const __m128i*)(b + 2)), m4 = _mm_set1_epi8(0x0f);
            const __m256i q = _mm256_set_m128i(_mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(t, 4), m4)),
                                               _mm_shuffle_epi8(table, _mm_and_si128(t, m4)));
            return {dot_i8(q, qy)};
        }
    }
#endif
    int32_t w[32], lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    switch (type) {
        case T_Q4_0: values_q4_0(b, w); break;
        case T_Q4_1: values_q4_1(b, w); break;
        case T_Q5_0: values_q5(b + 2, b + 6, 16, w); break;
        case T_Q5_1: values_q5(b + 4, b + 8, 0, w); break;
        case T_Q8_0: for (int j = 0; j < 32; ++j) w[j] = (int8_t)b[2 + j]; break;
        case T_IQ4_NL: values_iq4_nl(b, w); break;
    }
    lanes_add(lanes, w, y, 32);
    return i8_load(lanes);
}

// ggml_vec_dot_{q4_0,q5_0,q8_0}_q8_0: acc = fma(d_w * d_y, lanes, acc) per block, hsum at the end.
template <int TYPE, int BYTES>
static float dot_q8_0_type(const uint8_t* w, const ActQ8_0* y, int64_t nb) {
    Acc8 acc = acc8_zero();
    for (int64_t i = 0; i < nb; ++i, w += BYTES)
        acc8_fma(acc, load_f16(w) * y[i].d, block32_lanes(TYPE, w, y[i].qs));
    return hsum8(acc);
}

// dot_q8_0_type / dot_q8_1_type on ROWS rows at once (row r at w + r * row_bytes): each row its
// own accumulator and operations, the rows' chains of fused multiply-adds interleaved (one chain
// alone waits on the fma's latency at every block).
template <int TYPE, int BYTES, int ROWS>
static void dot_rows_block32(const uint8_t* w, int64_t row_bytes, const void* act, int64_t nb, float* out) {
    constexpr bool Q81 = TYPE == T_Q4_1 || TYPE == T_Q5_1;
    Acc8 acc[ROWS];
    float summs[ROWS];
    for (int r = 0; r < ROWS; ++r) { acc[r] = acc8_zero(); summs[r] = 0.0f; }
    for (int64_t i = 0; i < nb; ++i) {
        float yd, ys = 0.0f;
        const int8_t* qs;
        if constexpr (Q81) {
            const ActQ8_1& y = ((const ActQ8_1*)act)[i];
            yd = y.d; ys = y.s; qs = y.qs;
        } else {
            const ActQ8_0& y = ((const ActQ8_0*)act)[i];
            yd = y.d; qs = y.qs;
        }
        for (int r = 0; r < ROWS; ++r) {
            const uint8_t* b = w + r * row_bytes + i * BYTES;
            if constexpr (Q81) summs[r] = std::fmaf(load_f16(b + 2), ys, summs[r]);
            acc8_fma(acc[r], load_f16(b) * yd, block32_lanes(TYPE, b, qs));
        }
    }
    for (int r = 0; r < ROWS; ++r) out[r] = hsum8(acc[r]) + summs[r];
}

// ggml_vec_dot_iq4_nl_q8_0: even blocks into one accumulator, odd into another, added before the
// reduction; an odd last block is added after it in scalar code.
static float dot_iq4_nl(const uint8_t* w, const ActQ8_0* y, int64_t nb) {
    Acc8 acc1 = acc8_zero(), acc2 = acc8_zero();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        acc8_fma(acc1, y[i].d * load_f16(w + i * 18), block32_lanes(T_IQ4_NL, w + i * 18, y[i].qs));
        acc8_fma(acc2, y[i + 1].d * load_f16(w + (i + 1) * 18), block32_lanes(T_IQ4_NL, w + (i + 1) * 18, y[i + 1].qs));
    }
    float sum = hsum8(acc8_add(acc1, acc2));
    for (; i < nb; ++i) {
        int32_t v[32], s = 0;
        values_iq4_nl(w + i * 18, v);
        for (int j = 0; j < 32; ++j) s += v[j] * y[i].qs[j];
        sum += y[i].d * load_f16(w + i * 18) * (float)s;  // not fused: the oracle's build does not fuse it
    }
    return sum;
}

// ggml-cpu's CPU_REPACK kernels for Q4_0 and IQ4_NL (arch/x86/repack.cpp: the q4_0_8x8 and
// iq4_nl_8x8 GEMV and GEMM, which llama.cpp runs on x86 with AVX2 for weights of a multiple of 8
// rows): one float accumulator per output, per block acc = fma(the block's integer dot,
// d_w * d_y, acc). No lanes, no reduction: other floats than vec_dot's.
template <int TYPE>
static float dot_repacked(const uint8_t* w, const ActQ8_0* y, int64_t nb) {
    float acc = 0.0f;
    for (int64_t i = 0; i < nb; ++i, w += 18) {
        int32_t lanes[8];
#if STRATA_AVX2
        _mm256_storeu_si256((__m256i*)lanes, block32_lanes(TYPE, w, y[i].qs).v);
#else
        const I8 l8 = block32_lanes(TYPE, w, y[i].qs);
        for (int l = 0; l < 8; ++l) lanes[l] = l8.v[l];
#endif
        int32_t sumi = 0;
        for (int l = 0; l < 8; ++l) sumi += lanes[l];
        acc = std::fmaf((float)sumi, load_f16(w) * y[i].d, acc);
    }
    return acc;
}

#if STRATA_AVX2
// Eight rows at once of dot_repacked (ggml's own layout: row q in float lane q): the rows' block
// sums in one register, one fused multiply-add per block for all eight.
template <int TYPE>
static void dot8_repacked(const uint8_t* w, int64_t row_bytes, const ActQ8_0* y, int64_t nb, float out[8]) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        __m256i l[8];
        uint16_t d16[8];
        for (int q = 0; q < 8; ++q) {
            const uint8_t* b = w + q * row_bytes + i * 18;
            l[q] = block32_lanes(TYPE, b, y[i].qs).v;
            d16[q] = load_u16(b);
        }
        const __m256i ab = _mm256_hadd_epi32(_mm256_hadd_epi32(l[0], l[1]), _mm256_hadd_epi32(l[2], l[3]));
        const __m256i cd = _mm256_hadd_epi32(_mm256_hadd_epi32(l[4], l[5]), _mm256_hadd_epi32(l[6], l[7]));
        const __m256i sums = _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20), _mm256_permute2x128_si256(ab, cd, 0x31));
        const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)d16)), _mm256_set1_ps(y[i].d));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), d, acc);
    }
    _mm256_storeu_ps(out, acc);
}
#endif

// ggml_vec_dot_{q4_1,q5_1}_q8_1: the block sums m * s in a scalar, added after the reduction.
template <int TYPE, int BYTES>
static float dot_q8_1_type(const uint8_t* w, const ActQ8_1* y, int64_t nb) {
    Acc8 acc = acc8_zero();
    float summs = 0.0f;
    for (int64_t i = 0; i < nb; ++i, w += BYTES) {
        summs = std::fmaf(load_f16(w + 2), y[i].s, summs);
        acc8_fma(acc, load_f16(w) * y[i].d, block32_lanes(TYPE, w, y[i].qs));
    }
    return hsum8(acc) + summs;
}

// ---------------------------------------------------------------------------------------------
// K super-blocks against Q8_K

// Q2_K / Q3_K / Q4_K / Q5_K / IQ4_XS: the super-block's 256 integer values times their sub-block
// scale, in the lanes of the 32-value slices (the mins are handled by the callers).
static inline I8 kblock_lanes_c(int type, const uint8_t* b, const int8_t* y) {
    int32_t w[256], lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    switch (type) {
        case T_Q2_K: {
            const uint8_t *sc = b, *qs = b + 16;
            for (int p = 0; p < 256; ++p) {
                const int n = p >> 7, j = (p >> 5) & 3, l = p & 31;
                w[p] = (sc[p >> 4] & 15) * ((qs[32 * n + l] >> (2 * j)) & 3);
            }
            break;
        }
        case T_Q3_K: {
            const uint8_t *hm = b, *qs = b + 32;
            int8_t sc[16];
            q3k_scales(b + 96, sc);
            for (int p = 0; p < 256; ++p) {
                const int n = p >> 7, j = (p >> 5) & 3, l = p & 31;
                const int q = ((qs[32 * n + l] >> (2 * j)) & 3) - ((hm[l] >> (4 * n + j)) & 1 ? 0 : 4);
                w[p] = sc[p >> 4] * q;
            }
            break;
        }
        case T_Q4_K: case T_Q5_K: {
            const uint8_t* scales = b + 4;
            const uint8_t* qh = b + 16;
            const uint8_t* qs = type == T_Q4_K ? b + 16 : b + 48;
            for (int p = 0; p < 256; ++p) {
                const int sub = p >> 5, l = p & 31, j = sub >> 1;
                int sc, m;
                scale_min_k4(sub, scales, &sc, &m);
                int q = (sub & 1) ? qs[32 * j + l] >> 4 : qs[32 * j + l] & 15;
                if (type == T_Q5_K) q |= ((qh[l] >> sub) & 1) << 4;
                w[p] = sc * q;
            }
            break;
        }
        case T_IQ4_XS: {
            const uint16_t sh = load_u16(b + 2);
            const uint8_t *sl = b + 4, *qs = b + 8;
            for (int p = 0; p < 256; ++p) {
                const int ib = p >> 5, l = p & 31;
                const int ls = (((sl[ib / 2] >> (4 * (ib & 1))) & 15) | (((sh >> (2 * ib)) & 3) << 4)) - 32;
                const int q = l < 16 ? qs[16 * ib + l] & 15 : qs[16 * ib + l - 16] >> 4;
                w[p] = ls * kvalues_iq4nl[q];
            }
            break;
        }
    }
    lanes_add(lanes, w, y, 256);
    return i8_load(lanes);
}

#if STRATA_AVX2
// Two per-16-value scales across the lanes: lanes 0-3 (bytes 0..15) times lo, 4-7 times hi.
static inline __m256i scale_halves(__m256i lanes, int lo, int hi) {
    return _mm256_mullo_epi32(lanes, _mm256_set_m128i(_mm_set1_epi32(hi), _mm_set1_epi32(lo)));
}

// Q2_K / Q3_K lanes: per 128 values, four 2-bit planes of the same 32 bytes, 16 values a scale.
static inline I8 kblock_lanes_q23(int type, const uint8_t* b, const int8_t* y) {
    const __m256i m3 = _mm256_set1_epi8(3);
    int sc[16];
    if (type == T_Q2_K) {
        for (int i = 0; i < 16; ++i) sc[i] = b[i] & 15;
    } else {
        int8_t s8[16];
        q3k_scales(b + 96, s8);
        for (int i = 0; i < 16; ++i) sc[i] = s8[i];
    }
    const uint8_t* qs = type == T_Q2_K ? b + 16 : b + 32;
    const __m256i hm = type == T_Q3_K ? load256(b) : _mm256_setzero_si256();
    __m256i sum = _mm256_setzero_si256();
    for (int n = 0; n < 2; ++n) {
        const __m256i bits = load256(qs + 32 * n);
        for (int j = 0; j < 4; ++j) {
            const __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * j), m3);
            const __m256i qy = load256(y + 128 * n + 32 * j);
            __m256i lanes;
            if (type == T_Q2_K) {
                lanes = dot_u8(q, qy);
            } else {  // q - 4 where the high bit is clear
                const __m256i h = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * n + j), _mm256_set1_epi8(1));
                lanes = dot_i8(_mm256_sub_epi8(_mm256_or_si256(q, _mm256_slli_epi16(h, 2)), _mm256_set1_epi8(4)), qy);
            }
            sum = _mm256_add_epi32(sum, scale_halves(lanes, sc[8 * n + 2 * j], sc[8 * n + 2 * j + 1]));
        }
    }
    return {sum};
}

// IQ4_XS lanes: per 32 values, the non-linear table by nibble, one 6-bit scale.
static inline I8 kblock_lanes_iq4_xs(const uint8_t* b, const int8_t* y) {
    const __m128i table = _mm_loadu_si128((const __m128i*)kvalues_iq4nl), m4 = _mm_set1_epi8(0x0f);
    const uint16_t sh = load_u16(b + 2);
    __m256i sum = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
        const __m128i t = _mm_loadu_si128((const __m128i*)(b + 8 + 16 * ib));
        const __m256i q = _mm256_set_m128i(_mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(t, 4), m4)),
                                           _mm_shuffle_epi8(table, _mm_and_si128(t, m4)));
        const int ls = (((b[4 + ib / 2] >> (4 * (ib & 1))) & 15) | (((sh >> (2 * ib)) & 3) << 4)) - 32;
        sum = _mm256_add_epi32(sum, _mm256_mullo_epi32(dot_i8(q, load256(y + 32 * ib)), _mm256_set1_epi32(ls)));
    }
    return {sum};
}

// Q4_K / Q5_K lanes with AVX2 / VNNI: per 64 values, low nibbles times scale 2j, high times 2j+1.
static inline I8 kblock_lanes_q45(int type, const uint8_t* b, const int8_t* y) {
    const uint8_t* scales = b + 4;
    const uint8_t* qs = type == T_Q4_K ? b + 16 : b + 48;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i hbits = type == T_Q5_K ? load256(b + 16) : _mm256_setzero_si256();
    __m256i sum = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
        int sc0, sc1, m;
        scale_min_k4(2 * j, scales, &sc0, &m);
        scale_min_k4(2 * j + 1, scales, &sc1, &m);
        const __m256i bits = load256(qs + 32 * j);
        __m256i lo = _mm256_and_si256(bits, m4), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
        if (type == T_Q5_K) {
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hbits, 2 * j), 4), _mm256_set1_epi8(0x10)));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hbits, 2 * j + 1), 4), _mm256_set1_epi8(0x10)));
        }
        sum = _mm256_add_epi32(sum, _mm256_mullo_epi32(dot_u8(lo, load256(y + 64 * j)), _mm256_set1_epi32(sc0)));
        sum = _mm256_add_epi32(sum, _mm256_mullo_epi32(dot_u8(hi, load256(y + 64 * j + 32)), _mm256_set1_epi32(sc1)));
    }
    return {sum};
}
#endif

// ggml_vec_dot_q2_K_q8_K: per super-block, the mins (dmin * (m[2l] bsum[2l] + m[2l+1] bsum[2l+1]))
// then the values (d * lanes) into the same eight lanes.
static float dot_q2_K(const uint8_t* w, const ActQ8_K* y, int64_t nb) {
    Acc8 acc = acc8_zero();
    for (int64_t i = 0; i < nb; ++i, w += 84) {
        const float d = y[i].d * load_f16(w + 80);
        const float dmin = -y[i].d * load_f16(w + 82);
        int32_t mins[8];
        for (int l = 0; l < 8; ++l)
            mins[l] = (w[2 * l] >> 4) * y[i].bsums[2 * l] + (w[2 * l + 1] >> 4) * y[i].bsums[2 * l + 1];
        acc8_fma(acc, dmin, i8_load(mins));
#if STRATA_AVX2
        acc8_fma(acc, d, kblock_lanes_q23(T_Q2_K, w, y[i].qs));
#else
        acc8_fma(acc, d, kblock_lanes_c(T_Q2_K, w, y[i].qs));
#endif
    }
    return hsum8(acc);
}

static float dot_q3_K(const uint8_t* w, const ActQ8_K* y, int64_t nb) {
    Acc8 acc = acc8_zero();
    for (int64_t i = 0; i < nb; ++i, w += 110)
#if STRATA_AVX2
        acc8_fma(acc, y[i].d * load_f16(w + 108), kblock_lanes_q23(T_Q3_K, w, y[i].qs));
#else
        acc8_fma(acc, y[i].d * load_f16(w + 108), kblock_lanes_c(T_Q3_K, w, y[i].qs));
#endif
    return hsum8(acc);
}

// ggml_vec_dot_q4_K_q8_K: the mins in four more lanes (m[2l] s[2l] + m[2l+1] s[2l+1], s the
// 32-value sums of the activation), reduced on their own and added last.
static float dot_q4_K(const uint8_t* w, const ActQ8_K* y, int64_t nb) {
    Acc8 acc = acc8_zero();
    float accm[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < nb; ++i, w += 144) {
        const float d = y[i].d * load_f16(w);
        const float dmin = -y[i].d * load_f16(w + 2);
        int mn[8];
        for (int j = 0; j < 8; ++j) { int sc; scale_min_k4(j, w + 4, &sc, &mn[j]); }
        for (int l = 0; l < 4; ++l) {
            const int s0 = y[i].bsums[4 * l] + y[i].bsums[4 * l + 1], s1 = y[i].bsums[4 * l + 2] + y[i].bsums[4 * l + 3];
            accm[l] = std::fmaf(dmin, (float)(mn[2 * l] * s0 + mn[2 * l + 1] * s1), accm[l]);
        }
#if STRATA_AVX2
        acc8_fma(acc, d, kblock_lanes_q45(T_Q4_K, w, y[i].qs));
#else
        acc8_fma(acc, d, kblock_lanes_c(T_Q4_K, w, y[i].qs));
#endif
    }
    return hsum8(acc) + ((accm[0] + accm[2]) + (accm[1] + accm[3]));
}

// ggml_vec_dot_q5_K_q8_K: the mins summed as integers per super-block, then one fused
// multiply-add into a scalar added last.
static float dot_q5_K(const uint8_t* w, const ActQ8_K* y, int64_t nb) {
    Acc8 acc = acc8_zero();
    float summs = 0.0f;
    for (int64_t i = 0; i < nb; ++i, w += 176) {
        const float d = y[i].d * load_f16(w);
        const float dmin = -y[i].d * load_f16(w + 2);
        int32_t mins = 0;
        for (int j = 0; j < 8; ++j) {
            int sc, m;
            scale_min_k4(j, w + 4, &sc, &m);
            mins += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        summs = std::fmaf(dmin, (float)mins, summs);
#if STRATA_AVX2
        acc8_fma(acc, d, kblock_lanes_q45(T_Q5_K, w, y[i].qs));
#else
        acc8_fma(acc, d, kblock_lanes_c(T_Q5_K, w, y[i].qs));
#endif
    }
    return hsum8(acc) + summs;
}

// The integer sums of a Q4_K super-block per 64 values (two sub-blocks): their values times
// scales, and their mins times the activation's 32-value sums.
static inline void q4k_pair_sums(const uint8_t* b, const ActQ8_K* y, int32_t sums[4], int32_t mins[4]) {
    for (int j = 0; j < 4; ++j) {
        int sc0, sc1, m0, m1;
        scale_min_k4(2 * j, b + 4, &sc0, &m0);
        scale_min_k4(2 * j + 1, b + 4, &sc1, &m1);
        mins[j] = m0 * (y->bsums[4 * j] + y->bsums[4 * j + 1]) + m1 * (y->bsums[4 * j + 2] + y->bsums[4 * j + 3]);
        const uint8_t* qs = b + 16 + 32 * j;
        const int8_t* q8 = y->qs + 64 * j;
#if STRATA_AVX2
        const __m256i bits = load256(qs), m4 = _mm256_set1_epi8(0x0f);
        const __m256i lo = dot_u8(_mm256_and_si256(bits, m4), load256(q8));
        const __m256i hi = dot_u8(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4), load256(q8 + 32));
        const __m256i t = _mm256_add_epi32(_mm256_mullo_epi32(lo, _mm256_set1_epi32(sc0)),
                                           _mm256_mullo_epi32(hi, _mm256_set1_epi32(sc1)));
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
        h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
        sums[j] = _mm_cvtsi128_si32(_mm_add_epi32(h, _mm_shuffle_epi32(h, 1)));
#else
        int32_t lo = 0, hi = 0;
        for (int l = 0; l < 32; ++l) { lo += (qs[l] & 15) * q8[l]; hi += (qs[l] >> 4) * q8[32 + l]; }
        sums[j] = sc0 * lo + sc1 * hi;
#endif
    }
}

// ggml-cpu's repacked Q4_K kernels (q4_K_8x8, llama.cpp's CPU_REPACK on x86 with AVX2 for
// weights of a multiple of 8 rows): the values' and the mins' integer sums, each into its own
// float chain (scaled by d_w * d_y and dmin_w * d_y), their difference at the end. The GEMV
// (`per_pair` false) adds once per super-block; the GEMM, which llama.cpp runs on the activation
// rows in fours (all but the last n % 4), once per 64 values.
static float dot_repacked_q4_K(const uint8_t* w, const ActQ8_K* y, int64_t nb, bool per_pair) {
    float acc = 0.0f, accm = 0.0f;
    for (int64_t i = 0; i < nb; ++i, w += 144) {
        int32_t sums[4], mins[4];
        q4k_pair_sums(w, &y[i], sums, mins);
        const float d = load_f16(w) * y[i].d, dmin = load_f16(w + 2) * y[i].d;
        if (per_pair) {
            for (int j = 0; j < 4; ++j) {
                acc = std::fmaf((float)sums[j], d, acc);
                accm = std::fmaf((float)mins[j], dmin, accm);
            }
        } else {
            acc = std::fmaf((float)(sums[0] + sums[1] + sums[2] + sums[3]), d, acc);
            accm = std::fmaf((float)(mins[0] + mins[1] + mins[2] + mins[3]), dmin, accm);
        }
    }
    return acc - accm;
}

// ggml_vec_dot_q6_K_q8_K: unsigned 6-bit values times scale in the lanes, minus
// 32 * (sc[2l] bsum[2l] + sc[2l+1] bsum[2l+1]) in lane l.
static inline I8 q6k_lanes(const uint8_t* b, const ActQ8_K* y) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t* sc = (const int8_t*)(b + 192);
    int32_t sub[8];
    for (int l = 0; l < 8; ++l) sub[l] = 32 * (sc[2 * l] * y->bsums[2 * l] + sc[2 * l + 1] * y->bsums[2 * l + 1]);
#if STRATA_AVX2
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(3);
    __m256i sum = _mm256_setzero_si256();
    for (int n = 0; n < 2; ++n) {
        const __m256i b1 = load256(ql + 64 * n), b2 = load256(ql + 64 * n + 32), h = load256(qh + 32 * n);
        const __m256i q[4] = {
            _mm256_or_si256(_mm256_and_si256(b1, m4), _mm256_slli_epi16(_mm256_and_si256(h, m3), 4)),
            _mm256_or_si256(_mm256_and_si256(b2, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m3), 4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m3), 4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m3), 4)),
        };
        for (int k = 0; k < 4; ++k) {
            const int s = 8 * n + 2 * k;
            const __m256i scale = _mm256_set_m128i(_mm_set1_epi32(sc[s + 1]), _mm_set1_epi32(sc[s]));
            sum = _mm256_add_epi32(sum, _mm256_mullo_epi32(dot_u8(q[k], load256(y->qs + 128 * n + 32 * k)), scale));
        }
    }
    return {_mm256_sub_epi32(sum, _mm256_loadu_si256((const __m256i*)sub))};
#else
    int32_t w[256], lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int p = 0; p < 256; ++p) {
        const int n = p >> 7, k = (p >> 5) & 3, l = p & 31;
        const uint8_t lo = ql[64 * n + 32 * (k & 1) + l];
        const int q = ((k < 2 ? lo & 15 : lo >> 4)) | (((qh[32 * n + l] >> (2 * k)) & 3) << 4);
        w[p] = sc[p >> 4] * q;
    }
    lanes_add(lanes, w, y->qs, 256);
    for (int l = 0; l < 8; ++l) lanes[l] -= sub[l];
    return i8_load(lanes);
#endif
}

static float dot_q6_K(const uint8_t* w, const ActQ8_K* y, int64_t nb) {
    Acc8 acc = acc8_zero();
    for (int64_t i = 0; i < nb; ++i, w += 210) acc8_fma(acc, y[i].d * load_f16(w + 208), q6k_lanes(w, &y[i]));
    return hsum8(acc);
}

static float dot_iq4_xs(const uint8_t* w, const ActQ8_K* y, int64_t nb) {
    Acc8 acc = acc8_zero();
    for (int64_t i = 0; i < nb; ++i, w += 136)
#if STRATA_AVX2
        acc8_fma(acc, load_f16(w) * y[i].d, kblock_lanes_iq4_xs(w, y[i].qs));
#else
        acc8_fma(acc, load_f16(w) * y[i].d, kblock_lanes_c(T_IQ4_XS, w, y[i].qs));
#endif
    return hsum8(acc);
}

}  // namespace strata
