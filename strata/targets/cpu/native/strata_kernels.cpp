// Strata's native CPU kernels: matrix products on GGUF's packed weights with ggml-cpu's x86
// numerics, row gathers, and float16 flash attention, behind a C ABI loaded with ctypes.
// Every entry returns 0, or non-zero for bad arguments (checked before anything is read).
// Work is split by output rows over one persistent thread pool; a row's value never depends on
// the number of threads.
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "ggml_blocks.h"
#include "ggml_dots.h"
#include "ggml_dequant.h"
#include "ggml_float_dots.h"
#include "ggml_sgemm.h"
#include "thread_pool.h"

using namespace strata;

namespace {

ThreadPool& pool() {
    static ThreadPool p;
    return p;
}

enum class Act { F32, F16, BF16, Q8_0, Q8_1, Q8_K };

Act act_of(int type) {
    switch (type) {
        case T_F32: return Act::F32;
        case T_F16: return Act::F16;
        case T_BF16: return Act::BF16;
        case T_Q4_1: case T_Q5_1: return Act::Q8_1;
        case T_Q4_0: case T_Q5_0: case T_Q8_0: case T_IQ4_NL: return Act::Q8_0;
        default: return Act::Q8_K;
    }
}

// Bytes of one activation row of k values in the weight type's vec_dot_type.
int64_t act_row_bytes(int type, int64_t k) {
    switch (act_of(type)) {
        case Act::F32: return 4 * k;
        case Act::F16: case Act::BF16: return 2 * k;
        case Act::Q8_0: return k / 32 * (int64_t)sizeof(ActQ8_0);
        case Act::Q8_1: return k / 32 * (int64_t)sizeof(ActQ8_1);
        case Act::Q8_K: return k / 256 * (int64_t)sizeof(ActQ8_K);
    }
    return 0;
}

void quantize_row(int type, const float* x, int64_t k, uint8_t* out) {
    switch (act_of(type)) {
        case Act::F32: std::memcpy(out, x, 4 * k); break;
        case Act::F16: {
            uint16_t* o = (uint16_t*)out;
            for (int64_t i = 0; i < k; ++i) o[i] = f32_to_f16(x[i]);
            break;
        }
        case Act::BF16: {
            uint16_t* o = (uint16_t*)out;
            for (int64_t i = 0; i < k; ++i) o[i] = f32_to_bf16(x[i]);
            break;
        }
        case Act::Q8_0: quantize_q8_0(x, (ActQ8_0*)out, k / 32); break;
        case Act::Q8_1: quantize_q8_1(x, (ActQ8_1*)out, k / 32); break;
        case Act::Q8_K: quantize_q8_K(x, (ActQ8_K*)out, k / 256); break;
    }
}

// One weight row against one activation row (in its vec_dot_type), as ggml's vec_dot.
float dot_row(int type, const uint8_t* w, const uint8_t* a, int64_t k) {
    const int64_t nb32 = k / 32, nbk = k / 256;
    switch (type) {
        case T_F32: return dot_f32((const float*)w, (const float*)a, k);
        case T_F16: return dot_f16((const uint16_t*)w, (const uint16_t*)a, k);
        case T_BF16: return dot_bf16((const uint16_t*)w, (const uint16_t*)a, k);
        case T_Q4_0: return dot_q8_0_type<T_Q4_0, 18>(w, (const ActQ8_0*)a, nb32);
        case T_Q5_0: return dot_q8_0_type<T_Q5_0, 22>(w, (const ActQ8_0*)a, nb32);
        case T_Q8_0: return dot_q8_0_type<T_Q8_0, 34>(w, (const ActQ8_0*)a, nb32);
        case T_IQ4_NL: return dot_iq4_nl(w, (const ActQ8_0*)a, nb32);
        case T_Q4_1: return dot_q8_1_type<T_Q4_1, 20>(w, (const ActQ8_1*)a, nb32);
        case T_Q5_1: return dot_q8_1_type<T_Q5_1, 24>(w, (const ActQ8_1*)a, nb32);
        case T_Q2_K: return dot_q2_K(w, (const ActQ8_K*)a, nbk);
        case T_Q3_K: return dot_q3_K(w, (const ActQ8_K*)a, nbk);
        case T_Q4_K: return dot_q4_K(w, (const ActQ8_K*)a, nbk);
        case T_Q5_K: return dot_q5_K(w, (const ActQ8_K*)a, nbk);
        case T_Q6_K: return dot_q6_K(w, (const ActQ8_K*)a, nbk);
        case T_IQ4_XS: return dot_iq4_xs(w, (const ActQ8_K*)a, nbk);
    }
    return 0.0f;
}

// The weight shape is valid for the type: k > 0 a multiple of the block, a row fits in row_bytes.
bool valid_weight(int type, const void* w, int64_t rows, int64_t k, int64_t row_bytes) {
    const BlockInfo bi = block_info(type);
    if (bi.block == 0 || rows < 0 || k <= 0 || k % bi.block) return false;
    if (row_bytes < k / bi.block * bi.bytes) return false;
    return rows == 0 || w != nullptr;
}

// Activation rows quantized once (in parallel over rows), then output rows split over the threads:
// each thread takes tiles of 16 weight rows against every activation row.
// The order of the float sums: ggml's vec_dot, its repacked kernels (Q4_0, IQ4_NL, Q4_K), or
// llamafile's tinyBLAS (F32, F16, BF16, IQ4_NL with 2 or more activation rows).
enum class Order { VecDot, Repacked, Sgemm };

struct MulMatJob {
    int type;
    Order order;
    const uint8_t* w;
    int64_t rows, k, row_bytes;
    const uint8_t* act;  // [n][act_bytes]
    int64_t act_bytes, n;
    float* y;
};

void mul_mat_rows_repacked(const MulMatJob& j, int64_t r0, int64_t r1) {
    for (int64_t c = 0; c < j.n; ++c) {
        const uint8_t* a = j.act + c * j.act_bytes;
        int64_t r = r0;
#if STRATA_AVX2
        if (j.type == T_Q4_0 || j.type == T_IQ4_NL)
            for (; r + 7 < r1; r += 8) {
                const uint8_t* w = j.w + r * j.row_bytes;
                float* out = j.y + c * j.rows + r;
                if (j.type == T_Q4_0) dot8_repacked<T_Q4_0>(w, j.row_bytes, (const ActQ8_0*)a, j.k / 32, out);
                else dot8_repacked<T_IQ4_NL>(w, j.row_bytes, (const ActQ8_0*)a, j.k / 32, out);
            }
#endif
        for (; r < r1; ++r) {
            const uint8_t* w = j.w + r * j.row_bytes;
            float& out = j.y[c * j.rows + r];
            switch (j.type) {
                case T_Q4_0: out = dot_repacked<T_Q4_0>(w, (const ActQ8_0*)a, j.k / 32); break;
                case T_IQ4_NL: out = dot_repacked<T_IQ4_NL>(w, (const ActQ8_0*)a, j.k / 32); break;
                case T_Q4_K: out = dot_repacked_q4_K(w, (const ActQ8_K*)a, j.k / 256, c < j.n - j.n % 4); break;
            }
        }
    }
}

void mul_mat_rows_sgemm(const MulMatJob& j, int64_t r0, int64_t r1) {
    for (int64_t c = 0; c < j.n; ++c)
        for (int64_t r = r0; r < r1; ++r)
            j.y[c * j.rows + r] = sgemm_dot(j.type, j.w + r * j.row_bytes, j.act + c * j.act_bytes, j.k);
}

// The kernel of a 32-value block type for ROWS rows at once, or null (rows one at a time).
using DotRows = void (*)(const uint8_t*, int64_t, const void*, int64_t, float*);
constexpr int ROWS = 4;

DotRows dot_rows_of(int type) {
    switch (type) {
        case T_Q4_0: return dot_rows_block32<T_Q4_0, 18, ROWS>;
        case T_Q4_1: return dot_rows_block32<T_Q4_1, 20, ROWS>;
        case T_Q5_0: return dot_rows_block32<T_Q5_0, 22, ROWS>;
        case T_Q5_1: return dot_rows_block32<T_Q5_1, 24, ROWS>;
        case T_Q8_0: return dot_rows_block32<T_Q8_0, 34, ROWS>;
        default: return nullptr;
    }
}

void mul_mat_rows(const MulMatJob& j, int64_t r0, int64_t r1) {
    if (j.order == Order::Repacked) return mul_mat_rows_repacked(j, r0, r1);
    if (j.order == Order::Sgemm) return mul_mat_rows_sgemm(j, r0, r1);
    const DotRows dot_rows = dot_rows_of(j.type);
    constexpr int64_t TILE = 16;
    for (int64_t t0 = r0; t0 < r1; t0 += TILE) {
        const int64_t t1 = t0 + TILE < r1 ? t0 + TILE : r1;
        for (int64_t c = 0; c < j.n; ++c) {
            const uint8_t* a = j.act + c * j.act_bytes;
            float* y = j.y + c * j.rows;
            int64_t r = t0;
            if (dot_rows)
                for (; r + ROWS <= t1; r += ROWS) dot_rows(j.w + r * j.row_bytes, j.row_bytes, a, j.k / 32, y + r);
            for (; r < t1; ++r) y[r] = dot_row(j.type, j.w + r * j.row_bytes, a, j.k);
        }
    }
}

void quantize_rows(int type, const float* x, int64_t n, int64_t k, uint8_t* out, int64_t out_bytes) {
    pool().parallel_for(n, 1, [&](int64_t a, int64_t b) {
        for (int64_t i = a; i < b; ++i) quantize_row(type, x + i * k, k, out + i * out_bytes);
    });
}

// The inner loops of the one-chunk path. The dot product is exact in double (products of
// float16 values, a few hundred of them), so its order is free; the accumulator steps round
// exactly as the scalar expressions do (one float32 product, or one double fma, then float16).
double dot_f16_exact(const double* qh, const uint16_t* kr, int64_t d) {
#if STRATA_AVX512
    if (d % 16 == 0) {
        __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
        for (int64_t c = 0; c < d; c += 16) {
            const __m512 kf = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(kr + c)));
            s0 = _mm512_fmadd_pd(_mm512_loadu_pd(qh + c), _mm512_cvtps_pd(_mm512_castps512_ps256(kf)), s0);
            s1 = _mm512_fmadd_pd(_mm512_loadu_pd(qh + c + 8), _mm512_cvtps_pd(_mm512_extractf32x8_ps(kf, 1)), s1);
        }
        return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    }
