// Strata's EPU reference runtime: the custom ops of Quadric Chimera on the host, in
// FixedPoint32 integer arithmetic, header-only C++17.
//
// Every function computes exactly what strata/semantics/fixed_arith.py and fixed_interp.py
// (the `fixed` dialect's semantics) compute: int64 intermediates, rounding shifts to nearest
// with halves away from zero, saturation to int32 on every result. A FixedPoint32<F> value is
// an int32 X meaning X * 2^-F; buffers are plain int32_t arrays and the formats are template
// parameters (activations) or fields (weights). The same inputs give the same integers as the
// interpreter, which the tests check bit for bit.
//
//   nn_custom::w4a16NBitsMatMul<Frac, XFrac>         y = x @ W^T, W int4 (MatMulNBits layout)
//   nn_custom::w4a16PackedProj<N, Frac, XFrac>       N such projections of one x (q|k|v, gate|up)
//   nn::qwenMultiheadAttentionFx32RoPE<HD, HQ, HKV, CTX, OutFrac>
//                                                    rope of q and k, k and v rows to int8 into
//                                                    the persistent cache, attention over it
//   epu::embed / rms_norm / add / mul / silu / ...   the element-wise and norm ops
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstdio>

namespace epu {

using i64 = int64_t;

constexpr i64 INT32_MIN_ = -(i64(1) << 31);
constexpr i64 INT32_MAX_ = (i64(1) << 31) - 1;
constexpr int EXP_FRAC = 31;
constexpr i64 LOG2E_Q30 = 1549082005;  // round(log2(e) * 2^30)
constexpr i64 LN2_Q31 = 1488522236;    // round(ln(2) * 2^31)
constexpr int TAYLOR_TERMS = 12;

inline i64 sat32(i64 v) { return v < INT32_MIN_ ? INT32_MIN_ : (v > INT32_MAX_ ? INT32_MAX_ : v); }

// v / 2^s rounded half away from zero (s >= 0).
inline i64 rshift_round(i64 v, int s) {
  if (s <= 0) return v;
  i64 mag = ((v < 0 ? -v : v) + (i64(1) << (s - 1))) >> s;
  return v < 0 ? -mag : mag;
}

// v * 2^s (s >= 0), v first clamped to +-2^(62-s).
inline i64 lshift_sat(i64 v, int s) {
  i64 lim = i64(1) << std::max(62 - s, 0);
  v = std::min(std::max(v, -lim), lim);
  return v * (i64(1) << s);
}

// v * 2^-s: a rounding right shift for s >= 0, a saturating left shift for s < 0.
inline i64 shift(i64 v, int s) { return s >= 0 ? rshift_round(v, s) : lshift_sat(v, -s); }

// a / b rounded half away from zero (b > 0).
inline i64 rdiv(i64 a, i64 b) {
  i64 m = a < 0 ? -a : a;
  i64 q = m / b, r = m % b;
  q += (r >= b - r) ? 1 : 0;
  return a < 0 ? -q : q;
}

inline int ceil_log2(i64 n) {
  int g = 0;
  while ((i64(1) << g) < n) ++g;
  return g;
}

inline int bit_length(i64 v) { return v <= 0 ? 0 : 64 - __builtin_clzll(static_cast<unsigned long long>(v)); }

// floor(sqrt(v)), exactly, for 0 <= v < 2^62.
inline i64 isqrt(i64 v) {
  i64 r = static_cast<i64>(std::floor(std::sqrt(static_cast<double>(v))));
  for (int i = 0; i < 2; ++i) {
    if (r * r > v) --r;
    if ((r + 1) * (r + 1) <= v) ++r;
  }
  return r;
}

// e^d in Q31 for d <= 0 at `frac` fractional bits (fixed_arith.exp_neg).
inline i64 exp_neg(i64 d, int frac) {
  d = std::min<i64>(d, 0);
  d = std::max<i64>(d, -(i64(64) << frac));
  i64 z = shift(d * LOG2E_Q30, frac + 30 - EXP_FRAC);
  i64 a = -z;
  i64 n = a >> EXP_FRAC;
  i64 r = a & ((i64(1) << EXP_FRAC) - 1);
  i64 u = rshift_round(r * LN2_Q31, EXP_FRAC);
  const i64 one = i64(1) << EXP_FRAC;
  i64 p = one;
  for (int k = TAYLOR_TERMS; k >= 1; --k) p = one - rdiv(rshift_round(u * p, EXP_FRAC), k);
  return rshift_round(p, static_cast<int>(std::min<i64>(n, 62)));
}

// Softmax (Q31) of the first `valid` entries of x[0..n) at `frac`; the rest get 0.
inline void softmax_q31(const i64* x, int n, int valid, int frac, i64* p) {
  i64 m = x[0];
  for (int j = 1; j < valid; ++j) m = std::max(m, x[j]);
  i64 s = 0;
  for (int j = 0; j < valid; ++j) {
    p[j] = exp_neg(x[j] - m, frac);
    s += p[j];
  }
  int z = bit_length(s) - 31;
  i64 s1 = rshift_round(s, z);
  i64 r = rdiv(i64(1) << 61, s1);
  for (int j = 0; j < valid; ++j) p[j] = rshift_round(p[j] * r, 61 + z - EXP_FRAC);
  for (int j = valid; j < n; ++j) p[j] = 0;
}

inline i64 sigmoid_q31(i64 x, int frac) {
  i64 e = exp_neg(x < 0 ? x : -x, frac);
  const i64 one = i64(1) << EXP_FRAC;
  return x >= 0 ? rdiv(one << EXP_FRAC, one + e) : rdiv(e << EXP_FRAC, one + e);
}

// ---------------------------------------------------------------------------------------------
// Element-wise and norm ops (fixed.embed, rms_norm, add, mul, rescale, silu, sigmoid, rope)

template <int TableFrac, int Frac>
void embed(const int32_t* ids, int rows, const int32_t* table, int vocab, int dim, int32_t* y) {
  for (int i = 0; i < rows; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      std::fprintf(stderr, "embed: token id %d outside [0, %d)\n", ids[i], vocab);
      std::exit(2);
    }
    for (int d = 0; d < dim; ++d) y[i * dim + d] = static_cast<int32_t>(sat32(shift(table[i64(ids[i]) * dim + d], TableFrac - Frac)));
  }
}

