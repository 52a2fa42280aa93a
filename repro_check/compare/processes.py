"""Comparison of runs whose target trains in processes it starts: each process across runs.

A run is several streams: the main process's steps (stream 0, the run's own trace) and one stream
for each process the target started (stream K, the K-th process it started; see
:mod:`repro_check.child.process.processes`). Stream K of run N is compared with stream K of run 1 by the
usual streaming :class:`~repro_check.compare.steps.Comparison`, one per stream, like the ranks of
a torchrun job. The first divergence is the earliest step of any stream (the lower stream at the
same step). A process that recorded nothing in any run (a helper that only waits or serves) has
no stream: it is not compared, and does not count.

A run whose started processes recorded nothing is compared exactly as before: the result is the
main stream's own, and the report has no part about processes.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from repro_check.compare.feed import Feed
from repro_check.compare.perstream import StreamComparison, located
from repro_check.trace.protocol import MetricsRecord, Record, StepRecord
from repro_check.trace.results import RunResult
from repro_check.compare.steps import Comparison, ComparisonResult, Divergence, Policy, settled

#: the stream of the run's main process
MAIN = 0


@dataclass
class ProcessDivergence(Divergence):
    """A divergence in one stream: ``process`` 0 is the main process, K the K-th it started."""

    process: int = MAIN

    @property
    def where(self) -> str:
        return "the main process" if self.process == MAIN else f"process {self.process}"


def _in_process(d: Divergence, process: int) -> ProcessDivergence:
    return located(d, ProcessDivergence, process=process)


def _key(d: Divergence, process: int) -> tuple[float, int]:
    """Earliest step first (a final metric after every step), then the lower stream."""
    return (d.step if d.step is not None else float("inf"), process)


class ProcessComparison(StreamComparison):
    """Feed it each stream's steps, metrics and ends in any interleaving; ask for the result."""

    def __init__(self, runs: int, policy: Policy | None = None) -> None:
        super().__init__(runs, policy)
        self.main = self.stream(MAIN)

    @property
    def by_process(self) -> dict[int, Comparison]:
        """The streams of the processes the target started (the main process's left out)."""
        return {k: comp for k, comp in self.by_stream.items() if k != MAIN}

    # ---- results -----------------------------------------------------------------------------
    def settled_divergence(self) -> bool:
        """For fail-fast: a divergence that no stream with steps so far can precede any more (a
        process that has not recorded a step yet in any run holds nothing back)."""
        if not self.by_process:
            return self.main.settled_divergence()
        return settled(p for comp in self.streams().values() if any(comp.counts.values())
                       for p in comp.pairs.values())

    def result(self) -> ComparisonResult:
        main = self.main.result()
        if not self.by_process:
            return main
        results = {MAIN: main, **{k: comp.result() for k, comp in sorted(self.by_process.items())}}
        per_run: dict[int, Divergence | None] = {}
        for run in range(2, self.runs + 1):
            found = [(_key(d, k), _in_process(d, k)) for k, res in results.items()
                     if (d := res.per_run.get(run)) is not None]
            per_run[run] = min(found, key=lambda f: f[0])[1] if found else None
        steps = [(_key(res.divergence, k), k) for k, res in results.items()
                 if res.divergence is not None and res.divergence.step is not None]
        metric_divs: list[Divergence] = [_in_process(d, k) for k, res in results.items()
                                         for d in res.metric_divergences]
        judged: dict[str, int] = {}
        for res in results.values():
            for name, n in res.judged.items():
                judged[name] = judged.get(name, 0) + n
        compared = sum(res.steps_compared for res in results.values())
        if steps:
            k = min(steps)[1]
            focus, div = results[k], _in_process(results[k].divergence, k)  # type: ignore[arg-type]
        else:
            trained = [k for k, comp in self.streams().items() if any(comp.counts.values())]
            focus = results[trained[0] if trained else MAIN]
            div = metric_divs[0] if metric_divs else None  # type: ignore[assignment]
        return dataclasses.replace(
            focus, first_divergent_step=div.step if div else None,
            divergent_signal=div.signal if div else None, divergence=div, per_run=per_run,
            metric_divergences=metric_divs, steps_compared=compared, metrics=main.metrics,
            groups=self.groups(), judged=judged, metrics_skipped=main.metrics_skipped)

    def groups(self) -> list[list[int]]:
        """Runs whose streams (steps, step counts and metrics) are all bit-identical, together."""
        by_key: dict[tuple[Any, ...], list[int]] = {}
        for k in range(1, self.runs + 1):
            key = tuple((comp.hashes[k].hexdigest(), comp.counts[k],
                         json.dumps(comp.metrics.get(k, {}), sort_keys=True))
                        for comp in self.streams().values())
            by_key.setdefault(key, []).append(k)
        return sorted(by_key.values())


class ProcessFeed(Feed):
    """Passes the main process's events and those of the processes the target started to the
    per-stream comparison, and everything to the caller's listener."""

    def add_step(self, index: int, event: StepRecord) -> None:
        self.comparison.add_step(index, MAIN, event.step, event.signals)

    def add_metrics(self, index: int, event: MetricsRecord) -> None:
        self.comparison.set_metrics(index, MAIN, event.metrics)

    def add_process_event(self, index: int, event: Record) -> None:
        if isinstance(event, StepRecord):
            self.comparison.add_step(index, event.proc, event.step, event.signals)
        elif isinstance(event, MetricsRecord):
            self.comparison.set_metrics(index, event.proc, event.metrics)

    def end(self, result: RunResult) -> None:
        # a run that failed or was stopped by us is cut short: its missing steps are no divergence,
        # nor are those of a process that was killed because the run stopped (--max-steps)
        cut_short = result.failed or result.status == "cancelled"
        steps = {MAIN: result.steps, **{p.index: p.steps for p in result.processes}}
        cut = [p.index for p in result.processes
               if not p.ended_itself and result.status not in ("completed", "exited")]
        self.comparison.end(result.index, steps, complete=not cut_short, cut=cut)
