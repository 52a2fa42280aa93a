"""The report's part about the processes the target started (``--json`` key ``processes``).

In the report layer: it reads a finished per-process comparison
(:class:`~repro_check.compare.processes.ProcessComparison`) and the runs' results.
"""

from __future__ import annotations

from collections.abc import Sequence

from repro_check.compare.processes import ProcessComparison
from repro_check.compare.steps import ComparisonResult
from repro_check.report.contents import ProcessRow, ProcessRun
from repro_check.report.model import ProcessesPart
from repro_check.trace.results import RunResult


def processes_part(results: Sequence[RunResult], comparison: ProcessComparison,
                   result: ComparisonResult | None) -> ProcessesPart | None:
    """The part about processes, when any process the target started recorded something: where
    the first divergence (of ``result``) is, and each process's steps and end in every run."""
    if not comparison.by_process:
        return None
    div = result.divergence if result else None
    by_run = {r.index: {p.index: p for p in r.processes} for r in results}
    rows = []
    for k in sorted(comparison.by_process):
        got = [by_run.get(r.index, {}).get(k) for r in results]
        rows.append(ProcessRow(
            process=k,
            steps=[p.steps if p else 0 for p in got],
            status=[p.status if p else None for p in got],
            traces=[p.trace_path if p else None for p in got],
        ))
    started = {k for procs in by_run.values() for k in procs}
    return ProcessesPart(
        first_divergent_process=div.process if div is not None else None,
        processes=rows,
        ignored=sorted(started - set(comparison.by_process)),
        results=[ProcessRun(run=r.index, processes=list(r.processes)) for r in results],
    )
