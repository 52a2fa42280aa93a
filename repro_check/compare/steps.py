"""Streaming comparison of runs, step by step, as their trace lines arrive.

Every run is compared with run 1. The first divergent step is the smallest step at which any run
differs from run 1 in any signal; within a step, signals are compared in the order the run
recorded them, so the earliest thing that went wrong is named. A run that recorded fewer steps
diverges at its first missing step. Only steps that one side has and the other has not yet
reached are held in memory, so the comparison stays flat in memory however long the runs are.

Beside the comparison with run 1 it keeps, for reports: the spread of the loss across all runs at
every step (bounded series), every run's loss at the steps around the first divergence, and a hash
of each run's whole step stream and metrics, from which the groups of bit-identical runs follow.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import xxhash

from repro_check.compare import timing
from repro_check.compare.series import Thinned
from repro_check.trace import values
from repro_check.trace.jsonfields import JsonRecord, json_field
from repro_check.trace import signals
from repro_check.trace.signals import Signal
from repro_check.trace.values import Tolerance

#: rows kept before and after the first divergent step, for the side-by-side view
CONTEXT_BEFORE = 3
CONTEXT_AFTER = 5
#: points kept of the per-step difference series (downsampled by max beyond this)
SERIES_POINTS = 1024


#: signals newer than the trace format: compared only when both sides recorded them
LATER_SIGNALS: frozenset[str] = frozenset({"init", "lr", "opt", "scaler", "updated"})

#: what accepted a value (the keys of ``ComparisonResult.judged``)
EXACT, TOLERANCE, BAND = "exact", "tolerance", "band"


@dataclass
class Policy:
    """Which tolerance judges which signal or metric (exact bits unless told otherwise).

    ``per_name`` keys are signal names (``loss``), ``metric:NAME`` or ``metric:*``. A reference
    value may come with a band (the spread of repeated runs stored in a golden trace); a value
    inside it, widened about its centre by ``band_widen``, is accepted too (unless ``use_band``
    is off).
    """

    default: Tolerance = field(default_factory=Tolerance)
    per_name: dict[str, Tolerance] = field(default_factory=dict)
    band_widen: float = 1.0
    use_band: bool = True
    #: compare only these signals (``rng`` stands for every ``rng.*``); None: all of them
    signals: frozenset[str] | None = None
    #: metric names compared even when they look like timing values (``printed:NAME`` of a
    #: ``--metric`` rule); a per-name tolerance has the same effect
    always_metrics: frozenset[str] = frozenset()

    def skips_metric(self, name: str) -> bool:
        """Whether metric ``name`` is left out of the comparison: a timing or memory figure
        (:mod:`repro_check.compare.timing`) nobody asked to compare by name."""
        return (timing.is_timing(name) and name not in self.always_metrics
                and f"metric:{name}" not in self.per_name)

    def compares(self, name: str) -> bool:
        return self.signals is None or name in self.signals or name.split(".")[0] in self.signals

    def for_name(self, name: str) -> Tolerance:
        if name in self.per_name:
            return self.per_name[name]
        if name.startswith("metric:") and "metric:*" in self.per_name:
            return self.per_name["metric:*"]
        return self.default

    def judge(self, name: str, a: Any, b: Any, band: Any = None) -> str | None:
        """What accepts value ``b`` of ``name`` against reference ``a``: ``"exact"``,
        ``"tolerance"`` or ``"band"``; None when nothing does."""
        if isinstance(a, dict) and isinstance(b, dict):
            if a.get("dtype") == b.get("dtype") and a.get("bits") == b.get("bits"):
                return EXACT
            tol = self.for_name(name)
            if not tol.exact and values.equal(a, b, tol):
                return TOLERANCE
            if band is not None and self.use_band and values.in_band(b, band, self.band_widen):
                return BAND
            return None
        return EXACT if a == b else None

    def rule(self, name: str, band: Any = None) -> str:
        """In words, what judged ``name`` (for the divergence report)."""
        tol = self.for_name(name)
        text = tol.describe()
        if name in self.per_name or (name.startswith("metric:") and "metric:*" in self.per_name):
            text += f" ({name})"
        limits = values.band_limits(band, self.band_widen) if self.use_band else None
        if limits is not None:
            widen = f" widened x{self.band_widen:g}" if self.band_widen != 1.0 else ""
            text += f"; band [{limits[0]:.8g}, {limits[1]:.8g}]{widen}"
        return text

    def describe(self) -> str:
        parts = [self.default.describe()]
        parts += [f"{name}: {tol.describe()}" for name, tol in self.per_name.items()]
        if self.band_widen != 1.0:
            parts.append(f"bands widened x{self.band_widen:g}")
        if not self.use_band:
            parts.append("bands ignored")
        return "; ".join(parts)


def same(name: str, a: Any, b: Any, policy: Policy, band: Any = None) -> bool:
    """Whether two recorded values of signal ``name`` agree under ``policy``."""
    return policy.judge(name, a, b, band) is not None


def first_difference(
    ref: Mapping[str, Any], other: Mapping[str, Any], policy: Policy,
    band: Mapping[str, Any] | None = None, judged: dict[str, int] | None = None,
) -> str | None:
    """The first signal (in recording order) whose values differ, or None.

    ``judged`` (when given) counts what accepted each value that agreed.
    """
    names = list(ref) + [n for n in other if n not in ref]
    for name in names:
        if not policy.compares(name):
            continue
        if name in LATER_SIGNALS and (name not in ref or name not in other):
            continue  # a trace of an older version: compared without it
        verdict = policy.judge(name, ref.get(name), other.get(name), (band or {}).get(name))
        if verdict is None:
            return name
        if judged is not None:
            judged[verdict] = judged.get(verdict, 0) + 1
    return None


@dataclass
class Divergence(JsonRecord):
    """Where run ``run`` first differs from run 1."""

    run: int
    step: int | None
    #: what differs first (:mod:`repro_check.trace.signals`)
    signal: Signal
    reference: Any = None
    value: Any = None
    abs_diff: float | None = json_field(default=None, convert=lambda x: _finite(x))
    rel_diff: float | None = json_field(default=None, convert=lambda x: _finite(x))
    later_steps: int = json_field(default=0, key="later_divergent_steps")
    detail: str = ""
    policy: str = ""

    # the stream it is in, for a comparison of several streams a run (their divergences hold
    # it as a field: RankDivergence, ProcessDivergence); a plain run's is in neither
    @property
    def rank(self) -> int | None:
        """The torchrun rank the divergence is on (None: not a torchrun check)."""
        return None

    @property
    def process(self) -> int | None:
        """The process of the run it is in (None: the run's processes were not compared)."""
        return None


def _finite(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) or math.isinf(x) else x


@dataclass
class _Pair:
    run: int
    compared: int = 0
    first: Divergence | None = None
    later: int = 0
    before: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=CONTEXT_BEFORE))
    after: list[dict[str, Any]] = field(default_factory=list)
    diffs: Thinned = field(default_factory=lambda: Thinned(SERIES_POINTS, peaks=True))
    pending: dict[int, dict[str, Any]] = field(default_factory=dict)
    ended: int | None = None
    complete: bool = True


