"""The sampler's reference semantics (strata/semantics/sampling.py) against outside references:
Philox 4x32-10 against Random123's known answers and Triton's own tl.randint4x / tl.rand (run by
Triton's interpreter), the filtered distribution against HF transformers' logits processors, the
draws against that distribution (a chi-square test), greedy against today's argmax."""

from __future__ import annotations

import ast
import inspect
import math
import subprocess
import sys

import numpy as np
import pytest

from support import ROOT
from strata.semantics import kernels as K
from strata.semantics import sampling as S


# ---------------------------------------------------------------------------------------------
# Philox


def test_philox_known_answers():
    """Random123's kat_vectors for philox4x32_10 (counter words, key words -> output words)."""
    cases = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
             ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
             ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
              (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
    for ctr, key, want in cases:
        assert tuple(int(w) for w in S.philox_4x32(*ctr, *key)) == want


SEEDS = (0, 1, 12345, 2**31 + 5, 2**32 + 7, 2**40 + 3, 0x7FFF_FFFF_FFFF_FFFF, -5)


def test_philox_equals_triton_bit_for_bit():
    """tl.randint4x's four words and tl.rand's floats, for int64 offsets (both counter words)
    and int32 offsets (negative ones included), several seeds, seeds >= 2**32 among them."""
    pytest.importorskip("triton", reason="the comparison runs Triton's interpreter (the `test` extra)")
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def philox_probe(off_ptr, w0_ptr, w1_ptr, w2_ptr, w3_ptr, u_ptr, seed, N: tl.constexpr):
        i = tl.arange(0, N)
        off = tl.load(off_ptr + i)
        a, b, c, d = tl.randint4x(seed, off)
        tl.store(w0_ptr + i, a.to(tl.int32, bitcast=True))
        tl.store(w1_ptr + i, b.to(tl.int32, bitcast=True))
        tl.store(w2_ptr + i, c.to(tl.int32, bitcast=True))
        tl.store(w3_ptr + i, d.to(tl.int32, bitcast=True))
        tl.store(u_ptr + i, tl.rand(seed, off))

    assert type(philox_probe).__name__ == "InterpretedFunction", "TRITON_INTERPRET=1 must be set (tests/conftest.py)"
    rng = np.random.default_rng(7)
    n = 256
    for seed in SEEDS:
        for dtype in (np.int64, np.int32):
            if dtype == np.int64:
                off = rng.integers(-2**63, 2**63 - 1, size=n, dtype=np.int64)
                off[:4] = [0, 1, 2**32, -1]
            else:
                off = rng.integers(-2**31, 2**31 - 1, size=n, dtype=np.int64).astype(np.int32)
            words = [torch.empty(n, dtype=torch.int32) for _ in range(4)]
            u = torch.empty(n, dtype=torch.float32)
            philox_probe[(1,)](torch.from_numpy(off), *words, u, seed, N=n)
            want = S.philox_randint4x(seed, off)
            for got, w in zip(words, want):
                assert np.array_equal(got.numpy().view(np.uint32), w), (seed, dtype)
            assert np.array_equal(u.numpy().view(np.uint32), S.philox_rand(seed, off).view(np.uint32)), (seed, dtype)
            assert np.array_equal(S.philox_randint(seed, off), want[0])


def test_uniform_float_range():
    """tl.rand's conversion: [0, 1) at the extreme words, and 0 at both 0 and 0xFFFFFFFF (~x)."""
    x = np.array([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF], dtype=np.uint32)
    u = S.uint_to_uniform_float(x)
    assert u.dtype == np.float32 and (u >= 0).all() and (u < 1).all()
    assert u[0] == 0 and u[4] == 0 and u[2] == u[3]


def test_stream_mapping():
    """bits[row] = randint(key[0], key[1] + step * 2**32 + row mod 2**64), as documented."""
    key = np.array([2**40 + 11, -3], dtype=np.int64)
    step, rows = 77, 5
    bits = S.sampling_random_bits(key, step, rows)
    for row in range(rows):
        off = (int(key[1]) + (step << 32) + row) % 2**64
        off = off - 2**64 if off >= 2**63 else off
        assert bits[row] == S.philox_randint(int(key[0]), np.array([off], dtype=np.int64))[0]
    # distinct (step, row) pairs are distinct counters: no repeats in a block of draws
    grid = np.stack([S.sampling_random_bits(key, s, 64) for s in range(64)])
    assert len(np.unique(grid)) == grid.size
    with pytest.raises(ValueError, match="two int64"):
        S.sampling_random_bits([1, 2, 3], 0, 1)
    with pytest.raises(ValueError, match="step"):
        S.sampling_random_bits(key, 2**32, 1)


def test_exp_f32_within_one_ulp():
    x = np.concatenate([np.linspace(-80, 0, 400001, dtype=np.float32), np.float32([0.0, -1e-30, -87.0])])
    got = S.exp_f32(x)
    want = np.exp(x.astype(np.float64))
    ulp = np.spacing(want.astype(np.float32)).astype(np.float64)
    err = np.abs(got - want) / ulp
    assert err[x >= -80].max() <= 1.0, err.max()
    assert got[-3] == 1.0 and got[-1] == 0.0 and S.exp_f32(np.float32(-np.inf)) == 0.0


# ---------------------------------------------------------------------------------------------
# The filtered distribution against HF's logits processors


def hf_distribution(logits: np.ndarray, history: list[int], outputs: list[int], temperature: float, top_k: int,
                    top_p: float, min_p: float, repetition: float, presence: float, frequency: float,
                    stable_sort: bool) -> np.ndarray:
    """HF's processors in `_get_logits_processor`'s order, on torch f32, after vLLM's presence and
    frequency penalties (which HF lacks; `apply_penalties`' two lines). `stable_sort`: torch.sort
    orders ties arbitrarily (HF's top-p is then not a function of the logits); with it, ties sort
    by index, the order the sampler defines."""
    import torch
    from transformers.generation import logits_process as LP

    ids = torch.tensor([history + outputs], dtype=torch.long)
    s = torch.tensor(logits)[None]
    if repetition != 1.0 and ids.numel():
        s = LP.RepetitionPenaltyLogitsProcessor(float(repetition))(ids, s)
    counts = torch.zeros_like(s)
    for t in outputs:
        counts[0, t] += 1
    s = s - frequency * counts
    s = s - presence * (counts > 0).float()
    warpers = []
    if temperature != 1.0:
        warpers.append(LP.TemperatureLogitsWarper(float(temperature)))
    if top_k != 0:
        warpers.append(LP.TopKLogitsWarper(int(top_k)))
    if top_p < 1.0:
        warpers.append(LP.TopPLogitsWarper(float(top_p)))
    warpers.append(LP.MinPLogitsWarper(float(min_p)))
    sort = torch.sort
    if stable_sort:
        torch.sort = lambda x, descending=False, **kw: sort(x, descending=descending, stable=True)
    try:
        for w in warpers:
            s = w(ids, s)
    finally:
        torch.sort = sort
    return torch.softmax(s, dim=-1)[0].double().numpy()


def random_case(rng, vocab: int, ties: bool) -> dict:
    logits = (rng.standard_normal(vocab) * rng.uniform(0.3, 10)).astype(np.float32)
    if ties:  # few distinct values: ties at every cut
        logits = np.round(logits / rng.uniform(0.5, 3)).astype(np.float32)
    if vocab > 4 and rng.random() < 0.2:
        logits[rng.integers(0, vocab, size=vocab // 4)] = -np.inf  # masked tokens
    return dict(
        logits=logits,
        history=[int(t) for t in rng.integers(0, vocab, size=rng.integers(0, 12))],
        outputs=[int(t) for t in rng.integers(0, vocab, size=rng.integers(0, 12))],
        temperature=float(rng.choice([0.05, 0.3, 0.7, 1.0, 1.5, 100.0])),
        top_k=int(rng.choice([0, 1, 2, 5, 40, vocab, vocab + 7])),
        top_p=float(rng.choice([1.0, 0.95, 0.8, 0.5, 0.1, 0.0])),
        min_p=float(rng.choice([0.0, 0.0, 0.02, 0.2, 1.0])),
        repetition=float(rng.choice([1.0, 1.3, 0.7])),
        presence=float(rng.choice([0.0, 0.0, 0.6, -0.4])),
        frequency=float(rng.choice([0.0, 0.0, 0.3, -0.2])),
    )


def ours(case: dict) -> np.ndarray:
    vocab = case["logits"].shape[0]
    pc = np.bincount(np.array(case["history"], dtype=np.int64), minlength=vocab)[None]
    oc = np.bincount(np.array(case["outputs"], dtype=np.int64), minlength=vocab)[None]
    return S.sampling_distribution(case["logits"][None], temperature=case["temperature"], top_k=case["top_k"],
                                   top_p=case["top_p"], min_p=case["min_p"], repetition_penalty=case["repetition"],
                                   presence_penalty=case["presence"], frequency_penalty=case["frequency"],
                                   prompt_counts=pc, output_counts=oc)[0]


@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "ties"])
def test_distribution_equals_hf(ties: bool):
    """600 random logits vectors and parameter sets (vocab 1 to 3000; top_k > vocab, top_p 1 and 0,
    min_p 0 and 1, masked tokens, temperatures 0.05 to 100, all three penalties): within 1e-6 of
    HF's. Distinct logits go through HF's processors as they are; tied ones with a stable sort."""
    pytest.importorskip("transformers", reason="the reference is HF transformers (the `test` extra)")
    rng = np.random.default_rng(11 + ties)
    worst, split = 0.0, 0
    for i in range(300):
        vocab = int(rng.choice([1, 2, 3, 17, 100, 257, 1000, 3000]))
        case = random_case(rng, vocab, ties)
        if not np.isfinite(case["logits"]).any():
            case["logits"][0] = 0.0
        ref = hf_distribution(**case, stable_sort=ties)
        got = ours(case)
        diff = float(np.abs(got - ref).max())
        assert diff <= 1e-6, (i, diff, {k: v for k, v in case.items() if k != "logits"})
        worst = max(worst, diff)
        split += _splits_a_tie(case, got)
    print(f"max |p - p_hf| over 300 {'tied' if ties else 'distinct'} cases: {worst:.3g}, {split} cutting through ties")
    assert split >= 20 if ties else split == 0  # the tied cases do exercise cuts inside a group of equal logits


def _splits_a_tie(case: dict, p: np.ndarray) -> bool:
    """Whether some filter kept part of a group of tokens with equal (penalized) logits."""
    vocab = case["logits"].shape[0]
    pc = np.bincount(np.array(case["history"], dtype=np.int64), minlength=vocab)[None]
    oc = np.bincount(np.array(case["outputs"], dtype=np.int64), minlength=vocab)[None]
    z = S.sampling_penalize(case["logits"][None], pc, oc, case["repetition"], case["presence"], case["frequency"])[0]
    return any(len(set((p[z == v] > 0).tolist())) > 1 for v in np.unique(z[np.isfinite(z)]))


def test_ties_at_the_top_p_cut_keep_the_highest_indices():
    """Four tokens tied at the cut: in ascending (z, index) order the lowest indices go first."""
    logits = np.log(np.float32([0.1, 0.2, 0.2, 0.2, 0.2, 0.1]))[None]
    # ascending order: 0, 5 (0.1 each), then 1, 2, 3, 4; drop prefix mass <= 0.5: 0, 5, 1 (0.4) ... and 2 (0.6 > 0.5 kept)
    p = S.sampling_distribution(logits, top_p=0.5)[0]
    assert np.array_equal(p > 0, [False, False, True, True, True, False])
    np.testing.assert_allclose(p[2:5], 1 / 3, rtol=1e-6)


def test_neutral_parameters_change_nothing():
    """Temperature 1, no top-k/top-p/min-p, neutral penalties: the softmax of the logits."""
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((4, 500)) * 3).astype(np.float32)
    counts = rng.integers(0, 3, size=logits.shape)
    p = S.sampling_distribution(logits, prompt_counts=counts, output_counts=counts)
    ref = np.exp(logits - logits.max(axis=1, keepdims=True)).astype(np.float64)
    np.testing.assert_allclose(p, ref / ref.sum(axis=1, keepdims=True), atol=1e-7)


