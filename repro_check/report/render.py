"""The summary of any report, by its kind: a gate report (record, verify, diff) has its own
layout, a diagnosis adds its block to the check's, ``--across`` has one row a pair of
environments, a check (distributed or not) is the default."""

from __future__ import annotations

import dataclasses

from typing import Any

from repro_check.report.model import Report


def summary(report: Report) -> Any:
    """The report as rich renderables (print with ``crop=False``), with every control character
    that came from a target or a file made visible."""
    # each renderer (and rich) only when its kind of report is shown
    from repro_check.report.text import Visible

    return Visible(_layout(report))


def _layout(report: Report) -> Any:
    if report.bisect is not None:
        # only a bisect's report has these lines
        from rich.console import Group
        from rich.text import Text
        from repro_check.report.bisect import bisect_lines

        lines = [Text("Bisect", style="bold")]
        lines += [Text(line) for line in bisect_lines(report.bisect)]
        return Group(_layout(dataclasses.replace(report, bisect=None)), *lines)
    if report.gate is not None:
        # each renderer (and rich) only when its kind of report is shown
        from repro_check.report import gate

        return gate.summary(report)
    if report.across is not None:
        # each renderer (and rich) only when its kind of report is shown
        from repro_check.report import across

        return across.summary(report)
    if report.resume is not None:
        # each renderer (and rich) only when its kind of report is shown
        from repro_check.report import resume

        return resume.summary(report)
    # each renderer (and rich) only when its kind of report is shown
    from repro_check.report import terminal

    if report.diagnosis is not None:
        # rich on use: import repro_check, --help and the run entry never load it
        from rich.console import Group

        # each renderer (and rich) only when its kind of report is shown
        from repro_check.report import diagnosis

        return Group(terminal.summary(report), diagnosis.diagnosis(report))
    return terminal.summary(report)
