"""What the fixed interpreter's implementations share: the run's environment and its error.

The compute ops (`strata.semantics.fixed_interp`) and the decode ops
(`strata.semantics.fixed_kv_interp`) both read it; `fixed_interp` runs them together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from strata.errors import StrataError


class FixedRunError(StrataError):
    """A fixed-level function that cannot be executed (a missing weight, a bad input)."""


@dataclass
class Env:
    """The weights (a mapping or an object with `.get`), the cache of their fixed forms (by
    name, part and type) and the `fixed.kv_state` buffers (by name)."""

    weights: Any
    cache: dict[tuple, np.ndarray] = field(default_factory=dict)
    state: dict[str, np.ndarray] = field(default_factory=dict)  # fixed.kv_state buffers, by name

    def weight(self, name: str) -> np.ndarray:
        """The float weight `name`, f32."""
        try:
            w = self.weights[name] if isinstance(self.weights, Mapping) else self.weights.get(name)
        except (KeyError, StrataError):
            w = None
        if w is None:
            raise FixedRunError(f"fixed.param: no weight '{name}'")
        return np.asarray(w, np.float32)
