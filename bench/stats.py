"""Summaries of repeated runs: the median with the min and max around it.

Owns how repeats are condensed for the report; measures nothing itself.
"""

from __future__ import annotations

import math
import statistics
from typing import Iterable


def spread(samples: Iterable[float]) -> dict[str, float]:
    """`{"median", "min", "max", "n"}` of the finite samples (NaN when there are none)."""
    values = sorted(v for v in samples if math.isfinite(v))
    if not values:
        return {"median": math.nan, "min": math.nan, "max": math.nan, "n": 0}
    return {"median": statistics.median(values), "min": values[0], "max": values[-1], "n": len(values)}


def quantile(sorted_values: list[float], q: float) -> float:
    """The `q` quantile (nearest rank) of already sorted values, NaN when empty."""
    if not sorted_values:
        return math.nan
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]