// eps_fixed: round(eps * 2^(2*XFrac - ceil_log2(dim))) (computed by the compiler, as the interpreter does).
template <int XFrac, int WFrac, int Frac>
void rms_norm(const int32_t* x, int rows, int dim, const int32_t* w, i64 eps_fixed, int32_t* y) {
  const int p = ceil_log2(dim);
  const int fm = 2 * XFrac - p;
  const int fn = 31 - (ceil_log2(dim) + 1) / 2;
  for (int i = 0; i < rows; ++i) {
    const int32_t* xr = x + i64(i) * dim;
    i64 s = 0;
    for (int d = 0; d < dim; ++d) s += rshift_round(i64(xr[d]) * xr[d], p);
    i64 m = rdiv(s, dim) + eps_fixed;
    int b = bit_length(m);
    int t = 61 - b;
    if ((fm + t) % 2 != 0) t += 1;
    i64 mn = shift(m, -t);
    i64 root = std::max<i64>(isqrt(mn), 1);
    int e = (fm + t) / 2;  // fm + t is even
    i64 inv = rdiv(i64(1) << 61, root);
    for (int d = 0; d < dim; ++d) {
      i64 n = sat32(shift(xr[d] * inv, XFrac + 61 - e - fn));
      i64 v = sat32(shift(n * w[d], fn + WFrac - Frac));
      y[i64(i) * dim + d] = static_cast<int32_t>(m == 0 ? 0 : v);
    }
  }
}

template <int AFrac, int BFrac, int Frac>
void add(const int32_t* a, const int32_t* b, i64 n, i64 nb, int32_t* y) {
  constexpr int fm = std::max(std::max(AFrac, BFrac), Frac);
  for (i64 i = 0; i < n; ++i)
    y[i] = static_cast<int32_t>(sat32(shift(i64(a[i]) * (i64(1) << (fm - AFrac)) + i64(b[i % nb]) * (i64(1) << (fm - BFrac)), fm - Frac)));
}

