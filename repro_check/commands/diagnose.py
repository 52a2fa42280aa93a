"""``repro_check.commands.diagnose``: why a training run is not reproducible, and what its seeding needs.

Three stages, each a set of paired runs like the check's:

1. **The check** under full seeding (less ``without``), with deterministic algorithms in warn-only mode so that ops
   PyTorch knows to be nondeterministic are listed (with the step they first ran at) instead of
   stopping the run. Its first divergence gives the root cause (:mod:`repro_check.compare.cause`).
2. **Localization** of a ``compute`` divergence: two fresh runs with the same seeding replay up to
   the first divergent step and record, at that step only, every op and every module's output
   and output gradient (:mod:`repro_check.child.observe.probe`); :mod:`repro_check.diagnose.localize` names the first
   op whose result differs and the module that ran it. A random op that drew different numbers
   from the same inputs makes the cause ``rng`` (its generator differs, not the op); when every
   op agrees and the thread count was not pinned, threads are named as the likely cause.
3. **A seeding ablation**, when the check is reproducible: for each component a pair with only
   that component off, then a pair with no seeding at all. A component is *needed* for this
   workload when the pair without it is not reproducible. Runs of the ablation stop as soon as
   their first divergence is known (fail-fast): only the verdict is used.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro_check.trace.payloads import Flagged
from repro_check.trace import seeding
from repro_check.diagnose.localize import Localization, compare, env_call_before
from repro_check.diagnose.sources import DEFAULT_MAX_SOURCES, find_sources, plan
from repro_check.errors import UsageError
from repro_check.report.contents import AblationRow, FlaggedOp, Need, PairResult
from repro_check.report.model import DiagnosisPart, Report
from repro_check.commands.check import run_check
from repro_check.commands.skeleton import Planned
from repro_check.run.options import InternalSettings, RunOptions, options_of
from repro_check.compare.feed import NullListener
from repro_check.run.session import make_trace_dir
from repro_check.trace.probes import ProbeOp
from repro_check.trace.protocol import FlaggedRecord, ProbeRecord, Record
from repro_check.trace.results import Listener, RunResult

Log = Callable[[str], None]


def verdicts(full: PairResult, without: dict[str, PairResult]) -> dict[str, Need]:
    """``needed`` / ``not needed`` / ``unknown`` per component.

    Only a reproducible full-seeding pair is a baseline: a component is needed when the pair
    without it is not reproducible, not needed when it is, unknown when that pair failed.
    """
    out: dict[str, Need] = {}
    for name, pair in without.items():
        if not full.reproducible or pair.error is not None:
            out[name] = "unknown"
        else:
            out[name] = "not needed" if pair.reproducible else "needed"
    return out


class ProbeCollector:
    """Keeps each run's probe and flagged records and passes every event on.

    Probes are kept per run and rank (``(run, rank)``; rank 0 for a run without torchrun)."""

    def __init__(self, inner: Listener | None = None) -> None:
        self.inner = inner or NullListener()
        self.probes: dict[tuple[int, int], list[ProbeOp]] = defaultdict(list)
        self.flagged: dict[int, list[Flagged]] = defaultdict(list)

    def run_started(self, index: int) -> None:
        self.inner.run_started(index)

    def event(self, index: int, event: Record) -> None:
        if isinstance(event, ProbeRecord):
            if event.probe is not None:
                self.probes[(index, event.rank or 0)].append(event.probe)
            return
        if isinstance(event, FlaggedRecord):
            self.flagged[index].append(event.flagged)
        self.inner.event(index, event)

    def run_finished(self, result: RunResult) -> None:
        self.inner.run_finished(result)


def flagged_ops(collected: Mapping[int, Sequence[Flagged | Mapping[str, object]]]
                ) -> list[FlaggedOp]:
    """Every op any run flagged, once, with the earliest step and the runs that flagged it (a
    record given as the mapping a trace line holds is read first)."""
    ops: dict[str, FlaggedOp] = {}
    for run, given in sorted(collected.items()):
        for rec in map(Flagged.parse, given):
            entry = ops.setdefault(rec.op, FlaggedOp(rec.op, rec.step, rec.where))
            if rec.step is not None and (entry.step is None or rec.step < entry.step):
                entry.step, entry.where = rec.step, rec.where
            if run not in entry.runs:
                entry.runs.append(run)
    return sorted(ops.values(), key=lambda e: (e.step or 0, e.op))


def diagnose(
    options: RunOptions | str,
    *,
    ablate: Sequence[str] | None = None,
    localize: bool = True,
    max_sources: int = DEFAULT_MAX_SOURCES,
    keep_replay: bool = False,
    listener: Listener | None = None,
    log: Log | None = None,
    **run_options: Any,
) -> Report:
    """The check, the localization of a compute divergence, and the seeding ablation.

    ``options`` is a :class:`RunOptions`, or a TARGET with the run options as keywords.
    ``options.without``: components off in every pair (the baseline is full seeding less these).
    ``ablate``: the components to test one by one (default: every component that is on; an empty
    list skips the ablation). Returns the check's :class:`Report` with its ``diagnosis`` part
    (``culprit``, ``culprit_op``, ``localization``, ``flagged_ops``, ``ablation``,
    ``necessary_components`` in the JSON). ``max_sources``: how many sources to look for by
    pinning each and going on (``sources``; 0 looks no further than the first divergence);
    ``keep_replay`` keeps what the pinned pairs replayed. Raises :class:`UsageError` for bad arguments.
    """
    if isinstance(options, str):
        options = options_of(options, **run_options)
    elif run_options:
        raise TypeError("give the run options in RunOptions or as keywords, not both")
    check_options(options.no_seed)
    say = log or (lambda text: None)
    if isinstance(max_sources, bool) or not isinstance(max_sources, int) or max_sources < 0:
        raise UsageError(f"--max-sources must be a whole number from 0, got {max_sources!r}")
    setup = DiagnosisSetup.of(options, ablate)
    report, part = _first_check(setup, max_sources, listener, say)
    if report.error is not None or report.interrupted:
        return dataclasses.replace(report, diagnosis=part)
    warnings = list(report.warnings)
    if localize and report.first_divergent_step is not None and _localizable(report):
        loc, note = _localize(report.first_divergent_step, setup.folder, setup.common,
                              setup.internal, say)
        if loc is not None:
            report = explain_localization(report, part, loc)
        if note:
            warnings.append(note)
    if max_sources:
        find_sources(report, part, setup.common, setup.internal, setup.folder, say,
                     lambda step, opts, inner, where: _localize(step, where, opts, inner, say),
                     max_sources, keep_replay,
                     check=lambda options, pinned: run_check(options, internal=pinned))
    if setup.components:
        _ablation(report, part, setup.components, setup.base_off, setup.baseline, setup.common,
                  setup.internal, setup.folder, say)
    return dataclasses.replace(report, diagnosis=part, warnings=warnings)


@dataclass(frozen=True)
class DiagnosisSetup:
    """What every pair of a diagnosis shares, decided (and checked) before any run."""

    #: components off in every pair, and the baseline they make (``full seeding`` when none)
    base_off: list[str]
    baseline: str
    #: the components the ablation tests one by one
    components: list[str]
    common: RunOptions
    internal: InternalSettings
    folder: Path

    @classmethod
    def of(cls, options: RunOptions, ablate: Sequence[str] | None) -> DiagnosisSetup:
        """The setup of ``options``; a :class:`UsageError` for unknown components, or an
        ablation with every component off."""
        base_off = list(options.without or ())
        on = seeding.select_components(base_off)  # unknown names: one clear line
        seeding.select_components(ablate or ())
        components = [c for c in (on if ablate is None else ablate) if c not in base_off]
        if not on and components:
            raise UsageError("every seeding component is off: there is nothing to ablate")
        folder = make_trace_dir(options.trace_dir)
        # diagnose looks for what differs; the negative control stands behind a check's verdict
        common = options.replace(runs=2, no_seed=False, fail_fast=False,
                                 without=tuple(base_off), control=False)
        baseline = "full seeding" if not base_off else f"seeding without {', '.join(base_off)}"
        # every run of the diagnosis lists the ops PyTorch flags instead of stopping at the first
        return cls(base_off, baseline, components, common, InternalSettings(warn_only=True),
                   folder)


def _first_check(setup: DiagnosisSetup, max_sources: int, listener: Listener | None,
                 say: Log) -> tuple[Report, DiagnosisPart]:
    """The check's pair (planned for the sources when they are looked for), and the diagnosis
    part it starts: the ops PyTorch flagged."""
    collector = ProbeCollector(listener)
    say(f"check: two runs under {setup.baseline} (deterministic algorithms in warn-only mode)")
    first_options, first_internal = plan(setup.common, setup.internal, setup.folder / "check",
                                         []) if max_sources else \
        (setup.common.replace(trace_dir=str(setup.folder / "check")), setup.internal)
    report = run_check(first_options, collector, first_internal)
    return report, DiagnosisPart(flagged_ops=flagged_ops(collector.flagged))


def _localizable(report: Report) -> bool:
    """A divergence inside the step's computation: ``compute``, or a private generator's draws
    (``rng`` first seen in the loss, gradients or update: the op that drew is named)."""
    if report.cause == "compute":
        return True
    return report.cause == "rng" and report.cause_location is not None and \
        report.divergent_signal in ("loss", "grads", "params", "updated") and not _seeding_call(report)


def _seeding_call(report: Report) -> bool:
    """Whether the cause's location is a seeding call the watch saw (a global stream reseeded
    from the clock or entropy): the source is known to its line, no op needs naming."""
    loc = report.cause_location
    return loc is not None and any(o.where is not None and o.where.site == loc.site
                                   for r in report.results for o in r.overrides)


def _ablation(report: Report, part: DiagnosisPart, components: Sequence[str],
              base_off: list[str], baseline: str, common: RunOptions,
              internal: InternalSettings, folder: Path, say: Log) -> None:
    """A pair of runs with each component off, then one with no seeding at all; a component is
    needed when the pair without it is not reproducible (only the verdict is used: fail-fast)."""
    full = PairResult.of(baseline, base_off, report)
    if not report.reproducible:
        part.ablation_note = (
            f"seeding ablation skipped: the runs are not reproducible even under {baseline}, so "
            "no component can be judged (fix the cause above first)")
        return
    pairs: dict[str, PairResult] = {}
    total = len(components) + 1
    for k, name in enumerate(components, 1):
        say(f"ablation {k}/{total}: without {name}")
        off = [*base_off, name]
        rep = run_check(common.replace(without=tuple(off), fail_fast=True,
                                       trace_dir=str(folder / f"without-{name}")),
                        internal=internal)
        pairs[name] = PairResult.of(f"without {name}", off, rep)
        say(f"  {pairs[name].outcome()}")
    say(f"ablation {total}/{total}: no seeding")
    rep = run_check(common.unseeded(fail_fast=True, trace_dir=str(folder / "no-seeding")),
                    internal=internal)
    none_pair = PairResult.of("no seeding", list(seeding.COMPONENTS), rep)
    say(f"  {none_pair.outcome()}")
    needed = verdicts(full, pairs)
    rows = [AblationRow(component=name, verdict=needed[name], pair=pairs[name])
            for name in components]
    rows.append(AblationRow(component=None, verdict=None, pair=none_pair))
    part.ablation = rows
    part.necessary_components = [n for n in components if needed[n] == "needed"]
    part.ablation_note = _ablation_note(needed, none_pair, common.max_steps)


def _ablation_note(needed: dict[str, Need], none_pair: PairResult, max_steps: int | None) -> str:
    scope = f" within {max_steps} steps" if max_steps else ""
    if none_pair.error is not None:
        return f"the pair without seeding failed: {none_pair.error}"
    if none_pair.reproducible:
        return f"the runs reproduce{scope} even without any seeding on this machine"
    if not any(v == "needed" for v in needed.values()):
        return ("no single component is needed, yet the runs without any seeding differ"
                f"{scope}: components stand in for each other")
    return (f"a component is needed when the runs without it differ{scope}; 'not needed' holds "
            "for this workload on this machine, not in general")


#: what a localization that found nothing adds when the thread count was not pinned
THREADS_HINT = ("; yet the check's runs differed, and the thread count was not pinned: threads "
                "are the likely cause (the thread team of a parallel kernel, and so the order "
                "of its sums, can change from call to call); pin it with --threads N and keep "
                "the threads component on")


def explain_localization(report: Report, part: DiagnosisPart, loc: Localization) -> Report:
    """The localization put into the diagnosis ``part``, and the report it makes: a random op
    whose generator differs makes the cause ``rng`` (a new report; else ``report`` itself);
    nothing found with an unpinned thread count names threads."""
    env_call_before(loc, report.results)
    if loc.cause == "rng" and report.cause_location is None:  # else the generator is named
        # the env call, or where a value from outside torch entered
        report = dataclasses.replace(report, cause="rng", cause_detail=loc.detail,
                                     cause_location=loc.location or report.cause_location)
    elif not loc.found and not threads_pinned(report):
        loc.detail += THREADS_HINT
    part.localization = loc
    if loc.found:
        part.culprit, part.culprit_op = loc.module, loc.op
    return report


def threads_pinned(report: Report) -> bool:
    """Whether every run had one fixed thread count: the component on, and the script did not
    change it."""
    if report.threads is None:
        return False
    return not any(o.component == "threads" for r in report.results for o in r.overrides)


def _localize(step: int, folder: Path, common: RunOptions, internal: InternalSettings,
              say: Log) -> tuple[Localization | None, str | None]:
    """Replay two runs up to ``step`` recording that step; if they part earlier, record that step."""
    for attempt in range(2):
        say(f"localization: replaying two runs to step {step}, recording every op of that step")
        collector = ProbeCollector()
        rep = run_check(common.replace(max_steps=step,
                                       trace_dir=str(folder / f"localize-step-{step}")),
                        collector, internal.replace(probe_step=step))
        if rep.error is not None:
            return None, f"localization replay failed: {rep.error}"
        first = rep.first_divergent_step
        if first is not None and first < step and attempt == 0:
            step = first
            continue
        # a compute divergence: the batch agreed (it is compared before the loss); under
        # torchrun, on the rank where the difference entered
        div = rep.comparison.divergence if rep.comparison else None
        rank = (div.rank if div is not None else None) or 0
        loc = compare(step, collector.probes.get((1, rank), []),
                      collector.probes.get((2, rank), []), batch_agreed=True)
        if first is None or first > step:
            note = (f"the replay agreed through step {step}: the divergence did not recur, so the "
                    "localization may be incomplete")
            return loc, note
        return loc, None
    return None, None


def check_options(no_seed: bool) -> None:
    """``diagnose`` starts from seeding (less ``--without``); the ablation turns components off."""
    if no_seed:
        raise UsageError("diagnose starts from full seeding (--without A,B turns components off "
                         "in every run; --ablate A,B chooses the components the ablation tests)")


class DiagnoseCommand:
    """``diagnose``: why a target's runs diverge (the check, the op that first differs, every
    source, the seeding ablation), said as it goes."""

    name = "diagnose"
    timed = False

    def __init__(self, options: RunOptions, listener: Listener | None, log: Log | None, *,
                 ablate: Sequence[str] | None, localize: bool, max_sources: int,
                 keep_replay: bool) -> None:
        self.options, self.listener, self.log = options, listener, log
        self.ablate, self.localize = ablate, localize
        self.max_sources, self.keep_replay = max_sources, keep_replay

    def describe(self, planned: Planned) -> str:
        return f"diagnosing {planned.target}"

    def prepare(self, planned: Planned) -> None:
        pass

    def run(self, planned: Planned) -> Report:
        return diagnose(self.options, ablate=self.ablate, localize=self.localize,
                        max_sources=self.max_sources, keep_replay=self.keep_replay,
                        listener=self.listener, log=self.log)
