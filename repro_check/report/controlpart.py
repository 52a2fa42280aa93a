"""The negative control behind an agreeing verdict, in every output, from one view of it: the
terminal's ``Control:`` line, the HTML page's paragraph, and the line of a JUnit testcase's
output. What was planted where and where it was seen; or, UNVERIFIED, what the check could not
see; or that it was not run, and why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from repro_check.compare.control import ControlResult
from repro_check.report.htmlkit import escape
from repro_check.report.model import Report

#: what the verdict becomes when the control was not seen, said after its detail
UNVERIFIED = "The verdict is UNVERIFIED: the runs agree, but the check could not have seen them differ"


@dataclass(frozen=True)
class ControlView:
    """The control as every output shows it."""

    result: ControlResult

    @classmethod
    def of(cls, report: Report) -> ControlView | None:
        """The report's control (None: no control stands behind its verdict)."""
        return None if report.control is None else cls(report.control)

    @property
    def said(self) -> str:
        """What the control did, after ``Control:``."""
        return self.result.summary.removeprefix("negative control: ")

    def terminal(self) -> list[Any]:
        """The terminal's ``Control:`` line (rich only when a summary is written)."""
        from rich.text import Text

        from repro_check.report.richkit import hanging

        ctl = self.result
        if ctl.status == "seen":
            return [hanging(Text("Control: ", style="bold"), Text(self.said))]
        if ctl.status == "skipped":
            return [Text(f"Control: not run ({ctl.detail})", style="dim")]
        return [hanging(Text("Control: ", style="bold yellow"),
                        Text.assemble(("not seen", "bold yellow"),
                                      f" — {ctl.detail}. {UNVERIFIED} "
                                      "(--no-control skips the control)."))]

    def html(self) -> list[str]:
        """The page's paragraph under the outcome."""
        ctl = self.result
        if ctl.status == "not seen":
            return [f'<p id="control"><b>Control: not seen.</b> {escape(ctl.detail)}. '
                    f"{UNVERIFIED}.</p>"]
        return [f'<p id="control" class="sub"><b>Control:</b> {escape(self.said)}</p>']

    def ci(self) -> str:
        """The line of a JUnit testcase's output: what the verdict stands on."""
        return f"{self.result.summary}\n"


def control_parts(report: Report) -> list[Any]:
    """The terminal's control line, or nothing without a control."""
    view = ControlView.of(report)
    return [] if view is None else view.terminal()


def control_section(report: Report) -> list[str]:
    """The page's control paragraph, or nothing without a control."""
    view = ControlView.of(report)
    return [] if view is None else view.html()