template <int AFrac, int BFrac, int Frac>
void mul(const int32_t* a, const int32_t* b, i64 n, i64 nb, int32_t* y) {
  for (i64 i = 0; i < n; ++i) y[i] = static_cast<int32_t>(sat32(shift(i64(a[i]) * b[i % nb], AFrac + BFrac - Frac)));
}

template <int XFrac, int Frac>
void rescale(const int32_t* x, i64 n, int32_t* y) {
  for (i64 i = 0; i < n; ++i) y[i] = static_cast<int32_t>(sat32(shift(x[i], XFrac - Frac)));
}

template <int XFrac, int Frac>
void silu(const int32_t* x, i64 n, int32_t* y) {
  for (i64 i = 0; i < n; ++i) y[i] = static_cast<int32_t>(sat32(shift(i64(x[i]) * sigmoid_q31(x[i], XFrac), XFrac + 31 - Frac)));
}

template <int XFrac, int Frac>
void sigmoid(const int32_t* x, i64 n, int32_t* y) {
  for (i64 i = 0; i < n; ++i) y[i] = static_cast<int32_t>(sat32(shift(sigmoid_q31(x[i], XFrac), 31 - Frac)));
}

// NeoX rope of each hd-wide head of each row; cos/sin [rows, hd/2] at CFrac.
template <int XFrac, int CFrac, int Frac>
void rope(const int32_t* x, int rows, int width, int hd, const int32_t* cos, const int32_t* sin, int32_t* y) {
  const int half = hd / 2, sh = XFrac + CFrac - Frac;
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < width / hd; ++h) {
      const int32_t* xh = x + i64(r) * width + i64(h) * hd;
      int32_t* yh = y + i64(r) * width + i64(h) * hd;
      for (int i = 0; i < half; ++i) {
        i64 c = cos[r * half + i], s = sin[r * half + i], x1 = xh[i], x2 = xh[i + half];
        yh[i] = static_cast<int32_t>(sat32(shift(x1 * c - x2 * s, sh)));
        yh[i + half] = static_cast<int32_t>(sat32(shift(x2 * c + x1 * s, sh)));
      }
    }
}

// fixed.quant_int8: x / scale rounded half away from zero, clamped to [-127, 127]; 0 where scale <= 0.
template <int XFrac, int SFrac>
void quant_int8(const int32_t* x, int rows, int width, const int32_t* scales, int hd, int8_t* q) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < width; ++c) {
      i64 s = scales[c / hd];
      i64 v = 0;
      if (s > 0) {
        v = rdiv(i64(x[i64(r) * width + c]) * (i64(1) << std::max(SFrac - XFrac, 0)), std::max<i64>(s, 1) << std::max(XFrac - SFrac, 0));
        v = std::min<i64>(std::max<i64>(v, -127), 127);
      }
      q[i64(r) * width + c] = static_cast<int8_t>(v);
    }
}

// fixed.matmul: y [m, n] = x [m, k] @ w [n, k]^T, both fixed (a weight kept in full precision).
template <int XFrac, int WFrac, int Frac>
void matmul(const int32_t* x, int m, int k, const int32_t* w, int n, int32_t* y) {
  const int g = ceil_log2(k);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      i64 acc = 0;
      for (int t = 0; t < k; ++t) acc += rshift_round(i64(x[i64(i) * k + t]) * w[i64(j) * k + t], g);
      y[i64(i) * n + j] = static_cast<int32_t>(sat32(shift(acc, XFrac + WFrac - g - Frac)));
    }
}

}  // namespace epu

// ---------------------------------------------------------------------------------------------
// w4a16: int4 weights in ONNX Runtime's MatMulNBits layout