# ---------------------------------------------------------------------------------------------
# The draws


def chi2_sf(x: float, dof: int) -> float:
    """P(chi2_dof > x): the regularized upper incomplete gamma Q(dof/2, x/2) (series below a + 1,
    Lentz's continued fraction above, as in Numerical Recipes' gammq)."""
    a, y = dof / 2.0, x / 2.0
    if y <= 0:
        return 1.0
    log_front = -y + a * math.log(y) - math.lgamma(a)
    if y < a + 1:
        term = total = 1.0 / a
        n = a
        while abs(term) > abs(total) * 1e-15:
            n += 1
            term *= y / n
            total += term
        return 1.0 - total * math.exp(log_front)
    tiny = 1e-300
    b = y + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return h * math.exp(log_front)


def test_chi2_sf_closed_forms():
    for x in (0.1, 1.0, 3.84, 10.0, 50.0):
        assert chi2_sf(x, 2) == pytest.approx(math.exp(-x / 2), rel=1e-12)
        assert chi2_sf(x, 1) == pytest.approx(math.erfc(math.sqrt(x / 2)), rel=1e-10)
        assert chi2_sf(x, 4) == pytest.approx(math.exp(-x / 2) * (1 + x / 2), rel=1e-12)
    assert chi2_sf(3.841458820694124, 1) == pytest.approx(0.05, rel=1e-9)