#endif
    double dot = 0.0;
    for (int64_t c = 0; c < d; ++c) dot += qh[c] * (double)f16_to_f32(kr[c]);
    return dot;
}

void rescale_f16(float* acc, float ms, int64_t dv) {  // acc = float16(acc * ms)
    int64_t c = 0;
#if STRATA_AVX512
    for (; c + 16 <= dv; c += 16) {
        const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(acc + c), _mm512_set1_ps(ms));
        _mm512_storeu_ps(acc + c, _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
    }
#endif
    for (; c < dv; ++c) acc[c] = round_f16(acc[c] * ms);
}

void add_row_f16(float* acc, const uint16_t* vr, float vs, int64_t dv) {  // acc = float16(float(v * vs + acc))
    int64_t c = 0;
#if STRATA_AVX512
    const __m512d s = _mm512_set1_pd((double)vs);
    for (; c + 8 <= dv; c += 8) {
        const __m512d vd = _mm512_cvtps_pd(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(vr + c))));
        const __m256 f = _mm512_cvtpd_ps(_mm512_fmadd_pd(vd, s, _mm512_cvtps_pd(_mm256_loadu_ps(acc + c))));
        _mm256_storeu_ps(acc + c, _mm256_cvtph_ps(_mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
    }
#endif
    for (; c < dv; ++c) acc[c] = round_f16((float)((double)f16_to_f32(vr[c]) * (double)vs + (double)acc[c]));
}

