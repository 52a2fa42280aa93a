"""The summary of any report, by its kind: a gate report (record, verify, diff) has its own
layout, a diagnosis adds its block to the check's, ``--across`` has one row a pair of
environments, a check (distributed or not) is the default."""

from __future__ import annotations

from typing import Any

from repro_check.report.model import Report


def summary(report: Report) -> Any:
    """The report as rich renderables (print with ``crop=False``), with every control character
    that came from a target or a file made visible."""
    from repro_check.report.text import Visible

    return Visible(_layout(report))


def _layout(report: Report) -> Any:
    if report.bisect is not None:
        from rich.console import Group
        from rich.text import Text

        from repro_check.report.bisect import bisect_lines

        lines = [Text("Bisect", style="bold")]
        lines += [Text(line) for line in bisect_lines(report.bisect)]
        inner = report.bisect
        report.bisect = None
        try:
            rest = _layout(report)
        finally:
            report.bisect = inner
        return Group(rest, *lines)
    if report.gate is not None:
        from repro_check.report import gate

        return gate.summary(report)
    if report.across is not None:
        from repro_check.report import across

        return across.summary(report)
    from repro_check.report import terminal

    if report.diagnosis is not None:
        from rich.console import Group

        from repro_check.report import diagnosis

        return Group(terminal.summary(report), diagnosis.diagnosis(report))
    return terminal.summary(report)
