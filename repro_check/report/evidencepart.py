"""What a verdict rests on, in every output, from one view of it: the steps, metrics and saved
tensors compared, said after the terminal's verdict (a check's panel, a gate's), beside the
HTML page's verdict, and in a JUnit testcase's output. Nothing when nothing was compared to rest
on (an error, an interruption, a single run, a record)."""

from __future__ import annotations

from dataclasses import dataclass

from repro_check.report.contents import Evidence
from repro_check.report.htmlkit import escape
from repro_check.report.model import Report


@dataclass(frozen=True)
class EvidenceView:
    """What the verdict rests on, as every output shows it."""

    evidence: Evidence

    @classmethod
    def of(cls, report: Report) -> EvidenceView | None:
        """The report's evidence (None: nothing was compared to rest on)."""
        if report.error is not None or report.interrupted or report.comparison is None:
            return None
        return cls(report.evidence) if report.compares else None

    @property
    def said(self) -> str:
        """``rests on 12 steps and 1 metric``, or ``no training step was seen; the verdict rests
        on 1 metric``."""
        return self.evidence.text()

    def terminal(self) -> str:
        """What follows the verdict and the target on the terminal's first line."""
        return f" · {self.said}"

    def html(self) -> str:
        """What follows the verdict on the page."""
        return f' <span class="sub" id="evidence">{escape(self.said)}</span>'

    def ci(self) -> str:
        """The line of a JUnit testcase's output."""
        return f"evidence: {self.said}\n"


def evidence_terminal(report: Report) -> str:
    """What follows the verdict and the target on the terminal (empty: nothing to rest on)."""
    view = EvidenceView.of(report)
    return "" if view is None else view.terminal()


def evidence_html(report: Report) -> str:
    """What follows the verdict on the page (empty: nothing to rest on)."""
    view = EvidenceView.of(report)
    return "" if view is None else view.html()


def evidence_ci(report: Report) -> list[str]:
    """A JUnit testcase's output line on the evidence, or nothing."""
    view = EvidenceView.of(report)
    return [] if view is None else [view.ci()]