def settled(pairs: Iterable[Any], slack: int = 1) -> bool:
    """Whether the earliest first divergence among ``pairs`` (the pair states of one or more
    comparisons) can no longer move: every other pair diverged by that step or has compared up
    to ``slack`` steps before it (0: the step itself must be compared, where a divergence at the
    same step elsewhere could still come first)."""
    pairs = list(pairs)
    firsts = [p.first.step for p in pairs if p.first and p.first.step]
    if not firsts:
        return False
    s = min(firsts)
    return all((p.first is not None and p.first.step is not None and p.first.step <= s)
               or p.compared >= s - slack for p in pairs)


@dataclass
class ComparisonResult:
    first_divergent_step: int | None
    divergent_signal: Signal | None
    divergence: Divergence | None
    per_run: dict[int, Divergence | None]
    metric_divergences: list[Divergence]
    steps_compared: int
    context: list[dict[str, Any]]
    diff_series: list[tuple[int, float]]

    metrics: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: (step, max - min of the focus signal across all runs), bounded like ``diff_series``
    spread_series: list[tuple[int, float]] = field(default_factory=list)
    #: rows around the first divergent step with every run's value:
    #: {"step", "values": [run 1, run 2, ...], "differs", "spread"}
    context_all: list[dict[str, Any]] = field(default_factory=list)
    #: runs whose recorded steps and metrics are bit-identical, e.g. [[1, 3], [2]]
    groups: list[list[int]] = field(default_factory=list)
    #: how many values were accepted by exact bits, by a tolerance, by a band
    judged: dict[str, int] = field(default_factory=dict)
    #: metric names not compared: timing and memory figures (:meth:`Policy.skips_metric`)
    metrics_skipped: list[str] = field(default_factory=list)

    @property
    def reproducible(self) -> bool:
        return self.divergence is None and not self.metric_divergences

    def metrics_of(self, run: int) -> dict[str, Any]:
        return self.metrics.get(run, {})

    @property
    def metrics_compared(self) -> int:
        """How many metric names were compared between runs (any run's): 0 when there was no
        second run or no run recorded a metric, so that agreement is never claimed of nothing."""
        if not self.per_run:
            return 0
        skipped = set(self.metrics_skipped)
        return len({name for metrics in self.metrics.values() for name in metrics
                    if name not in skipped})