// The one-chunk flash attention of ggml-cpu over float16 K and V, one query row of one head:
// exactly strata.semantics.kernels_ggml.flash_attn_ext_f16's arithmetic for fewer than 64 rows.
void attend_row_f16(const float* q, const uint16_t* k, const uint16_t* v, int64_t n, int64_t d, int64_t dv,
                    const float* mask_row, const std::vector<char>& column_live, float scale, float* out) {
    std::vector<double> qh(d);
    for (int64_t c = 0; c < d; ++c) qh[c] = (double)round_f16(q[c]);
    std::vector<float> acc(dv, 0.0f);
    float top = -INFINITY, total = 0.0f;
    for (int64_t ic = 0; ic < n; ++ic) {
        if (!column_live[ic]) continue;
        const float m = mask_row ? round_f16(mask_row[ic]) : 0.0f;
        if (std::isinf(m) && m < 0) continue;
        const float s = (float)dot_f16_exact(qh.data(), k + ic * d, d) * scale + m;
        float ms = 1.0f, vs = 1.0f;
        if (s > top) {
            ms = (float)std::exp((double)(top - s));
            top = s;
            rescale_f16(acc.data(), ms, dv);
        } else {
            vs = (float)std::exp((double)(s - top));
        }
        add_row_f16(acc.data(), v + ic * dv, vs, dv);
        total = (float)((double)total * (double)ms + (double)vs);
    }
    const float inv = total == 0.0f ? 0.0f : 1.0f / total;
    for (int64_t c = 0; c < dv; ++c) out[c] = acc[c] * inv;
}