def chi2_p(ids: np.ndarray, p: np.ndarray) -> float:
    """Pearson's chi-square p-value of the ids' counts against p (bins expecting < 5 merged)."""
    n = ids.size
    counts = np.bincount(ids, minlength=p.size).astype(np.float64)
    assert counts[p == 0].sum() == 0, "a token of probability 0 was drawn"
    expected = p * n
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] < 5:  # the merged small bins are still small: fold them into the last big bin
        obs[-2] += obs[-1]
        exp[-2] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    stat = float(((obs - exp) ** 2 / exp).sum())
    return chi2_sf(stat, obs.size - 1)


FIXED_LOGITS = (np.random.default_rng(2024).standard_normal(64) * 2.0).astype(np.float32)
DRAWS = 20000
CHI2_SETS = {
    "plain": dict(),
    "temperature": dict(temperature=0.6),
    "top_k": dict(temperature=1.3, top_k=12),
    "top_p": dict(temperature=0.9, top_p=0.8),
    "min_p": dict(min_p=0.05),
    "all": dict(temperature=0.8, top_k=30, top_p=0.9, min_p=0.01, repetition_penalty=1.3, presence_penalty=0.4,
                frequency_penalty=0.2),
}


def _counts() -> tuple[np.ndarray, np.ndarray]:
    pc = np.zeros((1, 64), dtype=np.int32)
    oc = np.zeros((1, 64), dtype=np.int32)
    pc[0, [0, 5, 9, 33]] = 1
    oc[0, [5, 7, 7, 7, 40]] = [1, 3, 3, 3, 2]
    return pc, oc


