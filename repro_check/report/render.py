"""The summary of any report on the terminal: its kind's (:mod:`repro_check.report.kinds`),
then the part a bisect adds."""

from __future__ import annotations

from typing import Any

from repro_check.report.model import Report


def summary(report: Report) -> Any:
    """The report as rich renderables (print with ``crop=False``), with every control character
    that came from a target or a file made visible."""
    # each renderer (and rich) only when a summary is shown
    from rich.console import Group
    from repro_check.report.bisect import terminal_parts
    from repro_check.report.kinds import kind_of
    from repro_check.report.text import Visible

    body = kind_of(report).terminal(report)
    if report.bisect is not None:
        body = Group(body, *terminal_parts(report.bisect))
    return Visible(body)
