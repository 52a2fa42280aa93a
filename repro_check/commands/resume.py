"""``resume``: does a run stopped at a checkpoint and resumed match the run that never stopped?

Three runs under the same seeding: the **reference**, uninterrupted, and the **interrupted**
run, stopped right after the first checkpoint it writes at or after step ``--at`` (its copy kept
in the trace folder), go in parallel; then the **resumed** run, a fresh process with
``--resume-args`` appended to the target's arguments (``{checkpoint}`` replaced by the copy's
path). The resumed run's step ``i`` is compared with the reference's step ``C + i``, and its
final metrics with the reference's. Before that the interrupted run is compared with the
reference up to ``C``: when they differ the reference is not reproducible itself, and no
checkpoint is blamed.

No DataLoader gets a generator of repro-check's in these runs (the ``dataloader`` seeding
component only seeds the workers): the script could not save that generator, and a correct
resume would look wrong.

Above the runner (:mod:`repro_check.run`) and ``check`` (:mod:`repro_check.commands.check`), whose
report it finishes; what each run is told of its part is the
:class:`~repro_check.trace.protocol.ResumeSettings` of its :class:`RunConfig`.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any

from repro_check.compare import resume as attribution
from repro_check.compare.control import ControlResult, Planted, skipped
from repro_check.compare.feed import NullListener
from repro_check.compare.steps import Comparison, ComparisonResult, Policy
from repro_check.distributed.compare import first_rank
from repro_check.report.model import CheckpointFile, CheckpointInfo, Report, ResumePart
from repro_check.run import control
from repro_check.run.options import PLAIN, InternalSettings, RunOptions
from repro_check.run.replay import replay_line
from repro_check.run.runner import RunSpec
from repro_check.run.session import Outcome, Session, described, failure
from repro_check.trace import values
from repro_check.trace.payloads import CheckpointNote, SaveNote
from repro_check.trace.protocol import (CheckpointedInfo, MetricsRecord, Record, ResumeSettings,
                                        SaveInfo, StepRecord)
from repro_check.trace.results import Listener, RunResult
from repro_check.commands.check import finished_report
from repro_check.commands.shape import RunShape, shape_of
from repro_check.commands.skeleton import GivenCommand, Planned

#: points kept of each loss curve for the reports
CURVE_POINTS = 2000
#: the placeholder in ``--resume-args``
PLACEHOLDER = "{checkpoint}"
#: the reference's later checkpoints moved aside before the resumed run, at most
MAX_MOVED = 1000


class ResumeRecords:
    """The records of a resume's runs, as the session's listener: keeps every step, the metrics and the checkpoint records of the runs (a resume compares
    after the fact: the step the resumed run starts from is known only once the interrupted run
    saved), each run's by rank under torchrun (``None``: a plain run), and passes events on to
    the caller's listener."""

    def __init__(self, listener: Listener | None) -> None:
        self.listener = listener or NullListener()
        #: run -> rank -> step -> signals
        self.steps: dict[int, dict[int | None, dict[int, dict[str, Any]]]] = {}
        #: run -> rank -> metrics
        self.metrics: dict[int, dict[int | None, dict[str, Any]]] = {}
        self.checkpoint: dict[int, CheckpointNote] = {}
        self.saves: dict[int, list[int]] = {}
        #: path -> the last step the reference saved there after (bounded)
        self.reference_saves: dict[str, int] = {}
        #: paths the resumed run saved to (bounded): moved aside before the control's run
        self.resumed_saves: list[str] = []
        self.uses_dataloader = False

    def run_started(self, index: int) -> None:
        self.listener.run_started(index)

    def event(self, index: int, event: Record) -> None:
        if isinstance(event, StepRecord):
            self.steps.setdefault(index, {}).setdefault(event.rank, {})[event.step] = \
                event.signals
            self.uses_dataloader = self.uses_dataloader or "batch" in event.signals
        elif isinstance(event, MetricsRecord):
            self.metrics.setdefault(index, {}).setdefault(event.rank, {}).update(event.metrics)
        elif isinstance(event, CheckpointedInfo):
            self.checkpoint.setdefault(index, event.checkpoint)
        elif isinstance(event, SaveInfo):
            self._saved(index, event.save)
        self.listener.event(index, event)

    def _saved(self, index: int, save: SaveNote) -> None:
        """A save of run ``index`` that was not the checkpoint: its step kept, the paths the
        reference and the resumed run saved to noted (bounded)."""
        step, path = save.step, save.path
        if step is not None and len(self.saves.setdefault(index, [])) < 20:
            self.saves[index].append(step)
        if index == 1 and step is not None and path is not None and (
                path in self.reference_saves or len(self.reference_saves) < MAX_MOVED):
            self.reference_saves[path] = step
        if index == 3 and path is not None and path not in self.resumed_saves \
                and len(self.resumed_saves) < MAX_MOVED:
            self.resumed_saves.append(path)

    def run_finished(self, result: RunResult) -> None:
        self.listener.run_finished(result)

    def ranks(self, index: int) -> list[int | None]:
        """The ranks run ``index`` recorded steps or metrics of (``[None]``: a plain run)."""
        found = set(self.steps.get(index, {})) | set(self.metrics.get(index, {}))
        return sorted(found, key=lambda r: -1 if r is None else r) or [None]

    def steps_of(self, index: int, rank: int | None) -> dict[int, dict[str, Any]]:
        return self.steps.get(index, {}).get(rank, {})

    def metrics_of(self, index: int, rank: int | None) -> dict[str, Any]:
        return self.metrics.get(index, {}).get(rank, {})


