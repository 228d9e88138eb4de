"""One rank of a tensor-parallel program (`strata.runtime.tp`), as a process.

    torchrun --nproc-per-node 2 -m strata.runtime.worker MODEL --prompt-ids 1,2,3 --max-new-tokens 16
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-endpoint HOST:PORT -m strata.runtime.worker MODEL ...

Under torchrun the rank and the group come from its environment (RANK, WORLD_SIZE,
MASTER_ADDR); `strata run --tp N` starts ranks 1.. itself with `--rank R --init-method URL`.
Rank 0 runs the request through the one generation loop and prints what `strata run` prints;
every other rank follows rank 0's steps. Followers print nothing but their errors.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from strata.runtime.tp import main as rank_main

    return rank_main(argv)


if __name__ == "__main__":
    sys.exit(main())
