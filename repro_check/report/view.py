"""One view of what the terminal summary and the HTML page both show of a check: the steps
around the first divergence and the groups of bit-identical runs. Computed here once, so that
the two renderers cannot disagree on which rows differ; each only formats it."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from repro_check.compare.steps import spread_of
from repro_check.report.model import Report
from repro_check.report.text import later_text

#: the signal the table of steps around the first divergence follows
FOCUS = "loss"


def same_value_key(v: Any) -> str:
    """What makes two recorded values the same value: dtype, bits and value (an integer or a
    fingerprint has no bits), as one comparable string."""
    key = (v.get("dtype"), v.get("bits"), v.get("value")) if isinstance(v, dict) else v
    return json.dumps(key, default=str)


@dataclass(frozen=True)
class ContextRow:
    """One step around the first divergence."""

    step: int
    #: each run's recorded value (encoded), in the order of :attr:`ContextView.runs`
    values: list[Any]
    #: two runs: their |diff| (None where undefined); more: the spread of all (NaN: undefined)
    diff: float | None
    #: the signal the step differs in, as the comparison names it (None: none)
    signal: str | None
    #: the first divergent step (whichever signal parted there)
    first: bool
    #: its values differ in their bits (a gradients divergence leaves equal losses unmarked)
    differs: bool


@dataclass(frozen=True)
class ContextView:
    """The steps around the first divergence: two runs side by side with their |diff|, or,
    with three runs or more that differ there, every run and the spread."""

    #: the run of each value column
    runs: list[int]
    #: the last column is the spread of every run (three runs or more), not a |diff|
    spread: bool
    rows: list[ContextRow]

    @property
    def other_signal(self) -> bool:
        """Some step differs in a signal other than the loss: the table says which."""
        return any(r.signal not in (None, "", FOCUS) for r in self.rows)


def context_view(report: Report) -> ContextView | None:
    """The steps around the first divergence, or None when there is no such table (no
    divergence at a step, or no step recorded around it)."""
    cmp = report.comparison
    if cmp is None or cmp.divergence is None or cmp.divergence.step is None:
        return None
    step = cmp.divergence.step

    def row(at: int, vals: list[Any], diff: float | None, signal: Any) -> ContextRow:
        return ContextRow(step=at, values=vals, diff=diff, signal=signal, first=at == step,
                          differs=len({same_value_key(v) for v in vals}) > 1)

    if report.runs >= 3 and any(r["differs"] for r in cmp.context_all):
        return ContextView(runs=list(range(1, report.runs + 1)), spread=True,
                           rows=[row(r["step"], list(r["values"]), r["spread"], r.get("signal"))
                                 for r in cmp.context_all])
    if not cmp.context:
        return None
    rows = []
    for r in cmp.context:
        a, b = r["reference"], r["value"]
        d = spread_of([a, b]) if isinstance(a, dict) and isinstance(b, dict) else None
        rows.append(row(r["step"], [a, b], None if d is None or math.isnan(d) else d,
                        r.get("signal")))
    return ContextView(runs=[1, cmp.divergence.run], spread=False, rows=rows)


def later_line(report: Report, div: Any) -> str:
    """How many steps after the first divergent one ``div`` differ too, beyond those the table
    of steps around it shows (when there is such a table); empty when there is nothing more."""
    cmp = report.comparison
    return later_text(div, cmp.context if cmp is not None and context_view(report) is not None
                      else [])


def bit_identical_groups(report: Report) -> list[list[int]] | None:
    """Which runs are bit-identical, with three runs or more (None: nothing to say)."""
    cmp = report.comparison
    if cmp is None or report.runs < 3 or not cmp.groups:
        return None
    return [list(g) for g in cmp.groups]