@pytest.mark.parametrize("name", sorted(CHI2_SETS))
def test_draws_follow_the_distribution(name: str):
    """20,000 draws on a fixed logits vector (as 20,000 rows of one call: one counter each)
    pass a chi-square test (p > 0.001) against the filtered distribution."""
    params = dict(CHI2_SETS[name])
    pc, oc = _counts()
    p = S.sampling_distribution(FIXED_LOGITS[None], prompt_counts=pc, output_counts=oc, **params)[0]
    logits = np.broadcast_to(FIXED_LOGITS, (DRAWS, 64))
    ids = S.sample(logits, key=[20240607, 99], step=3, prompt_counts=np.repeat(pc, DRAWS, 0),
                   output_counts=np.repeat(oc, DRAWS, 0), **params)
    pval = chi2_p(ids, p)
    print(f"chi-square p-value, {name}: {pval:.4f}")
    assert pval > 0.001, (name, pval)


def test_draws_over_steps_follow_the_distribution():
    """The same over 20,000 steps of one row (the counter's other half)."""
    p = S.sampling_distribution(FIXED_LOGITS[None], temperature=0.9, top_p=0.8)[0]
    bits = np.array([S.sampling_random_bits([5, 6], step, 1)[0] for step in range(DRAWS)], dtype=np.uint32)
    w = S.sampling_masses(FIXED_LOGITS[None], temperature=0.9, top_p=0.8)
    ids = S.sample_from_masses(np.broadcast_to(w, (DRAWS, 64)), bits)
    assert np.array_equal(ids[:50], [S.sample(FIXED_LOGITS[None], [5, 6], s, temperature=0.9, top_p=0.8)[0]
                                     for s in range(50)])
    pval = chi2_p(ids, p)
    print(f"chi-square p-value, over steps: {pval:.4f}")
    assert pval > 0.001


def test_the_chi_square_test_rejects_a_wrong_distribution():
    """The test has power: draws with top-k 12 against the unfiltered softmax fail it."""
    p_full = S.sampling_distribution(FIXED_LOGITS[None])[0]
    ids = S.sample(np.broadcast_to(FIXED_LOGITS, (DRAWS, 64)), key=[1, 2], top_k=12)
    with pytest.raises(AssertionError, match="probability 0"):
        chi2_p(ids, S.sampling_distribution(FIXED_LOGITS[None], top_k=11)[0])
    ids = S.sample(np.broadcast_to(FIXED_LOGITS, (DRAWS, 64)), key=[1, 2], temperature=1.1)
    assert chi2_p(ids, p_full) < 0.001


# ---------------------------------------------------------------------------------------------
# Determinism, greedy, the generated-code rules, bad input


