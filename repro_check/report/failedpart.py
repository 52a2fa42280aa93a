"""How the runs ended when the target failed, in every output, from one view of it: the
terminal's lines under the error, the HTML page's paragraphs, and the tail of the one line CI
outputs (JUnit's failure message, GitHub's annotation) give a failed target. Which run, how,
after how many steps and where; nothing about reproducibility. And why runs stopped by
``--max-steps`` have no final metric, which the sentence of what agreed says."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from repro_check.report.htmlkit import escape
from repro_check.report.model import Report
from repro_check.trace.results import RunResult


def how_it_failed(r: RunResult) -> str:
    """How a failed run ended: a signal, a timeout, an exception, an exit status."""
    if r.status == "crashed":
        return f"killed by {r.signal}"
    if r.status == "timeout":
        return "timed out"
    if r.error and r.error.get("kind") == "raised":
        return f"raised {r.error.get('type')}"
    if r.error and r.error.get("kind") == "exit":  # sys.exit(N): N, not the run's own status
        message = str(r.error.get("message") or "")
        if message.startswith("the target called "):
            return message.removeprefix("the target ")
    if r.status == "unresolved":
        return "could not resolve the target"
    return f"exited with status {r.returncode}"


@dataclass(frozen=True)
class FailedRunsView:
    """How each run ended when the target failed, one line each; and, when a run failed before
    its training began while another ran on, that this points at the environment or at
    repro-check rather than at the training."""

    lines: list[str]

    @classmethod
    def of(cls, report: Report,
           label: Callable[[RunResult], str] | None = None) -> FailedRunsView | None:
        """The runs' ends (``label``: what a run is called, as the report calls it when None);
        None unless the target failed and some run did."""
        if report.error is None or not any(r.failed for r in report.results):
            return None
        lines: list[str] = []
        early: list[RunResult] = []
        for r in report.results:
            name = label(r) if label else report.run_name(r.index)
            steps = f"{r.steps} step{'' if r.steps == 1 else 's'}"
            if not r.failed:
                lines.append(f"{name}: {r.status}, {steps}")
                continue
            point = r.failed_at
            where = f", {point.describe()}" if point is not None and point.describe() else ""
            lines.append(f"{name}: {how_it_failed(r)} after {steps}{where}")
            if point is not None and r.steps == 0 and (point.before_target or point.importing):
                early.append(r)
        ran_on = [r for r in report.results if not r.failed and r.steps]
        if early and ran_on:
            names = ", ".join(label(r) if label else report.run_name(r.index) for r in early)
            lines.append(
                f"{names[0].upper()}{names[1:]} failed before its training began, while "
                f"{'the other runs' if len(ran_on) > 1 else report.run_name(ran_on[0].index)} "
                "went on: that points at the environment (a library that crashes when it is "
                "imported) or at repro-check's hooks, not at the training. Run the script alone "
                "with the same interpreter to tell which.")
        return cls(lines)

    def terminal(self) -> list[Any]:
        """The summary's lines under the error."""
        from rich.text import Text

        return [Text(line) for line in self.lines]

    def html(self) -> list[str]:
        """The page's paragraphs under the error."""
        return [f"<p>{escape(line)}</p>" for line in self.lines]

    def ci(self, failed: str) -> str:
        """The one line CI outputs give the failed target: ``failed`` (what failed), then each
        run's end."""
        return "; ".join([failed, *self.lines])


def failed_runs_parts(report: Report,
                      label: Callable[[RunResult], str] | None = None) -> list[Any]:
    """The terminal's lines on how the runs ended, or nothing when no run failed."""
    view = FailedRunsView.of(report, label)
    return [] if view is None else view.terminal()


def failed_runs_section(report: Report) -> list[str]:
    """The page's paragraphs on how the runs ended, or nothing when no run failed."""
    view = FailedRunsView.of(report)
    return [] if view is None else view.html()


def failed_runs_failure(report: Report, failed: str) -> str:
    """The one line CI outputs give a failed target: ``failed``, then each run's end."""
    view = FailedRunsView.of(report)
    return failed if view is None else view.ci(failed)


def stopped_note(results: Sequence[RunResult]) -> str | None:
    """Why runs stopped by ``--max-steps`` have no final metric, or None when none was stopped."""
    stopped = [r for r in results if r.status == "stopped"]
    if not stopped:
        return None
    held = next((r.held_metrics for r in stopped if r.held_metrics), [])
    which = "the runs were" if len(stopped) == len(results) else \
        f"run{'s' if len(stopped) > 1 else ''} {', '.join(str(r.index) for r in stopped)} " \
        f"{'were' if len(stopped) > 1 else 'was'}"
    reached = (f"; the metrics recorded before the cut ({', '.join(held[:5])}) are not final and "
               "are not compared") if held else ", before recording any metric"
    return (f"{which} stopped by --max-steps before ending on their own, so no final metric was "
            f"reached{reached}. Final metrics are compared for runs that end on their own: run "
            "without --max-steps, or with a limit above the script's own number of steps.")