@dataclass
class _Spread:
    """Every run's focus value at one step of run 1, until all other runs have been seen there."""

    values: list[Any]
    visits: int = 0
    differs: bool = False
    #: the first signal that differs at this step in any run (of the lowest run that differs)
    signal: str | None = None


def spread_of(vals: list[Any]) -> float:
    """max - min of encoded values: 0 when all bits agree, NaN when a value is missing or not finite."""
    present = [v for v in vals if isinstance(v, dict)]
    if len(present) == len(vals) and all(v.get("dtype") == present[0].get("dtype")
                                         and v.get("bits") == present[0].get("bits") for v in present):
        return 0.0
    if len(present) < len(vals):
        return math.nan
    xs = [values.to_float(v) for v in present]
    if any(math.isnan(x) or math.isinf(x) for x in xs):
        return math.nan
    return max(xs) - min(xs)


def _stream_bytes(step: int, signals: Mapping[str, Any]) -> bytes:
    return json.dumps([step, signals], sort_keys=True, separators=(",", ":")).encode("utf-8")


class Comparison:
    """Feed it steps, ends and metrics of runs 1..N in any interleaving; ask for the result."""

    def __init__(self, runs: int, policy: Policy | None = None, focus: str = "loss",
                 names: Sequence[str] = ()) -> None:
        self.runs = runs
        self.policy = policy or Policy()
        self.focus = focus
        #: what the divergences' sentences call run 1, 2, ... (``run K`` beyond them): a gate's
        #: "golden" and "this run", or the files compared
        self.names = list(names)
        self.ref: dict[int, dict[str, Any]] = {}
        self.ref_waiting: dict[int, int] = {}
        self.ref_ended: int | None = None
        self.ref_complete = True
        self.pairs = {k: _Pair(k) for k in range(2, runs + 1)}
        self.metrics: dict[int, dict[str, Any]] = {}
        self.hashes = {k: xxhash.xxh3_128() for k in range(1, runs + 1)}
        self.counts = dict.fromkeys(range(1, runs + 1), 0)
        self.spreads: dict[int, _Spread] = {}
        self.spread = Thinned(SERIES_POINTS, peaks=True)
        self.all_before: deque[dict[str, Any]] = deque(maxlen=CONTEXT_BEFORE)
        self.all_after: list[dict[str, Any]] = []
        #: bands that came with run 1's steps and metrics (a golden trace recorded from repeats)
        self.ref_band: dict[int, dict[str, Any]] = {}
        self.metric_band: dict[str, Any] = {}
        self.judged: dict[str, int] = {}

    # ---- feeding -------------------------------------------------------------------------
    def add_step(self, run: int, step: int, signals: dict[str, Any],
                 band: dict[str, Any] | None = None) -> None:
        """One step of run ``run`` (each run's steps in order, runs in any interleaving);
        ``band`` (run 1 only) is the accepted spread per signal."""
        self.hashes[run].update(_stream_bytes(step, signals))
        self.counts[run] += 1
        if run == 1:
            waiting = 0
            for pair in self.pairs.values():
                other = pair.pending.pop(step, None)
                if other is not None:
                    self._compare(pair, step, signals, other, band)
                elif pair.ended is None:
                    waiting += 1
                else:
                    self._missing(pair, step, signals, None)
            if waiting:
                self.ref[step] = signals
                self.ref_waiting[step] = waiting
                if band:
                    self.ref_band[step] = band
            return
        pair = self.pairs[run]
        ref = self.ref.get(step)
        if ref is None:
            if self.ref_ended is not None:
                self._missing(pair, step, None, signals)
            else:
                pair.pending[step] = signals
            return
        self._compare(pair, step, ref, signals, self.ref_band.get(step))
        self._release(step)

    def _release(self, step: int) -> None:
        self.ref_waiting[step] -= 1
        if self.ref_waiting[step] == 0:
            del self.ref_waiting[step]
            del self.ref[step]
            self.ref_band.pop(step, None)

    def end(self, run: int, steps: int, complete: bool = True) -> None:
        """Run ``run`` recorded ``steps`` steps in all; ``complete=False`` when it was cut short
        by us (fail-fast, interrupt), so its missing steps are not a divergence."""
        if run == 1:
            self.ref_ended, self.ref_complete = steps, complete
            for pair in self.pairs.values():
                for step in sorted(pair.pending):
                    self._missing(pair, step, None, pair.pending.pop(step))
            return
        pair = self.pairs[run]
        pair.ended, pair.complete = steps, complete
        for step in sorted(s for s in self.ref if s > steps):
            self._missing(pair, step, self.ref[step], None)
            self._release(step)

    def set_metrics(self, run: int, metrics: dict[str, Any],
                    band: dict[str, Any] | None = None) -> None:
        self.metrics.setdefault(run, {}).update(metrics)
        if band and run == 1:
            self.metric_band.update(band)

    # ---- comparing -----------------------------------------------------------------------
    def _row(self, step: int, ref: Mapping[str, Any] | None, other: Mapping[str, Any] | None,
             differs: bool, signal: str | None = None) -> dict[str, Any]:
        """One step around the divergence: the focus values, and ``signal``, the first signal
        that differs there (the focus values may well agree: a step whose gradients differ)."""
        return {
            "step": step,
            "reference": (ref or {}).get(self.focus),
            "value": (other or {}).get(self.focus),
            "differs": differs,
            "signal": signal if differs else None,
        }

    def _visit(self, step: int, run: int, ref: Mapping[str, Any], value: Any, differs: bool,
               signal: str | None = None) -> None:
        """Run ``run`` was compared with run 1 at ``step``; once every run was, the step's spread
        is known. Steps complete in increasing order (each pair compares in step order)."""
        acc = self.spreads.get(step)
        if acc is None:
            acc = self.spreads[step] = _Spread([ref.get(self.focus)] + [None] * (self.runs - 1))
        acc.values[run - 1] = value
        acc.visits += 1
        acc.differs = acc.differs or differs
        if differs and acc.signal is None:
            acc.signal = signal
        if acc.visits == self.runs - 1:
            self._settle(step)

    def _settle(self, step: int) -> None:
        acc = self.spreads.pop(step)
        spread = spread_of(acc.values)
        self.spread.add(step, spread)
        row = {"step": step, "values": acc.values, "differs": acc.differs, "spread": spread,
               "signal": acc.signal}
        if not self.all_after:
            if acc.differs:
                self.all_after.append(row)
            else:
                self.all_before.append(row)
        elif len(self.all_after) < CONTEXT_AFTER + 1:
            self.all_after.append(row)

    def _compare(self, pair: _Pair, step: int, ref: dict[str, Any], other: dict[str, Any],
                 band: dict[str, Any] | None = None) -> None:
        pair.compared = max(pair.compared, step)
        name = first_difference(ref, other, self.policy, band, self.judged)
        a, b = ref.get(self.focus), other.get(self.focus)
        self._visit(step, pair.run, ref, b, name is not None, name)
        if isinstance(a, dict) and isinstance(b, dict):
            absdiff, _ = values.differences(a, b)
            pair.diffs.add(step, absdiff if absdiff is not None else (0.0 if a == b else math.nan))
        row = self._row(step, ref, other, name is not None, name)
        if pair.first is None:
            if name is None:
                pair.before.append(row)
                return
            ra, rb = ref.get(name), other.get(name)
            absdiff, rel = values.differences(ra, rb) if isinstance(ra, dict) and isinstance(rb, dict) \
                else (None, None)
            pair.first = Divergence(pair.run, step, name, ra, rb, absdiff, rel,
                                    policy=self.policy.rule(name, (band or {}).get(name)))
            pair.after.append(row)
            return
        if name is not None:
            pair.later += 1
        if len(pair.after) < CONTEXT_AFTER + 1:
            pair.after.append(row)

    def _missing(self, pair: _Pair, step: int, ref: dict[str, Any] | None,
                 other: dict[str, Any] | None) -> None:
        """One side has ``step``, the other ended before it."""
        if ref is not None:
            self._visit(step, pair.run, ref, None, pair.complete, "steps")
        if ref is None and not self.ref_complete or other is None and not pair.complete:
            return  # cut short by us, not by the target
        pair.compared = max(pair.compared, step)
        row = self._row(step, ref, other, True, "steps")
        if pair.first is None:
            shorter, longer = (pair.run, 1) if other is None else (1, pair.run)
            n_short = pair.ended if other is None else self.ref_ended
            pair.first = Divergence(
                pair.run, step, "steps", (ref or {}).get(self.focus), (other or {}).get(self.focus),
                detail=f"{self.called(shorter)} recorded {n_short} steps and stopped; "
                       f"{self.called(longer)} went on",
            )
            pair.after.append(row)
        else:
            pair.later += 1
            if len(pair.after) < CONTEXT_AFTER + 1:
                pair.after.append(row)

    def called(self, run: int) -> str:
        """What the divergences' sentences call ``run``: its name, else ``run N``."""
        return self.names[run - 1] if run <= len(self.names) else f"run {run}"

    # ---- results -------------------------------------------------------------------------
    def settled_divergence(self) -> bool:
        """True once the first divergent step can no longer change (for fail-fast)."""
        return settled(self.pairs.values())

    def _metric_divergences(self, judged: dict[str, int] | None = None) -> list[Divergence]:
        out: list[Divergence] = []
        ref = self.metrics.get(1, {})
        for k in self.pairs:
            other = self.metrics.get(k, {})
            names = list(ref) + [n for n in other if n not in ref]
            for name in names:
                if self.policy.skips_metric(name):
                    continue
                a, b = ref.get(name), other.get(name)
                band = self.metric_band.get(name)
                verdict = self.policy.judge(f"metric:{name}", a, b, band)
                if verdict is not None:
                    if judged is not None:
                        judged[verdict] = judged.get(verdict, 0) + 1
                    continue
                absdiff, rel = values.differences(a, b) if a and b else (None, None)
                detail = "" if a is not None and b is not None else \
                    f"metric {name!r} recorded by {self.called(1 if b is None else k)} only"
                out.append(Divergence(k, None, signals.metric(name), a, b, absdiff, rel,
                                      detail=detail,
                                      policy=self.policy.rule(f"metric:{name}", band)))
        return out

    def groups(self) -> list[list[int]]:
        """Runs whose step streams (and step counts and metrics) are bit-identical, together."""
        by_key: dict[tuple[str, int, str], list[int]] = {}
        skipped = set(self.skipped_metrics())
        for k in range(1, self.runs + 1):
            metrics = json.dumps({n: v for n, v in self.metrics.get(k, {}).items()
                                  if n not in skipped}, sort_keys=True)
            by_key.setdefault((self.hashes[k].hexdigest(), self.counts[k], metrics), []).append(k)
        return sorted(by_key.values())

    def skipped_metrics(self) -> list[str]:
        """The metric names (of any run) left out of the comparison, in the order first seen."""
        names = dict.fromkeys(n for k in sorted(self.metrics) for n in self.metrics[k])
        return [n for n in names if self.policy.skips_metric(n)]

    def _extras(self) -> dict[str, Any]:
        for step in sorted(self.spreads):  # runs that never ended (interrupted)
            self._settle(step)
        return {"spread_series": self.spread.values(),
                "context_all": list(self.all_before) + self.all_after,
                "groups": self.groups(), "metrics_skipped": self.skipped_metrics()}

    def result(self) -> ComparisonResult:
        extras = self._extras()
        per_run = {k: p.first for k, p in self.pairs.items()}
        found = [p for p in self.pairs.values() if p.first is not None]
        judged = dict(self.judged)
        metric_divs = self._metric_divergences(judged)
        compared = min((p.compared for p in self.pairs.values()), default=0)
        if found:
            best = min(found, key=lambda p: (p.first.step or 0, p.run))  # type: ignore[union-attr]
            div = best.first
            assert div is not None
            div.later_steps = best.later
            for p in found:
                if p.first is not None:
                    p.first.later_steps = p.later
            return ComparisonResult(div.step, div.signal, div, per_run, metric_divs, compared,
                                    list(best.before) + best.after, best.diffs.values(),
                                    self.metrics, judged=judged, **extras)
        first_pair = self.pairs.get(2)
        series = first_pair.diffs.values() if first_pair else []
        if metric_divs:
            m = metric_divs[0]
            return ComparisonResult(None, m.signal, m, per_run, metric_divs, compared, [], series,
                                    self.metrics, judged=judged, **extras)
        return ComparisonResult(None, None, None, per_run, [], compared, [], series, self.metrics,
                                judged=judged, **extras)


def compare_traces(traces: Iterable[Any], policy: Policy | None = None) -> ComparisonResult:
    """Compare whole in-memory traces (:class:`repro_check.trace.format.Trace`), run 1 first."""
    traces = list(traces)
    cmp = Comparison(len(traces), policy)
    for i, tr in enumerate(traces, 1):
        for st in tr.steps:
            cmp.add_step(i, st.step, st.signals)
        cmp.end(i, len(tr.steps))
        cmp.set_metrics(i, tr.metrics)
    return cmp.result()