// The tiled path (64 rows or more): float32 Q and accumulators, softmax(q k^T * scale + mask) v.
void attend_row_f32(const float* q, const uint16_t* k, const uint16_t* v, int64_t n, int64_t d, int64_t dv,
                    const float* mask_row, float scale, float* out) {
    std::vector<float> z(n);
    float top = -INFINITY;
    for (int64_t ic = 0; ic < n; ++ic) {
        float dot = 0.0f;
        for (int64_t c = 0; c < d; ++c) dot += q[c] * f16_to_f32(k[ic * d + c]);
        z[ic] = dot * scale + (mask_row ? mask_row[ic] : 0.0f);
        top = z[ic] > top ? z[ic] : top;
    }
    float total = 0.0f;
    for (int64_t ic = 0; ic < n; ++ic) { z[ic] = std::exp(z[ic] - top); total += z[ic]; }
    for (int64_t c = 0; c < dv; ++c) out[c] = 0.0f;
    for (int64_t ic = 0; ic < n; ++ic) {
        const float p = z[ic] / total;
        for (int64_t c = 0; c < dv; ++c) out[c] += p * f16_to_f32(v[ic * dv + c]);
    }
}

}  // namespace

extern "C" {

// The version of this ABI: a loader compares it with the one it was written for.
int strata_abi_version(void) { return 1; }

int strata_set_threads(int n) {
    if (n < 1 || n > 1024) return 1;
    pool().resize(n);
    return 0;
}

int strata_get_threads(void) { return pool().size(); }

}  // extern "C"

