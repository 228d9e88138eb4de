"""Reference semantics of the op-level ops that run many sequences at once or score targets:
GATED_DELTA_NET over the tokens of several sequences, and the targets' log-probabilities.

The rules of `kernels.py` hold here too (numpy only, functions only, float32 compute): the CPU
target copies these functions into its generated modules as it copies those.
"""

from __future__ import annotations

import numpy as np

from strata.semantics.kernels import gated_delta_net


def gated_delta_net_seq(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray,
                        seq: np.ndarray, state=None, grouped: bool = False) -> np.ndarray:
    """GATED_DELTA_NET_SEQ -> [T, Hv*D] (outputs) or, with `state` [G, Hv, D, D], [T + G*D, Hv*D]
    (outputs, then each sequence's final state). Sequence s runs gated_delta_net over its
    tokens (seq == s, in order) from state[s] (zeros without `state`); tokens of no sequence
    (seq < 0) give zeros."""
    seq = np.asarray(seq, dtype=np.int64).reshape(-1)
    t, hv, d = np.shape(v)
    groups = 0 if state is None else int(np.shape(state)[0])
    out = np.zeros((t + groups * d, hv * d), dtype=np.float32)
    finals = out.reshape(-1)[t * hv * d:].reshape(groups, hv, d, d)
    if state is not None:
        finals[...] = np.asarray(state, dtype=np.float32)
    for s in np.unique(seq[seq >= 0]).tolist():
        idx = np.flatnonzero(seq == s)
        start = finals[s] if state is not None else np.zeros((hv, d, d), dtype=np.float32)
        r = gated_delta_net(q[idx], k[idx], v[idx], np.asarray(g)[idx], np.asarray(beta)[idx], start, grouped)
        out[idx] = r[:idx.size]
        if state is not None:
            finals[s] = r.reshape(-1)[idx.size * hv * d:].reshape(hv, d, d)
    return out


def target_log_probs(x: np.ndarray, weight: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """log softmax(x w^T)[p, targets[p]] -> [P] float32, x [P, H], weight [Vocab, H]: the
    vocabulary in chunks of rows of the weight, with a running maximum and sum of exp, so that
    no [P, Vocab] logits exist at once (the same values as the logits' log-softmax, to float32
    rounding of the sums)."""
    x = np.asarray(x, dtype=np.float32)
    targets = np.asarray(targets, dtype=np.int64).reshape(-1)
    p, vocab = x.shape[0], weight.shape[0]
    chunk = max(1, min(vocab, (1 << 22) // max(p, 1)))  # about 16 MiB of logits at a time
    best = np.full(p, -np.inf, dtype=np.float32)
    total = np.zeros(p, dtype=np.float32)
    picked = np.zeros(p, dtype=np.float32)
    rows = np.arange(p)
    for v0 in range(0, vocab, chunk):
        z = x @ np.asarray(weight[v0:v0 + chunk], dtype=np.float32).T  # [P, chunk]
        top = np.maximum(best, z.max(axis=1))
        total = total * np.exp(best - top) + np.exp(z - top[:, None]).sum(axis=1, dtype=np.float32)
        best = top
        inside = (targets >= v0) & (targets < v0 + z.shape[1])
        picked[inside] = z[rows[inside], targets[inside] - v0]
    return (picked - best - np.log(total)).astype(np.float32)