def test_same_key_same_ids_run_after_run():
    """Same (key, step): the same ids in this process and in a fresh one; another key, step or
    row: other ids."""
    logits = (np.random.default_rng(5).standard_normal((8, 1000)) * 2).astype(np.float32)
    args = dict(key=[2**33 + 1, 7], step=12, temperature=0.9, top_p=0.95, top_k=100)
    a = S.sample(logits, **args)
    assert np.array_equal(a, S.sample(logits, **args))
    code = ("import numpy as np; from strata.semantics import sampling as S; "
            "l = (np.random.default_rng(5).standard_normal((8, 1000)) * 2).astype(np.float32); "
            "print(','.join(map(str, S.sample(l, key=[2**33 + 1, 7], step=12, temperature=0.9, top_p=0.95, top_k=100))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == ",".join(map(str, a))
    tiled = np.broadcast_to(logits[0], (200, 1000))
    base = S.sample(tiled, key=[1, 0], step=0)
    assert len(set(base.tolist())) > 20  # rows draw from distinct counters
    assert not np.array_equal(base, S.sample(tiled, key=[2, 0], step=0))
    assert not np.array_equal(base, S.sample(tiled, key=[1, 1], step=0))
    assert not np.array_equal(base, S.sample(tiled, key=[1, 0], step=1))


def test_temperature_zero_is_todays_greedy():
    """Temperature 0 is argmax (first max on ties), whatever the other filters say; with neutral
    penalties exactly K.argmax, with penalties the argmax of the penalized logits."""
    rng = np.random.default_rng(9)
    logits = np.round(rng.standard_normal((64, 300)) * 2).astype(np.float32)  # many tied maxima
    got = S.sample(logits, key=[3, 4], temperature=0.0, top_k=5, top_p=0.3, min_p=0.5)
    assert np.array_equal(got, K.argmax(logits))
    counts = rng.integers(0, 2, size=logits.shape)
    got = S.sample(logits, key=[3, 4], temperature=0.0, repetition_penalty=1.0, prompt_counts=counts,
                   output_counts=counts)
    assert np.array_equal(got, K.argmax(logits))
    pen = S.sampling_penalize(logits, counts, counts, 1.5, 0.3, 0.1)
    got = S.sample(logits, key=[3, 4], temperature=0.0, repetition_penalty=1.5, presence_penalty=0.3,
                   frequency_penalty=0.1, prompt_counts=counts, output_counts=counts)
    assert np.array_equal(got, K.argmax(pen)) and not np.array_equal(got, K.argmax(logits))
    mixed = S.sample(logits[:2], key=[3, 4], temperature=[0.0, 1.0])  # per-row parameters
    assert mixed[0] == K.argmax(logits[:1])[0]


def test_functions_are_self_contained():
    """The CPU code generator's rules: numpy only, no module-level state, and `sample` with the
    helpers its syntax tree names runs in a namespace holding only np."""
    from strata.targets.cpu.kernel_library import KernelLibrary

    source = inspect.getsource(S)
    tree = ast.parse(source)
    imports = {a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    imports |= {n.module for n in tree.body if isinstance(n, ast.ImportFrom)}
    assert imports == {"numpy", "__future__"}
    assert all(isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef))
               or (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)) for n in tree.body)
    lib = KernelLibrary(source)
    names = lib.closure({"sample"})
    namespace = {"np": np}
    exec("\n\n".join(lib.text(n) for n in names), namespace)  # noqa: S102 - our own source
    logits = (np.random.default_rng(1).standard_normal((3, 50))).astype(np.float32)
    args = dict(key=[9, 9], step=4, temperature=0.7, top_k=10, top_p=0.9, min_p=0.02)
    assert np.array_equal(namespace["sample"](logits, **args), S.sample(logits, **args))


@pytest.mark.parametrize("params, message", [
    (dict(temperature=-1.0), "temperature must be >= 0"),
    (dict(top_p=1.5), "top_p must be in"),
    (dict(min_p=-0.1), "min_p must be in"),
    (dict(repetition_penalty=0.0), "repetition_penalty must be > 0"),
    (dict(presence_penalty=float("nan")), "presence_penalty must be finite"),
])
def test_bad_parameters(params, message):
    with pytest.raises(ValueError, match=message):
        S.sample(np.zeros((1, 4), np.float32), key=[0, 0], **params)


def test_bad_shapes():
    with pytest.raises(ValueError, match=r"logits \[rows, vocab\]"):
        S.sample(np.zeros(4, np.float32), key=[0, 0])
    with pytest.raises(ValueError, match="do not match the logits"):
        S.sample(np.zeros((2, 4), np.float32), key=[0, 0], output_counts=np.zeros((2, 5)))
