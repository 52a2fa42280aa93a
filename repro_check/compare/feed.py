"""The feed between the runs and a streaming comparison: every event of every run goes to the
comparison and to the caller's listener.

In the comparison layer (it drives a comparison; the runner only calls a listener), so that the
comparisons of other shapes (per process, per rank, against a golden) extend it without importing
the runner's side.
"""

from __future__ import annotations

from typing import Any

from repro_check.compare.saved import SavedComparison
from repro_check.trace.protocol import MetricsRecord, Record, SavedRecord, StepRecord
from repro_check.trace.results import Listener, RunResult


class NullListener:
    """A listener that ignores everything (no progress display)."""

    def run_started(self, index: int) -> None:
        pass

    def event(self, index: int, event: Record) -> None:
        pass

    def run_finished(self, result: RunResult) -> None:
        pass


class Feed:
    """Passes run events to the streaming comparison and to the caller's listener.

    ``add_step``, ``add_metrics``, ``add_process_event`` and ``end`` are what a comparison of
    another shape (one per rank, one per process, the golden's) overrides; the rest is shared.
    What the runs saved goes to :attr:`saved`, paired per torchrun rank (one stream without).
    """

    def __init__(self, comparison: Any, listener: Listener | None = None) -> None:
        self.comparison = comparison
        self.listener = listener or NullListener()
        self.uses_dataloader = False
        #: the files the runs saved and their modules' state at the end
        self.saved = SavedComparison()

    def run_started(self, index: int) -> None:
        self.listener.run_started(index)

    def event(self, index: int, event: Record) -> None:
        if event.proc is not None:
            self.add_process_event(index, event)
            self.uses_dataloader = self.uses_dataloader or (
                isinstance(event, StepRecord) and "batch" in event.signals)
        elif isinstance(event, StepRecord):
            self.add_step(index, event)
            self.uses_dataloader = self.uses_dataloader or "batch" in event.signals
        elif isinstance(event, MetricsRecord):
            self.add_metrics(index, event)
        elif isinstance(event, SavedRecord):
            self.saved.add(index, event.rank or 0, event)
        self.listener.event(index, event)

    def run_finished(self, result: RunResult) -> None:
        self.end(result)
        self.saved.end(result.index, complete=not (result.failed or result.status == "cancelled"))
        self.listener.run_finished(result)

    def add_step(self, index: int, event: StepRecord) -> None:
        self.comparison.add_step(index, event.step, event.signals)

    def add_metrics(self, index: int, event: MetricsRecord) -> None:
        self.comparison.set_metrics(index, event.metrics)

    def add_process_event(self, index: int, event: Record) -> None:
        """A record of a process the target started (``event.proc``): a comparison of the
        main process alone has no use for it."""

    def end(self, result: RunResult) -> None:
        # a run that failed or was stopped by us is cut short: its missing steps are no divergence
        cut_short = result.failed or result.status == "cancelled"
        self.comparison.end(result.index, result.steps, complete=not cut_short)
