// The element-wise and row ops of a printed entry (strata.targets.cpu.emit_native_entry), each
// with exactly the float32 operations, in the same order, as the numpy kernel it replaces
// (strata.semantics.kernels), so that an entry run in C++ gives the numpy host's numbers.
// Included by the printed entry after strata_kernels.cpp (its f16 conversions).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace strata_entry {

// numpy's float32 exp on x86-64 (its AVX2/AVX-512 loop, npyv exp kernel): Cody-Waite range
// reduction, a 5/2 rational polynomial in fused multiply-adds, scaled by 2^k; not correctly
// rounded, so libm's expf would differ from np.exp in about 40% of the values.
static inline float numpy_exp_f32(float x) {
    if (std::isnan(x)) return x;
    if (x >= 88.72283935546875f) return std::numeric_limits<float>::infinity();
    if (x <= -103.97208404541015625f) return 0.0f;
    const float k = std::nearbyint(x * 1.442695040888963407359924681001892137f);
    float y = std::fmaf(k, -6.93145752e-1f, x);
    y = std::fmaf(k, -1.42860677e-6f, y);
    float num = std::fmaf(5.082762527590693718096e-04f, y, 6.757896990527504603057e-03f);
    num = std::fmaf(num, y, 5.114512081637298353406e-02f);
    num = std::fmaf(num, y, 2.473615434895520810817e-01f);
    num = std::fmaf(num, y, 7.257664613233124478488e-01f);
    num = std::fmaf(num, y, 9.999999999980870924916e-01f);
    float den = std::fmaf(2.159509375685829852307e-02f, y, -2.742335390411667452936e-01f);
    den = std::fmaf(den, y, 1.0f);
    return std::ldexp(num / den, (int)k);
}

// The row sum of squares as np.einsum("...i,...i->...") takes it (numpy's baseline SIMD sum of
// products: four lanes of multiply-then-add, four vectors per step, the lanes summed pairwise).
static inline float einsum_sum_squares(const float* x, int64_t n) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int64_t i = 0;
    for (; n - i >= 16; i += 16)
        for (int l = 0; l < 4; ++l) {
            const float a0 = x[i + l], a1 = x[i + 4 + l], a2 = x[i + 8 + l], a3 = x[i + 12 + l];
            float t = a3 * a3 + acc[l];
            t = a2 * a2 + t;
            t = a1 * a1 + t;
            acc[l] = a0 * a0 + t;
        }
    for (; i < n; i += 4)
        for (int l = 0; l < 4; ++l) {
            const float a = i + l < n ? x[i + l] : 0.0f;
            acc[l] = a * a + acc[l];
        }
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

// RMS_NORM of `rows` rows of n: x / sqrt(sum(x^2) / n + eps) (kernels.rms_norm).
static inline void rms_norm(const float* x, float* y, int64_t rows, int64_t n, float eps) {
    for (int64_t r = 0; r < rows; ++r, x += n, y += n) {
        const float ms = einsum_sum_squares(x, n) / (float)n;
        const float d = std::sqrt(ms + eps);
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] / d;
    }
}

// SWIGLU: g / (1 + exp(-g)) * u (kernels.swiglu's in-place steps).
static inline void swiglu(const float* g, const float* u, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        float d = numpy_exp_f32(-g[i]);
        d += 1.0f;
        d = g[i] / d;
        y[i] = d * u[i];
    }
}

// ROPE of x [S, H, D] (contiguous) at positions pos [S], the rotated pairs (i, i + n_dims/2)
// ("neox") or (2i, 2i+1) ("norm"), pair i's frequency divided by freq_factors[i] if given: the
// angles in double, cos / sin rounded to float32, then
// o0 = x0 cos - x1 sin and o1 = x0 sin + x1 cos, each a product rounded before the sum.
static inline void rope(const float* x, const int32_t* pos, float* y, int64_t s, int64_t h, int64_t d,
                        int64_t n_dims, bool neox, double freq_base, double freq_scale,
                        const float* freq_factors = nullptr) {
    const int64_t half = n_dims / 2;
    for (int64_t t = 0; t < s; ++t)
        for (int64_t i = 0; i < half; ++i) {
            double inv = std::pow(freq_base, -(double)i * 2.0 / (double)n_dims);
            if (freq_factors) inv = inv / (double)freq_factors[i];  // llama 3's rope scaling
            const double theta = (double)pos[t] * (freq_scale * inv);
            const float c = (float)std::cos(theta), sn = (float)std::sin(theta);
            const int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            for (int64_t hh = 0; hh < h; ++hh) {
                const float* xr = x + (t * h + hh) * d;
                float* yr = y + (t * h + hh) * d;
                const float x0 = xr[a], x1 = xr[b];
                float o0 = x0 * c;
                o0 -= x1 * sn;
                float o1 = x0 * sn;
                o1 += x1 * c;
                yr[a] = o0;
                yr[b] = o1;
            }
        }
    for (int64_t r = 0; r < s * h; ++r)
        for (int64_t i = n_dims; i < d; ++i) y[r * d + i] = x[r * d + i];
}

// float32 -> float16 as numpy's astype (round to nearest even), and back.
static inline uint16_t to_f16(float f) { return f32_to_f16(f); }
static inline float from_f16(uint16_t h) { return f16_to_f32(h); }

}  // namespace strata_entry