namespace {

int mul_mat(int type, Order order, const uint8_t* w, int64_t rows, int64_t k, int64_t row_bytes,
            const float* x, int64_t n, float* y) {
    if (!valid_weight(type, w, rows, k, row_bytes) || n < 0 || (n > 0 && (!x || (rows > 0 && !y)))) return 1;
    if (order == Order::Repacked && type != T_Q4_0 && type != T_IQ4_NL && type != T_Q4_K) return 1;
    if (order == Order::Sgemm && (n < 2 || !sgemm_takes(type, k))) order = Order::VecDot;
    if (n == 0 || rows == 0) return 0;
    const int64_t ab = act_row_bytes(type, k);
    std::vector<uint8_t> act((size_t)(ab * n));
    quantize_rows(type, x, n, k, act.data(), ab);
    const MulMatJob job{type, order, w, rows, k, row_bytes, act.data(), ab, n, y};
    pool().parallel_for(rows, 16, [&](int64_t a, int64_t b) { mul_mat_rows(job, a, b); });
    return 0;
}

}  // namespace

extern "C" {

int strata_mul_mat(int type, const uint8_t* w, int64_t rows, int64_t k, int64_t row_bytes,
                   const float* x, int64_t n, float* y) {
    return mul_mat(type, Order::VecDot, w, rows, k, row_bytes, x, n, y);
}

// What ggml-cpu's MUL_MAT gives for a weight that is not repacked: vec_dot's numbers for one
// activation row, llamafile's tinyBLAS order for 2 or more on the types it takes (F32, F16 and
// BF16 when 16 / 32 divides k, IQ4_NL), vec_dot's otherwise.
int strata_mul_mat_ggml(int type, const uint8_t* w, int64_t rows, int64_t k, int64_t row_bytes,
                        const float* x, int64_t n, float* y) {
    return mul_mat(type, Order::Sgemm, w, rows, k, row_bytes, x, n, y);
}

// strata_mul_mat in the order of ggml-cpu's repacked Q4_0 / IQ4_NL / Q4_K kernels (CPU_REPACK,
// which llama.cpp uses on x86 with AVX2 for such weights of a multiple of 8 rows); other types
// are refused.
int strata_mul_mat_repacked(int type, const uint8_t* w, int64_t rows, int64_t k, int64_t row_bytes,
                            const float* x, int64_t n, float* y) {
    return mul_mat(type, Order::Repacked, w, rows, k, row_bytes, x, n, y);
}

int strata_get_rows(int type, const uint8_t* w, int64_t rows, int64_t k, int64_t row_bytes,
                    const int32_t* ids, int64_t n, float* out) {
    if (!valid_weight(type, w, rows, k, row_bytes) || n < 0 || (n > 0 && (!ids || !out))) return 1;
    for (int64_t i = 0; i < n; ++i)
        if (ids[i] < 0 || ids[i] >= rows) return 2;
    pool().parallel_for(n, 1, [&](int64_t a, int64_t b) {
        for (int64_t i = a; i < b; ++i) dequant_row(type, w + (int64_t)ids[i] * row_bytes, k, out + i * k);
    });
    return 0;
}

}  // extern "C"

namespace {

// MUL_MAT_ID: each slot one GEMV of its expert (ggml-cpu's order: vec_dot, or the repacked GEMV).
int mul_mat_id(int type, Order order, const uint8_t* w, int64_t experts, int64_t rows, int64_t k, int64_t row_bytes,
               const float* x, int64_t n, int64_t nb, const int32_t* ids, int64_t used, float* y) {
    if (!valid_weight(type, w, experts * rows, k, row_bytes) || experts < 1 || n < 0 || used < 0 || nb < 1) return 1;
    if (order == Order::Repacked && type != T_Q4_0 && type != T_IQ4_NL && type != T_Q4_K) return 1;
    if (n == 0 || used == 0 || rows == 0) return 0;
    if (!x || !ids || !y) return 1;
    for (int64_t i = 0; i < n * used; ++i)
        if (ids[i] < 0 || ids[i] >= experts) return 2;
    const int64_t ab = act_row_bytes(type, k);
    std::vector<uint8_t> act((size_t)(ab * n * nb));
    quantize_rows(type, x, n * nb, k, act.data(), ab);
    pool().parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t t = 0; t < n; ++t)
            for (int64_t j = 0; j < used; ++j) {
                const MulMatJob slot{type, order, w + (int64_t)ids[t * used + j] * rows * row_bytes, rows, k, row_bytes,
                                     act.data() + (t * nb + j % nb) * ab, ab, 1, y + (t * used + j) * rows};
                mul_mat_rows(slot, r0, r1);
            }
    });
    return 0;
}

}  // namespace