def _checkpoint_info(note: CheckpointNote) -> CheckpointInfo:
    """The report's account of the checkpoint the interrupted run took."""
    return CheckpointInfo(step=note.step, path=note.path, copy=note.copy, kind=note.kind,
                          keys=list(note.keys), kinds=dict(note.kinds), rng=list(note.rng),
                          stopped_after=note.stopped_after,
                          files=[CheckpointFile(f.path, f.copy) for f in note.files]
                          if note.files is not None else None)


def _compare(ref: dict[int, dict[str, Any]], other: dict[int, dict[str, Any]], *, first: int,
             last_ref: int, offset: int, other_steps: int, policy: Policy,
             metrics: tuple[dict[str, Any], dict[str, Any]] | None,
             complete: bool = True) -> ComparisonResult:
    """The reference's steps ``first..last_ref`` against ``other``'s steps numbered ``+offset``."""
    cmp = Comparison(2, policy)
    for step in range(first, last_ref + 1):
        if step in ref:
            cmp.add_step(1, step, ref[step])
    for step in sorted(other):
        if step + offset >= first:
            signals = {k: v for k, v in other[step].items()
                       if k not in (attribution.PARAMS_IN, "init")}
            cmp.add_step(2, step + offset, signals)
    cmp.end(1, last_ref)
    cmp.end(2, other_steps + offset, complete=complete)
    if metrics is not None:
        cmp.set_metrics(1, metrics[0])
        cmp.set_metrics(2, metrics[1])
    return cmp.result()


def compare_by_rank(feed: ResumeRecords, other: int, *, first: int, last_ref: int, offset: int,
                    other_steps: int, policy: Policy, metrics: bool
                    ) -> tuple[ComparisonResult, int | None]:
    """The reference (run 1) against run ``other``, rank by rank (one comparison for a plain
    run): the comparison of the rank whose divergence comes first, as a check picks it
    (:func:`~repro_check.distributed.compare.first_rank`), and that rank."""
    per_rank = {rank: _compare(feed.steps_of(1, rank), feed.steps_of(other, rank), first=first,
                               last_ref=last_ref, offset=offset, other_steps=other_steps,
                               policy=policy, metrics=(feed.metrics_of(1, rank),
                                                       feed.metrics_of(other, rank))
                               if metrics else None)
                for rank in feed.ranks(1)}
    rank = first_rank(per_rank)
    return per_rank[rank], rank


