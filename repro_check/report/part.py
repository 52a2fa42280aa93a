"""The one protocol every kind of report renders itself behind, in every output: the terminal
(a rich renderable), the HTML page (its sections, in order), and the one line CI outputs (JUnit's
failure message, GitHub's annotation and step summary) give a divergence. The JSON is the
report's dataclass fields (:mod:`repro_check.trace.jsonfields`), each part its own.

A kind's module (:mod:`~repro_check.report.check`, :mod:`~repro_check.report.gate`,
:mod:`~repro_check.report.across`, :mod:`~repro_check.report.resume`) holds all of its outputs;
:mod:`~repro_check.report.kinds` tells which kind a report is, once. What a kind says of itself
that the JSON says too (its verdict, what its two sides and its runs are called, whether it
compares its runs or writes a golden, where its two sides' environments differ) is its part's to
answer (:class:`repro_check.report.model.KindPart`: the gate, ``--across`` and ``resume`` parts,
and :data:`~repro_check.report.model.CHECK_RUNS` for a check), since the JSON is written without
these renderers (they import the model, and load rich)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from repro_check.report.model import Report
from repro_check.trace.results import RunResult

#: a section of the HTML page: its lines (none when it has nothing to show)
Section = Callable[[Report], list[str]]


@dataclass(frozen=True)
class PageSections:
    """The sections of the HTML page that are no one kind's (the verdict, the outcome, the
    curves, the tables every check has): :mod:`repro_check.report.html` writes them, and each
    kind places them around its own."""

    head: Section
    outcome: Section
    bisect: Section
    diagnosis: Section
    loss: Section
    difference: Section
    context: Section
    groups: Section
    metrics: Section
    runs: Section
    foot: Section


class Kind(Protocol):
    """One kind of report (a check, a gate, ``--across``, ``resume``), rendered by its own
    module in every output."""

    #: what the kind is called (``check``, ``gate``, ``across``, ``resume``)
    name: str

    def applies(self, report: Report) -> bool:
        """Whether ``report`` is of this kind (asked in :data:`repro_check.report.kinds.KINDS`'
        order: the first that applies is the report's kind)."""

    def terminal(self, report: Report) -> Any:
        """The summary as a rich renderable (print with ``crop=False``)."""

    def page(self, common: PageSections) -> tuple[Section, ...]:
        """The HTML page's sections, top to bottom: the kind's own among ``common``."""

    def failure_text(self, report: Report, div: Any) -> str:
        """The one line CI outputs give a first divergence ``div`` of this kind's report."""

    def run_name(self, report: Report, index: int) -> str:
        """What the page calls run ``index``."""

    def sides(self, report: Report, div: Any) -> tuple[str, str]:
        """What the two sides of a first divergence ``div`` are called: run 1's, then the
        other's."""

    def timed_runs(self, report: Report) -> list[RunResult]:
        """The runs whose seconds a JUnit testcase takes when the wall time was not measured."""


class RunsByReport:
    """What a kind whose runs are the report's own says of them: each called as the report
    calls it, and every one timed."""

    def run_name(self, report: Report, index: int) -> str:
        return report.run_name(index)

    def sides(self, report: Report, div: Any) -> tuple[str, str]:
        return self.run_name(report, 1), self.run_name(report, div.run)

    def timed_runs(self, report: Report) -> list[RunResult]:
        return list(report.results)
