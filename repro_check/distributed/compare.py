"""Comparison of distributed runs: each rank across runs, and the ranks of each run with each other.

Across runs, rank R of run K is compared with rank R of run 1 by the usual streaming
:class:`~repro_check.compare.steps.Comparison` (one per rank). The first divergence is the earliest
step; at the same step, the rank named is the one whose first differing signal comes earliest in
the step's order (:data:`SIGNAL_ORDER`: RNG states, the parameters going in, the batch, the loss,
the gradients, the updated parameters). Under DDP a difference on one rank reaches every rank's
gradients through the all-reduce, so a rank whose only difference is ``grads`` is not where it
entered: the rank whose loss (or batch, or RNG state) differs is.

Across ranks, within each run, every rank must record the same ``params`` fingerprint at every
step (DDP keeps replicas identical); the first step where they do not is a *rank desync*, a
failure even when the runs agree with each other.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
import dataclasses
from dataclasses import dataclass
from typing import Any

from repro_check.compare.feed import Feed
from repro_check.compare.perstream import StreamComparison, located
from repro_check.compare.steps import (Comparison, ComparisonResult, Divergence, Policy, same,
                                       settled)
from repro_check.errors import TraceFileError
from repro_check.report.contents import (DesyncRankValue, DistributedLaunch, FailedRank,
                                         MetricRankValue, RankValue, StepRankValue)
from repro_check.report.model import DistributedPart, RankDesync, RankRun
from repro_check.run.options import DistOptions
from repro_check.trace.format import iter_records
from repro_check.trace.protocol import MetricsRecord, StepRecord
from repro_check.trace.results import RunResult
from repro_check.trace import signals

#: signal name of a desync between the ranks of one run
RANK_DESYNC = "rank_desync"
#: steps held per run waiting for the other ranks' fingerprints before they are compared anyway
MAX_PENDING = 4096


@dataclass
class RankDivergence(Divergence):
    """A divergence on one rank."""

    rank: int | None = None


def _on_rank(d: Divergence, rank: int) -> RankDivergence:
    return located(d, RankDivergence, rank=rank)


#: the order in which a step's signals come about: a difference that shows in an earlier one on
#: some rank entered there (an all-reduce carries it to every rank's gradients)
SIGNAL_ORDER: tuple[str, ...] = (signals.RNG, *(s for s in signals.STEP_SIGNALS
                                                 if not signals.is_rng(s)), "steps")


def _signal_order(name: str) -> int:
    """Within one step: the RNG states, the parameters going in and the batch first, then the
    loss, the gradients and the parameters after the update (anything else with the gradients)."""
    head = signals.RNG if signals.is_rng(name) else name
    if head in SIGNAL_ORDER:
        return SIGNAL_ORDER.index(head)
    return SIGNAL_ORDER.index("grads")


def divergence_key(step: int | None, signal: str, rank: int | None) -> tuple[float, int, int]:
    """Which of several ranks' divergences comes first: the earliest step (a final metric after
    every step), at one step the signal that comes about first (:data:`SIGNAL_ORDER`: a
    difference entered where it shows first), then the lowest rank (a plain run's, None, first)."""
    return (step if step is not None else float("inf"), _signal_order(signal),
            -1 if rank is None else rank)


def first_rank(per_rank: Mapping[int | None, ComparisonResult]) -> int | None:
    """The rank whose comparison diverges first (:func:`divergence_key`), in its steps or its
    final metrics; the lowest rank when none diverges."""
    def key(rank: int | None) -> tuple[bool, tuple[float, int, int]]:
        res = per_rank[rank]
        div = res.divergence or (res.metric_divergences[0] if res.metric_divergences else None)
        if div is None:
            return (True, divergence_key(None, "", rank))
        return (False, divergence_key(res.first_divergent_step, div.signal, rank))
    return min(per_rank, key=key)


@dataclass
class Desync:
    """The first step of run ``run`` where the ranks' parameters differ."""

    run: int
    step: int
    fingerprints: dict[int, str]

    @property
    def groups(self) -> list[list[int]]:
        """Ranks that agree with each other, the group of the lowest rank first."""
        by_fp: dict[str, list[int]] = {}
        for rank in sorted(self.fingerprints):
            by_fp.setdefault(self.fingerprints[rank], []).append(rank)
        return list(by_fp.values())

    @property
    def ranks(self) -> list[int]:
        """The ranks that disagree with the lowest rank (whose parameters DDP started from)."""
        return [r for g in self.groups[1:] for r in g]

    def divergence(self) -> RankDivergence:
        base = min(self.fingerprints)
        odd = self.ranks[0]
        return RankDivergence(
            self.run, self.step, RANK_DESYNC, self.fingerprints[base], self.fingerprints[odd],
            detail=f"run {self.run}: after step {self.step}, rank(s) "
                   f"{', '.join(map(str, self.ranks))} hold different parameters than rank {base}",
            rank=odd,
        )


class _CrossRank:
    """The ``params`` fingerprints of the ranks of one run, compared step by step."""

    def __init__(self, run: int, expected: int) -> None:
        self.run = run
        self.expected = expected
        self.pending: dict[int, dict[int, str]] = {}
        self.steps = 0
        self.first: Desync | None = None

    def add(self, rank: int, step: int, fp: str) -> None:
        seen = self.pending.setdefault(step, {})
        seen[rank] = fp
        if len(seen) >= self.expected:
            self._check(step)
        while len(self.pending) > MAX_PENDING:
            self._check(min(self.pending))

    def close(self) -> None:
        for step in sorted(self.pending):
            self._check(step)

    def _check(self, step: int) -> None:
        seen = self.pending.pop(step)
        if len(seen) < 2:
            return
        self.steps += 1
        if self.first is None and len(set(seen.values())) > 1:
            self.first = Desync(self.run, step, dict(seen))


class RankComparison(StreamComparison):
    """Feed it each rank's steps, metrics and ends in any interleaving; ask for the result."""

    def __init__(self, runs: int, policy: Policy | None = None, local_ranks: int = 1) -> None:
        super().__init__(runs, policy)
        self.local_ranks = local_ranks
        self.cross: dict[int, _CrossRank] = {}
        #: whether any rank recorded a ``params`` fingerprint (a DDP model was seen)
        self.params_seen = False

    @property
    def by_rank(self) -> dict[int, Comparison]:
        return self.by_stream

    def rank(self, rank: int) -> Comparison:
        return self.stream(rank)

    def cross_rank(self, run: int) -> _CrossRank:
        if run not in self.cross:
            self.cross[run] = _CrossRank(run, self.local_ranks)
        return self.cross[run]

    # ---- feeding -----------------------------------------------------------------------------
    def add_step(self, run: int, rank: int, step: int, signals: dict[str, Any]) -> None:
        super().add_step(run, rank, step, signals)
        fp = signals.get("params")
        if isinstance(fp, str):
            self.params_seen = True
            self.cross_rank(run).add(rank, step, fp)

    def end(self, run: int, steps: Mapping[int, int], complete: bool = True,
            cut: Collection[int] = ()) -> None:
        for rank in steps:  # every rank the run had is compared, with steps or none
            self.rank(rank)
        super().end(run, steps, complete, cut)
        self.cross_rank(run).close()

    # ---- results -----------------------------------------------------------------------------
    @property
    def desync(self) -> Desync | None:
        found = [c.first for c in self.cross.values() if c.first is not None]
        return min(found, key=lambda d: (d.step, d.run)) if found else None

    @property
    def cross_rank_steps(self) -> int:
        """Steps at which the ranks of a run were compared (the fewest of any run)."""
        return min((c.steps for c in self.cross.values()), default=0)

    def settled_divergence(self) -> bool:
        """For fail-fast: a desync, or a divergence that no other rank can precede any more."""
        if self.desync is not None:
            return True
        # another rank may still differ at the same step with an earlier signal: slack 0
        return settled((p for comp in self.by_rank.values() for p in comp.pairs.values()),
                       slack=0)

    def result(self) -> ComparisonResult:
        res = self._result()
        res.metrics_skipped = list(dict.fromkeys(  # every rank's metrics, as run 1's are shown
            n for comp in self.by_rank.values() for n in comp.skipped_metrics()))
        return res

    def _result(self) -> ComparisonResult:
        per_rank = {r: self.by_rank[r].result() for r in sorted(self.by_rank)}
        lowest = min(per_rank, default=None)
        metrics = per_rank[lowest].metrics if lowest is not None else {}
        compared = min((res.steps_compared for res in per_rank.values()), default=0)

        per_run: dict[int, Divergence | None] = {k: None for k in range(2, self.runs + 1)}
        best: tuple[Any, ...] | None = None
        for rank, res in per_rank.items():
            for k, d in res.per_run.items():
                if d is None or d.step is None:
                    continue
                key = divergence_key(d.step, d.signal, rank)
                current = per_run.get(k)
                if current is None or key < divergence_key(current.step, current.signal,
                                                           current.rank or 0):
                    per_run[k] = _on_rank(d, rank)
                if best is None or key + (k,) < best[0]:
                    best = (key + (k,), _on_rank(d, rank), res)
        metric_divs: list[Divergence] = [_on_rank(d, rank) for rank, res in per_rank.items()
                                         for d in res.metric_divergences]
        desync = self.desync
        if desync is not None and (best is None or desync.step < best[1].step):
            div = desync.divergence()
            context, series = [], []
            if best is not None:
                context, series = best[2].context, best[2].diff_series
            return ComparisonResult(div.step, div.signal, div, per_run, metric_divs, compared,
                                    context, series, metrics)
        if best is not None:
            div, res = best[1], best[2]
            return ComparisonResult(div.step, div.signal, div, per_run, metric_divs, compared,
                                    res.context, res.diff_series, metrics)
        series = per_rank[lowest].diff_series if lowest is not None else []
        if metric_divs:
            m = metric_divs[0]
            return ComparisonResult(None, m.signal, m, per_run, metric_divs, compared, [], series,
                                    metrics)
        return ComparisonResult(None, None, None, per_run, [], compared, [], series, metrics)


class RankFeed(Feed):
    """Passes the ranks' events to the per-rank comparison and to the caller's listener."""

    def add_step(self, index: int, event: StepRecord) -> None:
        self.comparison.add_step(index, event.rank or 0, event.step, event.signals)

    def add_metrics(self, index: int, event: MetricsRecord) -> None:
        self.comparison.set_metrics(index, event.rank or 0, event.metrics)

    def end(self, result: RunResult) -> None:
        steps = {r.rank: r.steps for r in result.rank_results()}
        self.comparison.end(result.index, steps, complete=result.status != "cancelled")


# ---- the report ------------------------------------------------------------------------------

def signal_at(path: str | None, step: int, name: str) -> Any:
    """The value of signal ``name`` at ``step`` in a trace file (None when it has no such step)."""
    if not path:
        return None
    try:
        for ev in iter_records(path):
            if isinstance(ev, StepRecord) and ev.step >= step:
                return ev.signals.get(name) if ev.step == step else None
    except TraceFileError:
        return None
    return None


def rank_values(results: Sequence[RunResult], result: ComparisonResult | None,
                comparison: RankComparison) -> list[RankValue]:
    """Each rank's values where the first divergence (of ``result``) is."""
    div = result.divergence if result else None
    if div is None:
        return []
    if div.signal == RANK_DESYNC:
        desync = comparison.desync
        assert desync is not None
        odd = set(desync.ranks)
        return [DesyncRankValue(rank=r, run=desync.run, params=fp, differs=r in odd)
                for r, fp in sorted(desync.fingerprints.items())]
    out: list[RankValue] = []
    if div.step is None:  # a final metric
        name = div.signal.removeprefix("metric:")
        for rank, comp in sorted(comparison.by_rank.items()):
            a = comp.metrics.get(1, {}).get(name)
            b = comp.metrics.get(div.run, {}).get(name)
            out.append(MetricRankValue(rank=rank, reference=a, value=b,
                                       differs=not same(div.signal, a, b, comparison.policy)))
        return out
    name = "loss" if div.signal == "steps" else div.signal
    traces = {res.index: {r.rank: r.trace_path for r in res.rank_results()}
              for res in results}
    for rank in sorted(comparison.by_rank):
        a = signal_at(traces.get(1, {}).get(rank), div.step, name)
        b = signal_at(traces.get(div.run, {}).get(rank), div.step, name)
        out.append(StepRankValue(rank=rank, signal=name, reference=a, value=b,
                                 differs=not same(name, a, b, comparison.policy)))
    return out


def distributed_part(results: Sequence[RunResult], comparison: RankComparison,
                     result: ComparisonResult | None, options: DistOptions) -> DistributedPart:
    """The distributed part of a report: the rank of the first divergence (of ``result``) with
    every rank's values there, the cross-rank check, each rank's end, the launch options."""
    div = result.divergence if result else None
    desync = comparison.desync
    failed = [FailedRank(run=r.index, rank=rank) for r in results
              if (rank := r.first_failed_rank()) is not None]
    return DistributedPart(
        launch=DistributedLaunch(
            launcher="torch.distributed.run", torchrun_args=options.torchrun_args(1),
            ranks=sorted(comparison.by_rank), ddp_model_seen=comparison.params_seen,
            cross_rank_steps=comparison.cross_rank_steps,
            **dataclasses.asdict(options)),
        first_divergent_rank=div.rank if div is not None else None,
        rank_values=rank_values(results, result, comparison),
        rank_desync=None if desync is None else RankDesync(
            run=desync.run,
            runs=sorted(c.run for c in comparison.cross.values()
                        if c.first is not None and c.first.step == desync.step),
            step=desync.step, ranks=desync.ranks, groups=desync.groups,
            fingerprints={str(r): fp for r, fp in sorted(desync.fingerprints.items())},
        ),
        failed_rank=failed[0] if failed else None,
        rank_results=[RankRun(run=r.index, ranks=r.rank_results()) for r in results],
    )


def rank_warnings(results: Sequence[RunResult]) -> list[str]:
    """A warning when the runs did not get the same ranks on this node."""
    by_run = {r.index: tuple(rr.rank for rr in r.rank_results()) for r in results
              if r.rank_results()}
    if len(set(by_run.values())) <= 1:
        return []
    seen = "; ".join(f"run {k}: {', '.join(map(str, v))}" for k, v in sorted(by_run.items()))
    return [f"the runs did not get the same ranks on this node ({seen}), so their ranks are not "
            "the same work; with several nodes, a static rendezvous (--master-addr, "
            "--master-port, --node-rank) gives every run the same ranks"]