extern "C" {

// MUL_MAT_ID with x [n, nb, k]: slot (t, j) of y [n, used, rows] is expert ids[t, j]'s matrix
// times x[t, j % nb] (strata.semantics.kernels.mul_mat_id's convention: nb is 1 or used).
int strata_mul_mat_id_b(int type, const uint8_t* w, int64_t experts, int64_t rows, int64_t k, int64_t row_bytes,
                        const float* x, int64_t n, int64_t nb, const int32_t* ids, int64_t used, float* y) {
    return mul_mat_id(type, Order::VecDot, w, experts, rows, k, row_bytes, x, n, nb, ids, used, y);
}

// strata_mul_mat_id_b in the order of ggml-cpu's repacked GEMV (its MUL_MAT_ID on repacked Q4_0,
// IQ4_NL and Q4_K experts runs one GEMV per slot).
int strata_mul_mat_id_repacked(int type, const uint8_t* w, int64_t experts, int64_t rows, int64_t k,
                               int64_t row_bytes, const float* x, int64_t n, int64_t nb, const int32_t* ids,
                               int64_t used, float* y) {
    return mul_mat_id(type, Order::Repacked, w, experts, rows, k, row_bytes, x, n, nb, ids, used, y);
}

// MUL_MAT_ID with x [n, used, k] (one activation row per slot).
int strata_mul_mat_id(int type, const uint8_t* w, int64_t experts, int64_t rows, int64_t k, int64_t row_bytes,
                      const float* x, int64_t n, const int32_t* ids, int64_t used, float* y) {
    return strata_mul_mat_id_b(type, w, experts, rows, k, row_bytes, x, n, used < 1 ? 1 : used, ids, used, y);
}

int strata_flash_attn_f16(const float* q, int64_t hq, int64_t s, int64_t d, const uint16_t* k,
                          const uint16_t* v, int64_t hkv, int64_t n, int64_t dv, const float* mask,
                          float scale, float* out) {
    if (hq < 1 || hkv < 1 || hq % hkv || s < 0 || d < 1 || dv < 1 || n < 0) return 1;
    if (s == 0) return 0;
    if (!q || !out || (n > 0 && (!k || !v))) return 1;
    const int64_t group = hq / hkv;
    // The KV positions some query row sees (the mask rounded to float16, as llama.cpp's mask).
    std::vector<char> live(n, 1);
    if (mask)
        for (int64_t ic = 0; ic < n; ++ic) {
            bool any = false;
            for (int64_t i = 0; i < s && !any; ++i) {
                const float m = round_f16(mask[i * n + ic]);
                any = !(std::isinf(m) && m < 0);
            }
            live[ic] = any;
        }
    pool().parallel_for(hq * s, 1, [&](int64_t a, int64_t b) {
        for (int64_t hi = a; hi < b; ++hi) {
            const int64_t h = hi / s, i = hi % s, g = h / group;
            const float* qr = q + (h * s + i) * d;
            const float* mr = mask ? mask + i * n : nullptr;
            float* o = out + (i * hq + h) * dv;
            if (s < 64)
                attend_row_f16(qr, k + g * n * d, v + g * n * dv, n, d, dv, mr, live, scale, o);
            else
                attend_row_f32(qr, k + g * n * d, v + g * n * dv, n, d, dv, mr, scale, o);
        }
    });
    return 0;
}

}  // extern "C"