def _curve(steps: dict[int, dict[str, Any]], offset: int = 0) -> list[tuple[int, float]]:
    out = []
    for step in sorted(steps):
        loss = steps[step].get("loss")
        if isinstance(loss, dict):
            try:
                out.append((step + offset, values.to_float(loss)))
            except (TypeError, ValueError):
                continue
    if len(out) > CURVE_POINTS:
        every = -(-len(out) // CURVE_POINTS)
        out = out[::every]
    return out


def no_checkpoint(at: int, steps: int, saves: list[int], pattern: str | None) -> str:
    """Why there is nothing to resume from: the steps the saves seen followed, or that none was
    seen (with ``--checkpoint``: no file matching it changed after a step)."""
    head = f"the script wrote no checkpoint at or after step {at} in {steps} steps"
    if saves:
        return f"{head}: it saved after step(s) {', '.join(map(str, sorted(set(saves))[:10]))}"
    if pattern:
        return (f"{head}: no file matching --checkpoint {pattern!r} was written after a step "
                "(a relative one is read from the folder the runs start in)")
    return (f"{head}: it saved none that repro-check could see (torch.save, safetensors, "
            "torch.distributed.checkpoint, Lightning, the HF Trainer; name the file with "
            "--checkpoint PATH_OR_GLOB)")


def _put_back(copy: str, path: str) -> None:
    """The copy put back where the script saved it, for a script that finds its own checkpoint
    (the reference may have written that path since)."""
    try:
        if os.path.isdir(copy):
            if os.path.isdir(path):
                shutil.rmtree(path)
            shutil.copytree(copy, path, symlinks=True)
        else:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            shutil.copy2(copy, path)
    except OSError:
        pass  # the resumed run reads what is there; a failure to read shows as its own


def move_aside(feed: ResumeRecords, info: CheckpointInfo, folder: Path) -> list[str]:
    """The checkpoints the reference saved after the checkpoint's step, at other paths than its
    files (``out/checkpoint-8`` beside ``out/checkpoint-4``), moved into ``folder``: a script
    that finds its own checkpoint (the HF Trainer's ``resume_from_checkpoint=True``, Lightning's
    ``ckpt_path="last"``, "the newest file in out/") would take one of those, written by this
    command's reference, for the one to resume from. Returns the paths moved."""
    keep = {info.path.rstrip(os.sep)} | {f.path.rstrip(os.sep) for f in info.files or []}
    later = sorted(p for p, step in feed.reference_saves.items()
                   if step > info.step and p.rstrip(os.sep) not in keep)
    moved = []
    for i, path in enumerate(later):
        if not os.path.lexists(path) or any(path.startswith(k + os.sep) for k in keep):
            continue
        try:
            os.makedirs(folder, exist_ok=True)
            shutil.move(path, folder / f"{i + 1}-{os.path.basename(path.rstrip(os.sep))}")
        except OSError:
            continue  # left where it is: the resumed run may find it
        moved.append(path)
    return moved


def _told(spec: RunSpec, resume: ResumeSettings, **changes: Any) -> RunSpec:
    """``spec`` with its run told its part in the resume (and ``changes`` to what it is told)."""
    return dataclasses.replace(spec, told=spec.told.replace(resume=resume, **changes))


#: what the resume's runs are called where they fail
CALLED = {1: "the reference (run 1)", 2: "the interrupted run (run 2)",
          3: "the resumed run (run 3)"}


def run_resume(options: RunOptions, listener: Listener | None = None,
               internal: InternalSettings = PLAIN) -> Report:
    """The reference and the interrupted run in parallel, then the resumed run; the report of the
    comparison (``report.resume``: the checkpoint, what it holds, what was not restored).

    Raises :class:`UsageError` (exit 2) for bad options or a TARGET that cannot be resolved; a
    run that fails, a script that saves no checkpoint at or after ``--at``, a checkpoint that
    vanished are ``report.error`` (exit 3). ``internal``: the API's ``policy=``."""
    options.validate_resume()
    at = options.resume_at
    assert at is not None
    policy = options.policy(internal.policy_override)
    options = options.replace(runs=2, fail_fast=False)
    # under torchrun each run is a job, every rank recorded; the checkpoint is the first save of
    # any rank (rank 0's, as usual)
    shape = shape_of(options, 2)
    session = Session(options, runs=2, launcher=shape.launcher, share_threads=True,
                      internal=internal)
    # the reference and the interrupted run save one at a time: they write the same paths
    base = ResumeSettings("reference", checkpoint=options.checkpoint,
                          lock=str(session.folder / "saves.lock"))
    jobs = shape.jobs(options.jobs, session)
    serial = "one job" if jobs < 2 else None
    if options.checkpoint:
        # a --checkpoint file is noticed only as the next step starts, and its write is no save
        # repro-check sees (so none the runs take in turn): the reference, going in step, could
        # write the same file meanwhile. The reference goes first, then the interrupted run.
        jobs, serial = 1, "--checkpoint: the reference could write the file taken meanwhile"
    reference, interrupted = session.specs(jobs)
    specs = [dataclasses.replace(_told(reference, base),
                                 trace_path=session.folder / "run-1-reference.jsonl"),
             dataclasses.replace(_told(interrupted, dataclasses.replace(
                 base, role="interrupted", stop_at=at, copy_dir=str(session.folder / "checkpoint"))),
                 trace_path=session.folder / "run-2-interrupted.jsonl")]
    feed = ResumeRecords(listener)
    outcome = session.run(feed, jobs, specs=specs,
                          stop_run=shape.stop_run(lambda i: i == 2 and 2 in feed.checkpoint))
    resume = Resume(options, policy, shape, session, feed, reference, base,
                    ResumePart(at=at, resume_args=options.resume_args, serial=serial))
    return resume.after_first_runs(outcome)


class Resume:
    """The resume once the reference and the interrupted run ended: the checkpoint, the resumed
    run, their comparison and the report, built of its parts at whichever point it ends."""

    def __init__(self, options: RunOptions, policy: Policy, shape: RunShape, session: Session,
                 feed: ResumeRecords, reference: RunSpec, base: ResumeSettings,
                 part: ResumePart) -> None:
        self.options = options
        self.policy = policy
        self.shape = shape
        self.session = session
        self.feed = feed
        self.reference = reference
        self.base = base
        self.part = part
        self.results: list[RunResult] = []
        self.interrupted = False

    def report(self, result: ComparisonResult | None = None, error: str | None = None) -> Report:
        """The report of the runs so far, with the comparison ``result`` (None: none made) and
        ``error`` (the command's own: None leaves the runs')."""
        options, results = self.options, self.results
        extra = ["--at", str(self.part.at)]
        if options.resume_args is not None:
            # one word when it starts with a dash (--resume-args=--init_from=resume): argparse
            # would take a dashed value after a space for a flag of its own
            extra += [f"--resume-args={options.resume_args}"] \
                if options.resume_args.startswith("-") else ["--resume-args", options.resume_args]
        if options.checkpoint:
            extra += ["--checkpoint", options.checkpoint]
        extra += self.shape.cli_args()
        self.part.steps = {name: r.steps for name, r in zip(
            ("reference", "interrupted", "resumed"), results)}
        return finished_report(
            options, Outcome(results, self.interrupted, self.session.folder), result,
            self.policy, self.feed.uses_dataloader, runs=len(results), shape=self.shape,
            error=error, resume=self.part,
            replay=replay_line(options, subcommand="resume", extra=extra))

    def after_first_runs(self, outcome: Outcome) -> Report:
        """The checkpoint the interrupted run saved, the reference up to it compared with the
        interrupted run, then the resumed run."""
        feed, part, options = self.feed, self.part, self.options
        self.results = results = list(outcome.results)
        self.interrupted = outcome.interrupted
        if outcome.interrupted:
            return self.report()
        if any(r.failed for r in results):
            return self.report(error=failure(results, Comparison(2).result(), CALLED))
        record = feed.checkpoint.get(2)
        if record is None:
            return self.report(error=no_checkpoint(
                part.at, results[1].steps, feed.saves.get(2, []) + feed.saves.get(1, []),
                options.checkpoint))
        part.checkpoint = info = _checkpoint_info(record)
        part.earlier_saves = feed.saves.get(2, [])
        if record.error or info.copy is None:
            return self.report(error=record.error or "the checkpoint was not copied")
        c, ref_steps = info.step, results[0].steps
        if c >= ref_steps:  # a save after the last step: a resume from it would compare nothing
            return self.report(error=(
                f"the script's first checkpoint at or after step {part.at} was written after "
                f"step {c}, its last ({ref_steps} steps): nothing is left to resume (give a "
                "smaller --at, or save during training)"))
        prefix, rank = compare_by_rank(feed, 2, first=1, last_ref=c, offset=0,
                                       other_steps=min(results[1].steps, c), policy=self.policy,
                                       metrics=False)
        part.reference_reproducible = prefix.divergence is None
        if not part.reference_reproducible:
            part.curves = {"reference": _curve(feed.steps_of(1, rank)),
                           "interrupted": _curve(feed.steps_of(2, rank))}
            return self.report(prefix)
        if not os.path.exists(info.copy):
            return self.report(error=f"the checkpoint's copy {info.copy} vanished before the "
                                     "resumed run could start")
        return self.resumed(info)

    def resumed(self, info: CheckpointInfo) -> Report:
        """The checkpoint put back, the resumed run, its comparison with the reference from the
        checkpoint on, and the control behind a match."""
        feed, part, options, results = self.feed, self.part, self.options, self.results
        assert info.copy is not None
        if options.resume_args is None or PLACEHOLDER not in options.resume_args:
            _put_back(info.copy, info.path)
            part.moved_aside = move_aside(feed, info, self.session.folder / "later-checkpoints")
        for other in info.files or []:  # the checkpoint's other files, where the script wrote them
            if other.copy is not None and other.path != info.path:
                _put_back(other.copy, other.path)
        c, ref_steps = info.step, results[0].steps
        resumed_told = dataclasses.replace(self.base, role="resumed")
        resumed_spec = dataclasses.replace(
            _told(self.reference, resumed_told, run=3,
                  args=tuple(options.resumed_args(info.copy)),
                  max_steps=options.max_steps - c if options.max_steps is not None else None),
            trace_path=self.session.folder / "run-3-resumed.jsonl")
        second = self.session.run(feed, 1, specs=[resumed_spec])
        results.append(second.results[0] if second.results else RunResult(3, status="cancelled"))
        if second.interrupted:
            self.interrupted = True
            return self.report()
        resumed = results[2]
        if resumed.failed:
            args = f" with --resume-args {options.resume_args!r}" if options.resume_args else ""
            return self.report(error=f"{described(resumed, CALLED)}{args}")
        result, rank = compare_by_rank(feed, 3, first=c + 1, last_ref=ref_steps, offset=c,
                                       other_steps=resumed.steps, policy=self.policy,
                                       metrics=True)
        ref, mine = feed.steps_of(1, rank), feed.steps_of(3, rank)
        result.metrics = {1: feed.metrics_of(1, rank), 2: {}, 3: feed.metrics_of(3, rank)}
        part.curves = {"reference": _curve(ref), "resumed": _curve(mine, c)}
        if result.divergence is not None or result.metric_divergences:
            part.not_restored = attribution.attribute(
                ref, mine, c, ref_steps, resumed.steps, result.first_divergent_step,
                resumed.generators)
        report = self.report(result)
        if not report.agrees:
            return report
        # Megatron's control: a resume that leaves a state out must differ
        control = ResumeControl(options, self.session, feed, info, self.policy, self.shape)
        checked, stopped = control.run(_told(self.reference, resumed_told, run=4,
                                             args=tuple(options.resumed_args(info.copy))),
                                       ref_steps)
        return dataclasses.replace(report, control=checked, interrupted=stopped)


#: resumed steps the control's run goes: the first after the checkpoint, and the next
CONTROL_STEPS = 2


class ResumeControl:
    """The negative control of a resume that matched (:mod:`repro_check.child.seeding.control`): the
    resumed run again, leaving out on purpose one state the checkpoint restores (the RNG state
    where it holds one the runs draw from after the checkpoint, else the optimizer's). It must
    differ from the reference within :data:`CONTROL_STEPS` resumed steps (on exact bits, in the
    signals compared), or the resume verdict is not verified: the comparison could not have
    told a resume that restores that state from one that does not."""

    def __init__(self, options: RunOptions, session: Session, feed: ResumeRecords,
                 info: CheckpointInfo, policy: Policy, shape: RunShape) -> None:
        self.options = options
        self.session = session
        self.feed = feed
        self.info = info
        self.policy = policy
        self.shape = shape

    def state(self) -> str | None:
        """What to leave out: the RNG state when the checkpoint holds one (or what it holds
        cannot be seen: a restore the resumed run makes is left out) and the reference draws
        after the checkpoint (its steps record an ``rng.*`` signal), else the optimizer's (also
        when what the checkpoint holds cannot be seen); None when it holds neither."""
        kinds = set(self.info.kinds.values())
        after = [sig for step, sig in self.feed.steps_of(1, None).items()
                 if step > self.info.step]
        draws = any(name.startswith("rng.") for sig in after for name in sig)
        if ("rng" in kinds or not kinds) and draws:  # unseen contents: a restore it makes
            return "rng"
        if "optimizer" in kinds or not kinds:
            return "optimizer"
        return None

    def run(self, spec: RunSpec, ref_steps: int) -> tuple[ControlResult, bool]:
        """Run the control from ``spec`` (the resumed run's); its result, and whether Ctrl-C or
        SIGTERM stopped it."""
        if not self.options.control:
            return skipped(control.SKIPPED, "reference"), False
        if (why := self.shape.no_control("resume")) is not None:
            return skipped(why, "reference"), False
        state = self.state()
        if state is None:
            return skipped("the checkpoint holds no RNG or optimizer state to leave out",
                           "reference"), False
        c = self.info.step
        self._restore_checkpoint()
        left = ref_steps - c
        limit = min(left, CONTROL_STEPS)
        assert spec.told.resume is not None
        spec = dataclasses.replace(
            spec, told=spec.told.replace(
                resume=dataclasses.replace(spec.told.resume, leave_out=state),
                max_steps=limit if limit < left else (
                    self.options.max_steps - c if self.options.max_steps is not None else None)),
            trace_path=self.session.folder / "run-4-control.jsonl")
        what = {"rng": "the RNG state", "optimizer": "the optimizer state"}[state]
        planted = Planted(tensor=f"{what} the checkpoint restores", where="resume", step=c)
        outcome = self.session.run(self.feed, 1, specs=[spec])
        if outcome.interrupted:
            return skipped("interrupted", "reference"), True
        run = outcome.results[0] if outcome.results else RunResult(4, status="cancelled")
        trace = run.trace_path
        if run.failed:
            return ControlResult("seen", reference="reference", planted=planted,
                                 seen_step=None, seen_signal="failed",
                                 detail=run.describe_failure(), seconds=round(run.seconds, 3),
                                 trace=trace), False
        exact = Policy(signals=self.policy.signals, always_metrics=self.policy.always_metrics)
        whole = limit >= left  # the control went to the end: its final metrics count too
        result, _ = compare_by_rank(self.feed, 4, first=c + 1, last_ref=c + min(limit, left),
                                    offset=c, other_steps=run.steps, policy=exact,
                                    metrics=whole)
        div = result.divergence or (result.metric_divergences[0]
                                    if result.metric_divergences else None)
        if div is not None:
            return ControlResult("seen", reference="reference", planted=planted,
                                 seen_step=div.step, seen_signal=div.signal,
                                 seconds=round(run.seconds, 3), trace=trace), False
        steps = "step" if limit == 1 else f"{limit} steps"
        return ControlResult(
            "not seen", reference="reference", planted=planted,
            detail=f"a resumed run that leaves {what} out agrees with the reference over its "
                   f"first {steps} after the checkpoint{' and its final metrics' if whole else ''}"
                   f": the resume check cannot tell whether the checkpoint restores {what}",
            seconds=round(run.seconds, 3), trace=trace), False

    def _restore_checkpoint(self) -> None:
        """The checkpoint back where the script saved it, as before the resumed run (which may
        have saved over it), and the resumed run's later saves moved aside."""
        info = self.info
        if info.copy is None:
            return
        if self.options.resume_args is None or PLACEHOLDER not in self.options.resume_args:
            keep = {info.path.rstrip(os.sep)} | {f.path.rstrip(os.sep) for f in info.files or []}
            aside = self.session.folder / "later-checkpoints-resumed"
            for i, path in enumerate(self.feed.resumed_saves):
                if path.rstrip(os.sep) in keep or not os.path.lexists(path):
                    continue
                try:
                    os.makedirs(aside, exist_ok=True)
                    shutil.move(path, aside / f"{i + 1}-{os.path.basename(path.rstrip(os.sep))}")
                except OSError:
                    continue
            _put_back(info.copy, info.path)
        for other in info.files or []:
            if other.copy is not None and other.path != info.path:
                _put_back(other.copy, other.path)


def trace_folder(report: Report) -> Path | None:
    return Path(report.trace_dir) if report.trace_dir else None


class ResumeCommand(GivenCommand):
    """``resume``: each planned target stopped at a checkpoint, resumed, and compared with the
    run that never stopped."""

    name = "resume"
    timed = True

    def describe(self, planned: Planned) -> str:
        return f"resuming {planned.target}"

    def run(self, planned: Planned) -> Report:
        options = self.given.options(planned.target, planned.entry)
        options.validate_resume()  # --at missing: one line before the progress display
        with self.given.progress(options, 3) as listener:
            return run_resume(options, listener, self.given.internal)
