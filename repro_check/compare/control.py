"""The negative control, judged: was the change planted in the control run seen?

A check (or ``verify``) whose runs agree says REPRODUCIBLE only if it could have seen a
difference. The control run is started like the others and plants a 1-ulp change right after
step 1 (:mod:`repro_check.child.seeding.control`); this module compares it, live, with the reference
(run 1, or the golden) on exact bits, in the signals the check compares: the change must show
at the step it follows or at the next one (where the runs end before that, in the final metrics;
with no step recorded, in the final metrics). Tolerances are not applied: they say how large a
difference is accepted, the control asks whether one can be seen at all.

:class:`ControlResult` is what the reports show (JSON key ``control``); :class:`ControlJudge`
is the feed the control run's records go to (:mod:`repro_check.run.control` runs it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from repro_check.compare.saved import SavedComparison
from repro_check.compare.steps import Policy, first_difference
from repro_check.trace.jsonfields import JsonRecord, json_field
from repro_check.trace.payloads import ControlNote, JsonValue
from repro_check.trace.protocol import (SAVED_FILE, ControlInfo, InfoRecord, MetricsRecord,
                                        Record, SavedRecord, StepRecord, typed_info)
from repro_check.trace.results import Listener, RunResult

#: ``seen``: the planted change showed (the verdict stands); ``not seen``: it did not (the
#: verdict is UNVERIFIED); ``skipped``: no control was run (``--no-control``, or a kind of check
#: it does not cover yet), and the report says why
ControlStatus = Literal["seen", "not seen", "skipped"]


@dataclass
class Planted(JsonRecord):
    """What the control run changed: a tensor's element (its name, dtype, shape and index) after
    step ``step`` (0: before the first step), or a final metric as reported (``where``
    ``metric``), and its value before and after."""

    tensor: str
    dtype: str | None = None
    shape: list[int] = field(default_factory=list)
    index: list[int] = field(default_factory=list)
    step: int = 0
    where: str = "step"
    before: JsonValue = None
    after: JsonValue = None
    #: its gradient moved too (a step without an optimizer: the script's own update follows)
    gradient: bool = False

    @property
    def text(self) -> str:
        """``Net.fc1.weight[3, 0] (float32, shape [8, 4]) after step 1``."""
        if self.where == "metric":
            return f"final metric {self.tensor.removeprefix('metric:')} as reported"
        if self.where == "resume":
            return f"a resumed run that leaves out {self.tensor}"
        index = f"[{', '.join(map(str, self.index))}]" if self.index else ""
        shape = f"shape [{', '.join(map(str, self.shape))}]"
        when = f"after step {self.step}" if self.step else "before its module's first call"
        grad = " and its gradient" if self.gradient else ""
        return f"{self.tensor}{index} ({self.dtype}, {shape}){grad} {when}"


@dataclass
class ControlResult(JsonRecord):
    """The negative control of a verdict (JSON key ``control``): its status, what was planted
    where, where it was seen (step and signal), or what the check could not see (``detail``)."""

    status: ControlStatus
    #: what the control run is compared with: ``run 1``, ``golden``, or for a resume ``reference``
    reference: str = "run 1"
    planted: Planted | None = None
    seen_step: int | None = None
    seen_signal: str | None = None
    #: why not seen (what the check could not see), why skipped, or a note on what was seen
    detail: str | None = None
    seconds: float = json_field(default=0.0, digits=3)
    trace: str | None = None

    @property
    def verified(self) -> bool:
        """Whether the verdict it stands behind holds: seen, or deliberately skipped."""
        return self.status != "not seen"

    @property
    def summary(self) -> str:
        """One line for the reports."""
        if self.status == "skipped":
            return f"negative control: not run ({self.detail})"
        what = self.planted.text if self.planted is not None else "nothing"
        if self.status == "seen":
            where = f"step {self.seen_step}" if self.seen_step else seen_after_the_end(
                self.seen_signal or "")
            if self.planted is not None and self.planted.where == "resume":
                return (f"negative control: {what} was seen to differ from the {self.reference} "
                        f"at {where} ({self.seen_signal})")
            return (f"negative control: a 1-ulp change planted in {what} was seen at {where} "
                    f"({self.seen_signal}) against {self.reference}")
        return f"negative control: {self.detail}"

    JSON_PROPERTIES = ("summary",)


def seen_after_the_end(signal: str) -> str:
    """Where a change seen once the control run ended showed: the final metrics, or what the
    run left (its modules' state at the end, a file it saved)."""
    if signal.startswith("state:"):
        return "the end, in the modules' state"
    if signal.startswith("saved:"):
        return "the end, in a saved file"
    return "the final metrics"


def skipped(why: str, reference: str = "run 1") -> ControlResult:
    return ControlResult("skipped", reference=reference, detail=why)


#: the saved files of a run the control compares (its end state is always compared): a run
#: that ends within the window is short, and the files it saves are compared one by one
KEPT_SAVES = 64


def keep_save(kept: list[SavedRecord], record: SavedRecord) -> None:
    """Add ``record`` (a save of the run's main process) to ``kept``, up to :data:`KEPT_SAVES`
    files; the modules' state at the end always."""
    if record.proc is not None:
        return
    if record.kind != SAVED_FILE or sum(r.kind == SAVED_FILE for r in kept) < KEPT_SAVES:
        kept.append(record)


#: the steps after the plant within which the change must show: the next one, or the one after
#: it (a loop that steps two optimizers in turn, a GAN's discriminator then its generator: a
#: change in the first one's model may leave the second one's step untouched, and shows at the
#: first one's next step)
WINDOW = 2


class ControlJudge:
    """The feed of the control run: its records compared, as they come, with the reference's
    first steps and final metrics. ``settled`` once the change was seen, or once the steps
    after the plant (:data:`WINDOW`) agreed (the run is stopped then)."""

    def __init__(self, reference_steps: Mapping[int, Mapping[str, Any]], reference_total: int,
                 reference_metrics: Mapping[str, Any], policy: Policy, *,
                 reference: str = "run 1", plant_step: int = 1,
                 listener: Listener | None = None,
                 reference_saved: Sequence[SavedRecord] = ()) -> None:
        self.ref_steps = reference_steps
        self.ref_total = reference_total
        self.ref_metrics = dict(reference_metrics)
        #: what the reference left (:func:`keep_save`), compared when the control run ends
        #: within the window
        self.ref_saved = tuple(reference_saved)
        #: exact bits, in the signals the check compares
        self.exact = Policy(signals=policy.signals, always_metrics=policy.always_metrics)
        self.skips_metric = policy.skips_metric
        self.reference = reference
        self.plant_step = plant_step
        #: the last step at which the change may show
        self.last_step = plant_step + WINDOW
        self.listener = listener
        self.planted: Planted | None = None
        self.unplanted: str | None = None
        self.seen: tuple[int | None, str] | None = None
        self.not_seen: str | None = None
        self.metrics: dict[str, Any] = {}
        self.saved: list[SavedRecord] = []
        self.steps = 0

    # ---- the feed (run_started, event, run_finished) -------------------------------------
    def run_started(self, index: int) -> None:
        if self.listener is not None:
            self.listener.run_started(index)

    def event(self, index: int, event: Record) -> None:
        if isinstance(event, InfoRecord):
            event = typed_info(event)  # a record built as a plain one
        if isinstance(event, ControlInfo):
            self._planted(event.control)
        elif isinstance(event, StepRecord) and event.proc is None:
            self._step(event.step, event.signals)
        elif isinstance(event, MetricsRecord) and event.proc is None:
            self.metrics.update(event.metrics)
        elif isinstance(event, SavedRecord):
            keep_save(self.saved, event)

    def run_finished(self, result: RunResult) -> None:
        if self.settled():
            return
        if result.failed:
            self.not_seen = f"the control run failed: {result.describe_failure()}"
            return
        ended_early = result.steps < self.last_step
        if ended_early and result.status == "stopped":
            self.not_seen = (f"a 1-ulp change planted in {self._what()} cannot show: the runs "
                             f"stop at step {result.steps} (--max-steps {result.steps}), before "
                             f"the steps after it (to step {self.last_step})")
            return
        if ended_early and result.steps < self.ref_total:
            self.seen = (result.steps + 1, "steps")
            return
        if ended_early:  # the runs end here: the final metrics show it, or what a run that
            # trained left (a change planted before any step, in an evaluation, is in the
            # weights it planted: the metrics alone say whether it can be seen)
            diff = self._metric_difference() or (
                self._saved_difference() if self.plant_step > 0 else None)
            if diff is not None:
                self.seen = (None, diff)
            elif self.plant_step == 0:
                self.not_seen = self._blind_metrics()
            else:
                self.not_seen = self._blind_metrics(ended=result.steps)

    # ---- judging -------------------------------------------------------------------------
    def settled(self) -> bool:
        return self.seen is not None or self.not_seen is not None

    def _planted(self, note: ControlNote) -> None:
        if not note.planted:
            self.unplanted = note.why or "nothing could be changed"
            self.not_seen = f"no change could be planted: {self.unplanted}"
            return
        self.planted = Planted(
            tensor=note.tensor, dtype=note.dtype, shape=list(note.shape), index=list(note.index),
            step=note.step, where=note.where, before=note.before, after=note.after,
            gradient=note.gradient)

    def _step(self, step: int, signals: Mapping[str, Any]) -> None:
        self.steps = max(self.steps, step)
        if self.settled() or step > self.last_step:
            return
        ref = self.ref_steps.get(step)
        if ref is None:  # the reference ended before: the control run went on
            self.seen = (step, "steps")
            return
        diff = first_difference(ref, signals, self.exact)
        if diff is not None:
            self.seen = (step, diff)
        elif step == self.last_step:
            self.not_seen = self._blind_step(step)

    def _metric_difference(self) -> str | None:
        for name in sorted(set(self.ref_metrics) | set(self.metrics)):
            if self.skips_metric(name):
                continue
            a, b = self.ref_metrics.get(name), self.metrics.get(name)
            if self.exact.judge(f"metric:{name}", a, b) is None:
                return f"metric:{name}"
        return None

    def _saved_difference(self) -> str | None:
        """The signal of the first difference between what the reference left and what the
        control run left (its saved files in order, then its modules' state at the end)."""
        if not self.ref_saved:
            return None
        pairs = SavedComparison()
        for index, records in ((1, self.ref_saved), (2, self.saved)):
            for record in records:
                pairs.add(index, 0, record)
            pairs.end(index, complete=True)
        found = pairs.result(2).divergences
        return found[0].signal if found else None

    def _compared(self) -> str:
        signals = self.exact.signals
        return "every signal" if signals is None else "the signals " + ", ".join(sorted(signals))

    def _what(self) -> str:
        return self.planted.text if self.planted is not None else "a trained tensor"

    def _blind_step(self, step: int) -> str:
        if self.planted is None:
            return ("no change was planted: the control run said nothing of step 1 while it ran "
                    "(its steps are known only as it ends, as when a model is changed in place "
                    "under torch.no_grad with no gradient computed), so the check could not "
                    "test what it sees")
        shown = f"steps {self.plant_step + 1} to {step}" if step > self.plant_step + 1 \
            else f"step {step}"
        return (f"a 1-ulp change planted in {self._what()} did not show at {shown} in "
                f"{self._compared()} compared: the check cannot see a change there")

    def _blind_metrics(self, ended: int | None = None) -> str:
        names = [n for n in sorted(self.ref_metrics) if not self.skips_metric(n)]
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        if not names:
            tail = "no final metric is compared"
        else:
            tail = f"the final metric{'s' if len(names) > 1 else ''} {shown} did not change"
        if self.ref_saved and self.plant_step > 0:
            tensors = sum(r.count for r in self.ref_saved)
            tail += f", nor did what the run left ({tensors} saved tensor{'s' * (tensors != 1)})"
        if ended is not None:
            return (f"a 1-ulp change planted in {self._what()} did not show: the runs end at "
                    f"step {ended}, and {tail}")
        return (f"a 1-ulp change planted in {self._what()} did not show: {tail}, and no "
                "training step was recorded; the verdict rests on values that cannot see such "
                "a change")

    def result(self, seconds: float = 0.0, trace: str | None = None) -> ControlResult:
        if self.seen is not None:
            step, signal = self.seen
            return ControlResult("seen", reference=self.reference, planted=self.planted,
                                 seen_step=step, seen_signal=signal, seconds=seconds, trace=trace)
        return ControlResult("not seen", reference=self.reference, planted=self.planted,
                             detail=self.not_seen or "the control run recorded nothing to compare",
                             seconds=seconds, trace=trace)
