"""What every `strata run` prints: the ids last on standard output, then the logits to the
--dump-logits file if asked (the ids first, so that whatever happens to the file the result is
not lost)."""

from __future__ import annotations

import io

import numpy as np

from strata.artifacts.files import write_output
from strata.errors import say


def report_result(ids, logits, dump_logits: str | None) -> None:
    print("ids=" + ",".join(str(int(t)) for t in ids), flush=True)
    if dump_logits:
        buf = io.BytesIO()
        np.save(buf, np.asarray(logits).astype(np.float32), allow_pickle=False)
        write_output(dump_logits, buf.getvalue())
        say(f"logits {list(np.shape(logits))} float32 saved to {dump_logits}")
