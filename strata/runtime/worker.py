"""One rank of a tensor-parallel program (`strata.runtime.tp`), as a process.

    torchrun --nproc-per-node 2 -m strata.runtime.worker MODEL --prompt-ids 1,2,3 --max-new-tokens 16
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-endpoint HOST:PORT -m strata.runtime.worker MODEL ...

Under torchrun the rank and the group come from its environment (RANK, WORLD_SIZE,
MASTER_ADDR); `strata run --tp N` starts ranks 1.. itself with `--rank R --init-method URL`.
Rank 0 runs the request through the one generation loop and prints what `strata run` prints;
every other rank follows rank 0's steps. Followers print nothing but their errors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv: list[str] | None = None) -> int:
    from strata.errors import run_tool

    p = argparse.ArgumentParser(prog="strata.runtime.worker", description=__doc__.splitlines()[0])
    p.add_argument("model", help="the model directory or GGUF file")
    p.add_argument("--tp", type=int, default=None, help="the ranks (default: torchrun's WORLD_SIZE)")
    p.add_argument("--rank", type=int, default=None, help="this process's rank (default: torchrun's RANK)")
    p.add_argument("--init-method", default=None, help="the rendezvous (default: torchrun's env://)")
    p.add_argument("--target", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--knobs", default="{}", help="the target's knobs, as JSON")
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--timeout", type=float, default=None, help="seconds a rank waits for the others")
    p.add_argument("--prompt-ids", default=None, help="rank 0: the request's ids, e.g. 1,2,3")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--dump-logits", default=None)
    args = p.parse_args(argv)
    return run_tool("strata.runtime.worker", lambda: _run(args), owns_process=True)


def _run(args: argparse.Namespace) -> int:
    from strata.errors import StrataError
    from strata.pipeline import load_model
    from strata.runtime import tp as T

    tp = args.tp if args.tp is not None else int(os.environ.get("WORLD_SIZE", "0"))
    rank = args.rank if args.rank is not None else int(os.environ.get("RANK", "-1"))
    if tp < 2 or not 0 <= rank < tp:
        raise StrataError(f"strata.runtime.worker: needs --tp N >= 2 and --rank in 0..N-1 (or torchrun's "
                          f"WORLD_SIZE and RANK), got tp={tp} rank={rank}")
    try:
        knobs = json.loads(args.knobs)
    except ValueError as e:
        raise StrataError(f"strata.runtime.worker: --knobs is not JSON ({e})") from None
    model = load_model(args.model)
    program = T.open_rank(model, args.target, knobs, tp, rank, args.init_method or "env://",
                          cache_dir=args.cache_dir, timeout_s=args.timeout or T.TIMEOUT_S)
    if rank != 0:
        T.follow(program)
        return 0
    if args.prompt_ids is None:
        raise StrataError("strata.runtime.worker: rank 0 needs --prompt-ids")
    from strata.runtime.engine import generate_reported
    from strata.runtime.request import check_request, parse_prompt_ids

    leader = T.Leader(program)
    try:
        ids = check_request(parse_prompt_ids(args.prompt_ids), args.max_new_tokens, leader.vocab, leader.n_ctx)
    except BaseException:
        leader.close()
        raise
    generate_reported(leader, ids, args.max_new_tokens, args.dump_logits)
    return 0


if __name__ == "__main__":
    sys.exit(main())
