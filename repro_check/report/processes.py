"""The report's part about the processes the target started (``--json`` key ``processes``):
made here from a finished per-process comparison
(:class:`~repro_check.compare.processes.ProcessComparison`) and the runs' results, and rendered
here from one view of it: the line of the terminal's head. The HTML page does not show it (its
first divergence names no process either); the JSON has every process's steps, end and trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from repro_check.compare.processes import ProcessComparison
from repro_check.compare.steps import ComparisonResult
from repro_check.report.contents import ProcessRow, ProcessRun
from repro_check.report.model import ProcessesPart, Report
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


@dataclass(frozen=True)
class ProcessesView:
    """The processes compared as the outputs show them: each one's steps in every run, and how
    many recorded nothing (ignored, as helpers)."""

    #: (process, its steps in each run), in process order
    steps: list[tuple[int, list[int]]]
    ignored: int

    @classmethod
    def of(cls, report: Report) -> ProcessesView | None:
        """The report's processes (None: no process the target started recorded a step)."""
        part = report.processes
        if part is None:
            return None
        return cls([(row.process, list(row.steps)) for row in part.processes], len(part.ignored))

    @property
    def said(self) -> str:
        """One line: the processes compared and their steps per run."""
        shown = "; ".join(f"{process}: {', '.join(map(str, steps))}"
                          for process, steps in self.steps)
        ignored = f" ({self.ignored} that recorded nothing ignored)" if self.ignored else ""
        return f"processes the target started, steps recorded: {shown}{ignored}"

    def terminal(self) -> str:
        """The line of the terminal's head panel."""
        return f"\n{self.said}"


def processes_terminal(report: Report) -> str:
    """The terminal head's line on the processes, or nothing without any."""
    view = ProcessesView.of(report)
    return "" if view is None else view.terminal()
