"""How far two runs' losses drift apart, step by step, read back from their traces.

A check stops at the first divergence; comparing environments needs the whole course as well:
whether the difference stays at rounding level or grows, where it is largest, what it is at the
end, and the first step at which it exceeds a tolerance. The traces are read side by side in
bounded memory; the per-step series kept for plots is thinned by peaks, the numbers are exact.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from repro_check.compare.series import Thinned
from repro_check.trace import values
from repro_check.trace.format import TraceStream, finite_or_none
from repro_check.trace.jsonfields import JsonRecord, json_field
from repro_check.trace.protocol import StepRecord
from repro_check.trace.values import Tolerance

#: points kept of the drift series (for the sparkline and the plot)
SERIES_POINTS = 1024


@dataclass
class Drift(JsonRecord):
    """|a - b| of one signal at every step both runs recorded."""

    steps: int = 0
    max_abs: float | None = json_field(default=0.0, convert=finite_or_none)
    max_at: int | None = None
    final_abs: float | None = json_field(default=None, convert=finite_or_none)
    #: first step where the two values' bits differ, and at how many steps they do
    first_at: int | None = None
    differing_steps: int = 0
    #: first step where the difference exceeds the tolerance (None: none given, or never)
    exceeds_at: int | None = None
    #: first step where one side is NaN or infinite and the other is not the same
    nonfinite_at: int | None = None
    #: the thinned series, for plots (not in the JSON)
    series: list[tuple[int, float]] = json_field(default_factory=list, skip=True)


def step_difference(a: Any, b: Any) -> float:
    """|a - b| of two encoded values: 0 for the same bits, NaN where it is not a number."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return 0.0 if a == b else math.nan
    if a.get("dtype") == b.get("dtype") and a.get("bits") == b.get("bits"):
        return 0.0
    d, _ = values.differences(a, b)
    return math.nan if d is None else d


def side_by_side(path_a: str | os.PathLike[str], path_b: str | os.PathLike[str]
                 ) -> Iterator[tuple[StepRecord, StepRecord]]:
    """The steps of two traces in pairs, up to the shorter one's last (bounded memory; both files
    closed however the caller stops)."""
    sa, sb = TraceStream(path_a, require_end=False), TraceStream(path_b, require_end=False)
    try:
        while (ea := sa.next_step()) is not None and (eb := sb.next_step()) is not None:
            yield ea, eb
    finally:
        sa.close()
        sb.close()


def loss_drift(path_a: str | os.PathLike[str], path_b: str | os.PathLike[str],
               tolerance: Tolerance | None = None, signal: str = "loss") -> Drift:
    """The drift of ``signal`` between two traces (``a`` the reference of the tolerance)."""
    drift = Drift()
    thin = Thinned(SERIES_POINTS, peaks=True)
    for ea, eb in side_by_side(path_a, path_b):
        step = ea.step
        a, b = ea.signals.get(signal), eb.signals.get(signal)
        d = step_difference(a, b)
        drift.steps, drift.final_abs = step, d
        thin.add(step, d)
        if d != 0.0:
            drift.first_at = drift.first_at or step
            drift.differing_steps += 1
        if math.isnan(d):
            drift.nonfinite_at = drift.nonfinite_at or step
        elif drift.max_abs is not None and d > drift.max_abs:
            drift.max_abs, drift.max_at = d, step
        if tolerance is not None and not tolerance.exact and drift.exceeds_at is None \
                and isinstance(a, dict) and isinstance(b, dict) \
                and not values.equal(a, b, tolerance):
            drift.exceeds_at = step
    drift.series = thin.values()
    return drift


def first_differences(path_a: str | os.PathLike[str],
                      path_b: str | os.PathLike[str]) -> tuple[dict[str, int], int]:
    """The first step at which each signal's recorded value differs between two traces (signals
    recorded on one side only count from the step where that happens), and the steps read (the
    shorter trace's)."""
    first: dict[str, int] = {}
    steps = 0
    for ea, eb in side_by_side(path_a, path_b):
        steps = ea.step
        signals_a, signals_b = ea.signals, eb.signals
        for name in set(signals_a) | set(signals_b):
            if name not in first and signals_a.get(name) != signals_b.get(name):
                first[name] = steps
    return first, steps
