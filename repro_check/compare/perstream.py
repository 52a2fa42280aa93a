"""Runs that are several streams each, compared stream by stream: the processes a target started
(:mod:`repro_check.compare.processes`) and the ranks of a torchrun job
(:mod:`repro_check.distributed.compare`).

Stream K of run N is compared with stream K of run 1 by the usual streaming
:class:`~repro_check.compare.steps.Comparison`, one per stream, made when the stream's first
record arrives. A run that ended before a stream appeared lacks it: the stream's comparison is
told so when it is made (the run recorded no step of it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any, TypeVar

from repro_check.compare.steps import Comparison, ComparisonResult, Divergence, Policy

D = TypeVar("D", bound=Divergence)


def located(d: Divergence, kind: type[D], **where: Any) -> D:
    """Divergence ``d`` as a ``kind`` that says in which stream it is (``process=``, ``rank=``)."""
    values = {f.name: getattr(d, f.name) for f in dataclasses.fields(Divergence)}
    return kind(**values, **where)


class StreamComparison:
    """Feed it each stream's steps, metrics and ends in any interleaving; the subclass says how
    the streams' results make one."""

    def __init__(self, runs: int, policy: Policy | None = None) -> None:
        self.runs = runs
        self.policy = policy or Policy()
        self.by_stream: dict[int, Comparison] = {}
        #: each ended run: its steps per stream, whether it ran to its end, the streams cut short
        self.ended: dict[int, tuple[dict[int, int], bool, frozenset[int]]] = {}

    def stream(self, key: int) -> Comparison:
        """The comparison of stream ``key``, made (and told of the runs that ended) at first use."""
        comp = self.by_stream.get(key)
        if comp is None:
            comp = self.by_stream[key] = Comparison(self.runs, self.policy)
            for run, (steps, complete, cut) in sorted(self.ended.items()):
                comp.end(run, steps.get(key, 0), complete and key not in cut)
        return comp

    # ---- feeding -----------------------------------------------------------------------------
    def add_step(self, run: int, key: int, step: int, signals: dict[str, Any]) -> None:
        self.stream(key).add_step(run, step, signals)

    def set_metrics(self, run: int, key: int, metrics: dict[str, Any]) -> None:
        self.stream(key).set_metrics(run, metrics)

    def end(self, run: int, steps: Mapping[int, int], complete: bool = True,
            cut: Collection[int] = ()) -> None:
        """Run ``run`` ended with ``steps`` per stream (a stream it lacks recorded none);
        ``complete=False`` when the run was cut short by us, ``cut`` the streams cut short with
        the run."""
        self.ended[run] = (dict(steps), complete, frozenset(cut))
        for key, comp in self.by_stream.items():
            comp.end(run, steps.get(key, 0), complete and key not in cut)

    # ---- results -----------------------------------------------------------------------------
    def streams(self) -> dict[int, Comparison]:
        """Every stream's comparison, lowest stream first."""
        return dict(sorted(self.by_stream.items()))

    def stream_results(self) -> dict[int, ComparisonResult]:
        return {key: comp.result() for key, comp in self.streams().items()}
