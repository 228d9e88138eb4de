"""The EPU runtime's element ops (strata/targets/epu/runtime/epu_runtime.h) against the fixed
interpreter's integers, on random inputs that include saturating ones: one small C++ program
built once, every op compared bit for bit (the model test covers the custom ops)."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from strata.semantics import fixed_arith as A
from strata.semantics.fixed_interp import matmul_fixed, rms_norm_fixed
from strata.targets.epu.emit import RUNTIME

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
RNG = np.random.default_rng(11)
R, D = 3, 24

PROGRAM = r"""
#include "epu_runtime.h"
#include <cstdio>
#include <vector>
int main() {
  std::vector<int32_t> x(R * D), w(D), y(R * D), b(R * D), m(5 * D), cs(R * 4), sn(R * 4);
  std::vector<int64_t> d(64);
  if (std::fread(x.data(), 4, R * D, stdin) != size_t(R * D) || std::fread(w.data(), 4, D, stdin) != size_t(D) ||
      std::fread(b.data(), 4, R * D, stdin) != size_t(R * D) || std::fread(m.data(), 4, 5 * D, stdin) != size_t(5 * D) ||
      std::fread(cs.data(), 4, R * 4, stdin) != size_t(R * 4) || std::fread(sn.data(), 4, R * 4, stdin) != size_t(R * 4) ||
      std::fread(d.data(), 8, 64, stdin) != 64) return 1;
  auto put = [&](const std::vector<int32_t>& v, size_t n) { std::fwrite(v.data(), 4, n, stdout); };
  epu::rms_norm<27, 30, 26>(x.data(), R, D, w.data(), EPS, y.data()); put(y, R * D);
  epu::add<27, 25, 26>(x.data(), b.data(), R * D, R * D, y.data()); put(y, R * D);
  epu::mul<27, 25, 29>(x.data(), b.data(), R * D, R * D, y.data()); put(y, R * D);
  epu::rescale<27, 30>(x.data(), R * D, y.data()); put(y, R * D);
  epu::silu<27, 24>(x.data(), R * D, y.data()); put(y, R * D);
  epu::sigmoid<27, 31>(x.data(), R * D, y.data()); put(y, R * D);
  epu::rope<27, 30, 26>(x.data(), R, D, 8, cs.data(), sn.data(), y.data()); put(y, R * D);
  std::vector<int32_t> mm(R * 5);
  epu::matmul<27, 31, 25>(x.data(), R, D, m.data(), 5, mm.data()); put(mm, R * 5);
  std::vector<int64_t> e(64);
  for (int i = 0; i < 64; ++i) e[i] = epu::exp_neg(d[i], 20);
  std::fwrite(e.data(), 8, 64, stdout);
  std::vector<int64_t> p(64);
  epu::softmax_q31(d.data(), 64, 50, 20, p.data());
  std::fwrite(p.data(), 8, 64, stdout);
  return 0;
}
"""


def test_element_ops_are_the_interpreters(tmp_path):
    eps = 1e-5
    fm = 2 * 27 - A.ceil_log2(D)
    eps_fixed = int(min(round(eps * 2.0 ** fm), 2 ** 61))
    (tmp_path / "epu_runtime.h").write_bytes(RUNTIME.read_bytes())
    (tmp_path / "t.cpp").write_text(f"#define R {R}\n#define D {D}\n#define EPS {eps_fixed}LL\n" + PROGRAM)
    exe = tmp_path / "t"
    subprocess.run(["g++", "-O2", "-std=c++17", "-o", str(exe), "t.cpp"], cwd=tmp_path, check=True)
    x = A.to_fixed(RNG.standard_normal((R, D)) * 3, 27)
    x[0, :3] = [A.INT32_MAX, A.INT32_MIN, 0]  # the limits
    x[1] = 0  # an all-zero row for the norm
    w = A.to_fixed(RNG.uniform(0.5, 1.5, D), 30)
    b = A.to_fixed(RNG.standard_normal((R, D)) * 40, 25)
    m = A.to_fixed(RNG.standard_normal((5, D)) * 0.3, 31)
    ang = RNG.uniform(0, 6.3, (R, 4))
    cs, sn = A.to_fixed(np.cos(ang), 30), A.to_fixed(np.sin(ang), 30)
    d = -np.abs(A.to_fixed(RNG.standard_normal(64) * 8, 20))
    d[0], d[1] = 0, -(2 ** 40)
    feed = b"".join(np.asarray(a, "<i4").tobytes() for a in (x, w, b, m, cs, sn)) + np.asarray(d, "<i8").tobytes()
    raw = subprocess.run([str(exe)], input=feed, capture_output=True, check=True).stdout
    n = R * D
    got = np.frombuffer(raw[:4 * (7 * n + R * 5)], "<i4").astype(np.int64)
    e_got = np.frombuffer(raw[4 * (7 * n + R * 5):], "<i8")
    outs = [got[i * n:(i + 1) * n].reshape(R, D) for i in range(7)]
    sh = A.shift
    ref = [
        rms_norm_fixed(x, 27, w, 30, 26, eps),
        A.sat32(sh((x << 0) + (b << 2), 27 - 26)),
        A.sat32(sh(x * b, 27 + 25 - 29)),
        A.sat32(sh(x, 27 - 30)),
        A.sat32(sh(x * A.sigmoid_q31(x, 27), 27 + 31 - 24)),
        A.sat32(sh(A.sigmoid_q31(x, 27), 31 - 31)),
    ]
    h = x.reshape(R, -1, 8)
    c, s = cs[:, None, :], sn[:, None, :]
    ref.append(A.sat32(np.concatenate([sh(h[..., :4] * c - h[..., 4:] * s, 27 + 30 - 26),
                                       sh(h[..., 4:] * c + h[..., :4] * s, 27 + 30 - 26)], -1).reshape(R, D)))
    for i, (g, r) in enumerate(zip(outs, ref)):
        np.testing.assert_array_equal(g, r, err_msg=f"op {i}")
    assert (outs[3] == A.INT32_MAX).any() and (outs[3] == A.INT32_MIN).any()  # saturation was exercised
    np.testing.assert_array_equal(got[7 * n:].reshape(R, 5), matmul_fixed(x, 27, m, 31, 25))
    np.testing.assert_array_equal(e_got[:64], A.exp_neg(d, 20))
    valid = np.arange(64) < 50
    np.testing.assert_array_equal(e_got[64:], A.softmax_q31(d[None, :], 20, valid[None, :])[0])
