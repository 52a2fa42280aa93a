"""Running the negative control: one more run, like the check's own, with a change planted.

Once the runs of a check (or ``verify``'s run and the golden) agree, :func:`run_control` starts
one more run from the same :class:`RunSpec` as run 1 (same seed, options, environment), told to
plant a 1-ulp change (:mod:`repro_check.child.seeding.control`), and compares it as it goes with the
reference (:class:`~repro_check.compare.control.ControlJudge`). It is stopped as soon as the
change is seen, or the step after the plant agreed: with a change after step 1 it costs a
process start and two steps. Its trace is kept beside the others as ``control.jsonl``.

A check whose runs go in parallel on the CPU starts its control with them instead
(:class:`Beside`): the change after step 1 is planted without waiting for the verdict, and the
control run's few records are judged once the runs agree. Its process start (most of what the
control costs) then overlaps the runs instead of following them; when they differ, it is thrown
away. A reference without steps (the change goes elsewhere then) runs it again after the runs.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro_check.compare.control import WINDOW, ControlJudge, ControlResult, keep_save, skipped
from repro_check.compare.steps import Policy
from repro_check.errors import Interrupted, ReproCheckError
from repro_check.run.options import RunOptions
from repro_check.run.runner import RunSpec, run_all
from repro_check.run.session import Outcome, Session, sigterm_as_interrupt
from repro_check.trace.format import TraceStream, iter_records
from repro_check.trace.protocol import ControlSettings, Record, SavedRecord
from repro_check.trace.results import Listener, RunResult

#: the step a control run's change follows (it goes on to the steps of
#: :data:`~repro_check.compare.control.WINDOW` after it)
PLANT_STEP = 1
#: the name of the control run's trace in the check's folder
TRACE_NAME = "control.jsonl"
#: what a check run with ``--no-control`` says in place of the control
SKIPPED = "--no-control"


@dataclass
class Reference:
    """What the control run is compared with: the reference's first steps (up to the one after
    the plant), how many it recorded, and its final metrics."""

    steps: dict[int, Mapping[str, Any]] = field(default_factory=dict)
    total: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    #: what it left (saved files, its modules' state at the end), kept where the control run
    #: may end within its window: a reference of at most ``upto`` steps
    saved: list[SavedRecord] = field(default_factory=list)


def reference_of(trace: str | Path, upto: int = PLANT_STEP + WINDOW, *, total: int | None = None,
                 metrics: Mapping[str, Any] | None = None) -> Reference:
    """The reference read from a trace (run 1's, or a golden): its steps up to ``upto``, its
    step count and its final metrics. Given the count and the metrics (known already), only the
    first steps are read, however long the trace."""
    stream = TraceStream(trace, require_end=False)
    ref = Reference()
    try:
        while (ev := stream.next_step()) is not None:
            if ev.step <= upto:
                ref.steps[ev.step] = ev.signals
            elif total is not None and metrics is not None:
                break
        ref.total = stream.steps if total is None else total
        ref.metrics = dict(stream.metrics if metrics is None else metrics)
    finally:
        stream.close()
    if ref.total <= upto:  # the control run may end where the reference does: what it left too
        records = iter_records(trace, require_end=False)
        try:
            for record in records:
                if isinstance(record, SavedRecord):
                    keep_save(ref.saved, record)
        finally:
            records.close()
    return ref


def settings_for(ref: Reference, policy: Policy) -> ControlSettings:
    """Where the control run plants: after step 1 when the reference recorded steps; else before
    the first module's call, or in the first compared final metric."""
    if ref.total >= 1:
        return ControlSettings(where="step", step=PLANT_STEP)
    names = [n for n in sorted(ref.metrics) if not policy.skips_metric(n)]
    return ControlSettings(where="forward", step=0, metric=names[0] if names else None)


def run_control(base: RunSpec, ref: Reference, policy: Policy, folder: str | Path, *,
                runs: int, reference: str = "run 1",
                beside: Beside | None = None) -> tuple[ControlResult, bool]:
    """Run the control (run number ``runs + 1``, from run 1's ``base`` spec) against ``ref``;
    returns its result and whether Ctrl-C or SIGTERM stopped it (the check is interrupted).
    The control run started ``beside`` the runs is judged instead when it can be; when it
    cannot, it is thrown away and the control runs now, planting where ``ref`` needs it."""
    if beside is not None:
        found = beside.judged(ref, policy, reference=reference)
        if found is not None:
            return found, False
        beside.discard()
    settings = settings_for(ref, policy)
    spec = control_spec(base, settings, folder, runs)
    judge = ControlJudge(ref.steps, ref.total, ref.metrics, policy, reference=reference,
                         plant_step=settings.step, reference_saved=ref.saved)
    started = time.monotonic()
    try:
        with sigterm_as_interrupt():
            results = run_all([spec], judge, 1, should_stop=judge.settled)
    except Interrupted:
        return skipped("interrupted", reference), True
    except ReproCheckError as e:  # the target could not be found again: the control is not run
        return skipped(f"the control run could not start: {e}", reference), False
    trace = results[0].trace_path if results else None
    return judge.result(round(time.monotonic() - started, 3), trace), False


def control_spec(base: RunSpec, settings: ControlSettings, folder: str | Path,
                 runs: int) -> RunSpec:
    """The control run (number ``runs + 1``) made from run 1's ``base`` spec: planting as
    ``settings`` say, its trace ``control.jsonl`` in ``folder``; a change after a step stops it
    at the end of the window after the plant at the latest."""
    told = base.told
    max_steps = told.max_steps
    if settings.where == "step":
        last = PLANT_STEP + WINDOW
        max_steps = last if max_steps is None else min(max_steps, last)
    return dataclasses.replace(
        base, told=told.replace(run=runs + 1, control=settings, max_steps=max_steps),
        trace_path=Path(folder) / TRACE_NAME, processes=False)


def gpu_visible() -> bool:
    """Whether runs here may use a GPU (a device node, not hidden by ``CUDA_VISIBLE_DEVICES``):
    one more process on a GPU the runs fill could run them out of its memory."""
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES", None)
    if hidden is not None and hidden.strip() in ("", "-1"):
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/kfd"))


def beside(options: RunOptions, feed: Listener, specs: Sequence[RunSpec], folder: str | Path,
           runs: int, parallel: bool) -> Beside | None:
    """The control run to start with ``runs`` runs (:class:`Beside`), where they go
    ``parallel`` (a CPU free beside them, each a process of its own) and no GPU is in sight (one
    more process could run the runs out of its memory); None: it runs after them, if at all."""
    if not options.control or not parallel or not specs or options.distributed is not None \
            or gpu_visible():
        return None
    return Beside.start_with(feed, specs[0], folder, runs)


def run_with(session: Session, feed: Listener, beside: Beside | None, specs: list[RunSpec],
             jobs: int, stop: Callable[[], bool] | None) -> Outcome:
    """Run ``specs`` (``jobs`` at a time) through ``session``, and the control run ``beside``
    them when there is one; the outcome holds the runs' results only."""
    if beside is None:
        return session.run(feed, jobs, stop, specs=specs)
    outcome = session.run(beside, jobs + 1, stop, specs=[*specs, beside.spec])
    return dataclasses.replace(outcome, results=beside.others(outcome.results))


class Beside:
    """The control run of a check, started with its runs: the records of run ``spec.index``
    are kept here (a handful: the run stops two steps after the plant) and every other run's go
    on to ``feed``; :meth:`judged` compares them with the reference once the runs agree."""

    def __init__(self, feed: Listener, spec: RunSpec) -> None:
        self.feed = feed
        self.spec = spec
        self.index = spec.index
        self.records: list[Record] = []
        self.result: RunResult | None = None
        self.started = self.ended = 0.0

    @classmethod
    def start_with(cls, feed: Listener, base: RunSpec, folder: str | Path,
                   runs: int) -> Beside:
        return cls(feed, control_spec(base, ControlSettings(where="step", step=PLANT_STEP),
                                      folder, runs))

    # ---- the feed of all the runs (run_started, event, run_finished) ---------------------
    def run_started(self, index: int) -> None:
        if index == self.index:
            self.started = time.monotonic()
        else:
            self.feed.run_started(index)

    def event(self, index: int, event: Record) -> None:
        if index == self.index:
            self.records.append(event)
        else:
            self.feed.event(index, event)

    def run_finished(self, result: RunResult) -> None:
        if result.index == self.index:
            self.result, self.ended = result, time.monotonic()
        else:
            self.feed.run_finished(result)

    # ---- after the runs ----------------------------------------------------------------
    def others(self, results: list[RunResult]) -> list[RunResult]:
        """The runs' results without the control's."""
        return [r for r in results if r.index != self.index]

    def judged(self, ref: Reference, policy: Policy, reference: str = "run 1") -> ControlResult | None:
        """The control's result against ``ref``; None when it must run again after all: the
        reference recorded no step (the change goes before the first module call or into a
        final metric then), or the control run did not end."""
        if ref.total < 1 or self.result is None or self.result.status == "cancelled":
            return None
        judge = ControlJudge(ref.steps, ref.total, ref.metrics, policy, reference=reference,
                             plant_step=PLANT_STEP, reference_saved=ref.saved)
        judge.run_started(self.index)
        for record in self.records:
            judge.event(self.index, record)
        judge.run_finished(self.result)
        return judge.result(round(self.ended - self.started, 3), self.result.trace_path)

    def discard(self) -> None:
        """The runs did not agree: no control is shown, and its trace is not kept."""
        if self.spec.trace_path is not None:
            Path(self.spec.trace_path).unlink(missing_ok=True)