namespace nn_custom {

using epu::i64;

// One int4 weight W [n, k]: B [n, nb, block/2] (element k of block b of row n in
// B[n, b, (k % block) / 2], even k in the low nibble), scales [n, nb] at sfrac, zero points
// [n, ceil(nb/2)] (two per byte, even block low); dequantized to wfrac as fixed.dequant_int4.
struct W4 {
  const uint8_t* b;
  const int32_t* scales;
  const uint8_t* zp;
  int n, k, block, sfrac, wfrac;
};

template <int XFrac, int Frac>
void w4a16_rows(const int32_t* x, int m, const W4& w, int32_t* y) {
  const int nb = (w.k + w.block - 1) / w.block, half = w.block / 2, zpw = (nb + 1) / 2;
  const int g = epu::ceil_log2(w.k);
  const int out_shift = XFrac + w.wfrac - g - Frac;
  i64* acc = new i64[m];
  for (int n = 0; n < w.n; ++n) {
    for (int i = 0; i < m; ++i) acc[i] = 0;
    for (int b = 0; b < nb; ++b) {
      const i64 sc = w.scales[i64(n) * nb + b];
      const i64 z = (w.zp[i64(n) * zpw + b / 2] >> (4 * (b % 2))) & 15;
      const uint8_t* bb = w.b + (i64(n) * nb + b) * half;
      const int k0 = b * w.block, k1 = std::min(w.k, k0 + w.block);
      for (int k = k0; k < k1; ++k) {
        const int kk = k - k0;
        const i64 q = (bb[kk / 2] >> (4 * (kk % 2))) & 15;
        const i64 wv = epu::sat32(epu::shift((q - z) * sc, w.sfrac - w.wfrac));
        for (int i = 0; i < m; ++i) acc[i] += epu::rshift_round(i64(x[i64(i) * w.k + k]) * wv, g);
      }
    }
    for (int i = 0; i < m; ++i) y[i64(i) * w.n + n] = static_cast<int32_t>(epu::sat32(epu::shift(acc[i], out_shift)));
  }
  delete[] acc;
}

// o, down, lm_head: y [m, w.n] = x [m, w.k] @ W^T at FixedPoint32<Frac>.
template <int Frac, int XFrac>
void w4a16NBitsMatMul(const int32_t* x, int m, const W4& w, int32_t* y) {
  w4a16_rows<XFrac, Frac>(x, m, w, y);
}

// q|k|v (N = 3) and gate|up (N = 2): N projections of one x, every output at FixedPoint32<Frac>.
template <int N, int Frac, int XFrac>
void w4a16PackedProj(const int32_t* x, int m, const W4 (&w)[N], int32_t* const (&y)[N]) {
  for (int j = 0; j < N; ++j) w4a16_rows<XFrac, Frac>(x, m, w[j], y[j]);
}

}  // namespace nn_custom

// ---------------------------------------------------------------------------------------------
// Attention with rope and the persistent int8 KV cache

