"""Reading a `strata calibrate` ranges file (format `strata-ranges/v1`), for the passes that take
one (smoothquant, assign-frac-bits); each checks the section it reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from strata.errors import StrataError
from strata.ir.inputs import MiB, read_text

#: The largest ranges file read (a per-channel max for every linear of a large model fits).
RANGES_LIMIT = 256 * MiB


def read_ranges_document(path: str | Path, error: type[StrataError] = StrataError) -> dict[str, Any]:
    """The file's JSON object, or a one-line `error` naming the file (missing, unreadable, not JSON,
    not a ranges file)."""
    p = Path(path)
    text = read_text(p, "ranges file", RANGES_LIMIT, error,
                     missing=f"{p}: no such ranges file (write one with `strata calibrate MODEL -o {p.name}`)")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise error(f"{p}: not JSON ({str(e).splitlines()[0][:80]})") from None
    if not isinstance(data, dict) or not str(data.get("format", "")).startswith("strata-ranges/"):
        raise error(f"{p}: not a ranges file (no \"format\": \"strata-ranges/v1\")")
    return data
