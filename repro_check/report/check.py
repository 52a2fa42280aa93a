"""A check's report (``check``, ``diagnose``; distributed or not): the kind every report is
when it is no gate, no ``--across`` and no ``resume``. Its terminal summary is
:mod:`~repro_check.report.terminal`'s, a diagnosis's block under it; its page has every section
of a check; its CI line names the first divergence."""

from __future__ import annotations

from typing import Any

from rich.console import Group

from repro_check.report import terminal
from repro_check.report.diagnosis import diagnosis
from repro_check.report.model import Report
from repro_check.report.part import PageSections, RunsByReport, Section
from repro_check.report.text import divergence_failure


class CheckKind(RunsByReport):
    """A check (the last kind asked: it applies to every report)."""

    name = "check"

    def applies(self, report: Report) -> bool:
        return True

    def terminal(self, report: Report) -> Any:
        if report.diagnosis is not None:
            return Group(terminal.summary(report), diagnosis(report))
        return terminal.summary(report)

    def page(self, common: PageSections) -> tuple[Section, ...]:
        return (common.head, common.outcome, common.bisect, common.diagnosis, common.loss,
                common.difference, common.context, common.groups, common.metrics, common.runs,
                common.foot)

    def failure_text(self, report: Report, div: Any) -> str:
        return divergence_failure(report, div)


CHECK = CheckKind()