namespace nn {

using epu::i64;

// The formats of one qwenMultiheadAttentionFx32RoPE: inputs, rope outputs, the int8 scales'
// and the dequantized cache's fracs, the scores' (sfrac) and the attention scale as an integer.
struct MhaFormats {
  int q_in, k_in, v_in, cos, q_rope, k_rope, k_scale, v_scale, k_deq, v_deq, sfrac;
  i64 scale;
  int scale_frac;
};

// q [rows, HQ*HD], k and v [rows, HKV*HD] (the projections), cos/sin [rows, HD/2]; kc, vc the
// int8 caches [CTX, HKV*HD]; rows at positions pos..: rope q and k, k and v to int8 with one
// scale per head into the caches, then each query row i attends cache rows 0..pos+i
// (dequantized), as fixed.rope + quant_int8 + cache_write + dequant_int8 + cache_attention.
template <int HD, int HQ, int HKV, int CTX, int OutFrac>
void qwenMultiheadAttentionFx32RoPE(const int32_t* q, const int32_t* k, const int32_t* v, const int32_t* cos,
                                    const int32_t* sin, int8_t* kc, int8_t* vc, const int32_t* kscales,
                                    const int32_t* vscales, int pos, int rows, const MhaFormats& f, int32_t* out) {
  static_assert(HQ % HKV == 0, "query heads must be a multiple of kv heads");
  constexpr int QW = HQ * HD, KW = HKV * HD;
  if (pos < 0 || pos + rows > CTX) {
    std::fprintf(stderr, "attention: positions %d..%d are outside the cache's %d\n", pos, pos + rows - 1, CTX);
    std::exit(2);
  }
  int32_t* qr = new int32_t[i64(rows) * QW];
  int32_t* kr = new int32_t[i64(rows) * KW];
  // rope (the cos/sin format is the table's)
  auto rope = [&](const int32_t* x, int width, int fin, int fout, int32_t* y) {
    const int half = HD / 2, sh = fin + f.cos - fout;
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < width / HD; ++h)
        for (int i = 0; i < half; ++i) {
          const i64 c = cos[r * half + i], s = sin[r * half + i];
          const i64 x1 = x[i64(r) * width + h * HD + i], x2 = x[i64(r) * width + h * HD + i + half];
          y[i64(r) * width + h * HD + i] = static_cast<int32_t>(epu::sat32(epu::shift(x1 * c - x2 * s, sh)));
          y[i64(r) * width + h * HD + i + half] = static_cast<int32_t>(epu::sat32(epu::shift(x2 * c + x1 * s, sh)));
        }
  };
  rope(q, QW, f.q_in, f.q_rope, qr);
  rope(k, KW, f.k_in, f.k_rope, kr);
  // int8 rows into the caches
  auto quant = [&](const int32_t* x, int fx, const int32_t* sc, int fs, int8_t* cache) {
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < KW; ++c) {
        const i64 s = sc[c / HD];
        i64 v8 = 0;
        if (s > 0) {
          v8 = epu::rdiv(i64(x[i64(r) * KW + c]) * (i64(1) << std::max(fs - fx, 0)), std::max<i64>(s, 1) << std::max(fx - fs, 0));
          v8 = std::min<i64>(std::max<i64>(v8, -127), 127);
        }
        cache[i64(pos + r) * KW + c] = static_cast<int8_t>(v8);
      }
  };
  quant(kr, f.k_rope, kscales, f.k_scale, kc);
  quant(v, f.v_in, vscales, f.v_scale, vc);
  // attention over the cache
  const int gd = epu::ceil_log2(HD), gj = epu::ceil_log2(CTX);
  i64* scores = new i64[CTX];
  i64* p = new i64[CTX];
  for (int i = 0; i < rows; ++i) {
    const int valid = pos + i + 1;
    for (int h = 0; h < HQ; ++h) {
      const int j = h / (HQ / HKV);
      const int32_t* qh = qr + i64(i) * QW + h * HD;
      for (int t = 0; t < valid; ++t) {
        i64 raw = 0;
        for (int d = 0; d < HD; ++d) {
          const i64 kd = epu::sat32(epu::shift(i64(kc[i64(t) * KW + j * HD + d]) * kscales[j], f.k_scale - f.k_deq));
          raw += epu::rshift_round(i64(qh[d]) * kd, gd);
        }
        i64 sc = epu::sat32(epu::shift(raw, f.q_rope + f.k_deq - gd - f.sfrac));
        scores[t] = epu::sat32(epu::shift(sc * f.scale, f.scale_frac));
      }
      epu::softmax_q31(scores, CTX, valid, f.sfrac, p);
      for (int d = 0; d < HD; ++d) {
        i64 acc = 0;
        for (int t = 0; t < valid; ++t) {
          const i64 vd = epu::sat32(epu::shift(i64(vc[i64(t) * KW + j * HD + d]) * vscales[j], f.v_scale - f.v_deq));
          acc += epu::rshift_round(p[t] * vd, gj);
        }
        out[i64(i) * QW + h * HD + d] = static_cast<int32_t>(epu::sat32(epu::shift(acc, 31 + f.v_deq - gj - OutFrac)));
      }
    }
  }
  delete[] scores;
  delete[] p;
  delete[] qr;
  delete[] kr;
}

}  // namespace nn
