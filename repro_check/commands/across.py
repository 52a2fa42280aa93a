"""``--across``: the target run in several environments under the same seeding, every
environment compared with the first.

The runs of every environment go through one session and one streaming comparison (run 1 of
environment 1 is the reference of every run, so the check's keys and exit codes keep their
meaning), and each environment also gets a comparison of its own with the first, for its row:
identical or not, the first divergent step and signal. Then, for each pair that parts at a step,
a probe run of each side replays to that step and records every op of it, and the first op and
module whose result differs are named (:mod:`repro_check.diagnose.localize`). The loss drift of
each pair is read back from the traces (:mod:`repro_check.compare.drift`).

Environments go in parallel where they fit: a run needs its thread count of cores, and runs on
the GPU go one at a time. Runs compared across devices fingerprint CPU tensors with the device
digest, so equal bytes give equal fingerprints on both sides.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from repro_check.trace import environment
from repro_check.compare.drift import Drift, first_differences, loss_drift
from repro_check.compare.steps import Comparison, ComparisonResult, Policy
from repro_check.commands.diagnose import ProbeCollector
from repro_check.diagnose.localize import CodeSides, EnvironmentSides, Localization, compare
# named here too, beside the rest of --across (its tests find them here)
from repro_check.diagnose.localize import compile_detail as compile_detail
from repro_check.diagnose.localize import unmatched as unmatched
from repro_check.errors import TraceFileError, UsageError
from repro_check.report.contents import CompilePriceRow, MetricPair, PriceRow
from repro_check.report.model import (
    VERSION_KEYS,
    AcrossCell,
    AcrossPair,
    AcrossPart,
    BisectCommit,
    Report,
    plain_value,
)
from repro_check.run import revisions
from repro_check.run.axes import (
    CACHE_VARIABLES,
    cache_folders,
    Axis,
    Cell,
    check_cores,
    check_interpreters,
    cold_twin,
    grid,
    usable_cores,
)
from repro_check.commands.check import finished_report
from repro_check.commands.skeleton import GivenCommand, Planned
from repro_check.distributed.compare import signal_at
from repro_check.distributed.launch import Distributed
from repro_check.run.options import DistOptions, RunOptions
from repro_check.run.replay import replay_line
from repro_check.compare.feed import Feed
from repro_check.run.runner import RunSpec
from repro_check.run.session import Session
from repro_check.trace.results import Listener, RunResult
from repro_check.trace import values
from repro_check.trace.fingerprint import DEVICE_DIGEST_ENV
from repro_check.trace.probes import OpRun, ProbeInput, ProbeOp
from repro_check.trace.protocol import MetricsRecord, Record, SavedRecord, StepRecord

#: a probe record, typed or as the run wrote it (:func:`drop_transfers` keeps what it is given)
P = TypeVar("P", bound=ProbeInput)

Log = Callable[[str], None]

#: signals a CPU run and a GPU run both record (``rng.cuda`` exists on the GPU side only)
CROSS_DEVICE_SIGNALS = ("rng.python", "rng.numpy", "rng.torch", "batch", "loss", "grads",
                        "params", "updated")


#: what every rank of a data-parallel job holds alike, and a one-process run holds too: the
#: parameters going in and after each step, the gradients (averaged over the ranks), the
#: optimizer's state and learning rate. The batch, the loss and the RNG states are each rank's
#: own (rank 0 sees its share of the global batch).
ACROSS_RANKS_SIGNALS = ("init", "grads", "lr", "opt", "scaler", "params", "updated")


def across_ranks(policy: Policy) -> Policy:
    """``policy`` for cells of different process counts: their global signals only."""
    kept = frozenset(s for s in ACROSS_RANKS_SIGNALS if policy.compares(s))
    return dataclasses.replace(policy, signals=kept)


def cross_device(policy: Policy) -> Policy:
    """``policy`` for runs on different devices: what only one side can record is left out."""
    kept = frozenset(s for s in CROSS_DEVICE_SIGNALS if policy.compares(s))
    return dataclasses.replace(policy, signals=kept)


@dataclasses.dataclass
class Plan:
    """Which run of which environment each run index is, and where its trace goes."""

    cells: list[Cell]
    per_cell: int
    folder: Path
    device_digest: bool = False
    #: with a rev axis: the repository, and the checkout of each revision as written
    root: Path | None = None
    checkouts: dict[str, Path] = dataclasses.field(default_factory=dict)
    #: with a compile-cache axis: the folder that holds the caches each cold cell's first run
    #: fills for its warm twin (removed after the runs)
    caches: Path | None = None

    def cache_folder(self, cold: Cell) -> Path:
        """The compile caches the first run of ``cold`` fills and its warm twin's runs use."""
        assert self.caches is not None
        return self.caches / f"env-{cold.index}"

    def cache_env(self, cell: Cell, run: int) -> dict[str, str]:
        """Where a run's compile caches are, when the compile-cache axis decides it: the first
        run of a cold cell fills the shared caches, every run of a warm cell starts from them.
        The other runs get fresh caches of their own, as every run does."""
        if self.caches is None:
            return {}
        cold = cold_twin(cell, self.cells) if cell.warm else (cell if run == 1 else None)
        if cold is None:
            return {}
        return cache_folders(self.cache_folder(cold))

    def index(self, cell: int, run: int) -> int:
        return (cell - 1) * self.per_cell + run

    def locate(self, index: int) -> tuple[Cell, int]:
        return self.cells[(index - 1) // self.per_cell], (index - 1) % self.per_cell + 1

    def probe_env(self, cell: Cell, env: dict[str, str]) -> dict[str, str]:
        """A probe run's environment: a cold cell's probe starts from fresh compile caches (its
        first run's are filled by now), a warm cell's from the filled ones."""
        if self.caches is None or cell.warm:
            return env
        return {k: v for k, v in env.items() if k not in CACHE_VARIABLES}

    def specs(self, base: Sequence[RunSpec]) -> list[RunSpec]:
        """The session's specs, each set up for its environment."""
        out = []
        for spec in base:
            cell, run = self.locate(spec.index)
            env = {**spec.extra_env, **cell.environment(), **self.cache_env(cell, run)}
            if self.device_digest:
                env[DEVICE_DIGEST_ENV] = "1"
            told = spec.told.replace(threads=cell.threads or spec.told.threads,
                                     args=(*spec.told.args, *cell.args),
                                     components=tuple(cell.components(spec.told.components)),
                                     **cell.overrides())
            placed = dataclasses.replace(
                spec, told=told, executable=cell.executable, extra_env=env,
                trace_path=self.folder / f"env-{cell.index}-run-{run}.jsonl")
            if cell.nproc is not None:  # one torchrun job a run, rank 0 compared
                placed = dataclasses.replace(
                    placed, launcher=Distributed(DistOptions(nproc_per_node=cell.nproc), 1))
            rev = cell.value("rev")
            if rev is not None and self.root is not None:
                placed = revisions.relocate(placed, self.root, self.checkouts[rev])
            out.append(placed)
        return out


class Fits:
    """Which runs may go at the same time: each needs its thread count of cores (all of them
    when the count is not fixed), runs on the GPU go one at a time, and a warm run waits for
    the cold run that fills its compile caches (runs start in order, so that one has started)."""

    def __init__(self, cells: dict[int, Cell], cores: int,
                 fillers: dict[int, int] | None = None) -> None:
        self.cells = cells
        self.cores = cores
        #: run index -> the index of the run that fills its compile caches
        self.fillers = fillers or {}

    def cost(self, spec: RunSpec) -> int:
        ranks = self.cells[spec.index].nproc or 1
        return min(self.cores, (spec.told.threads or self.cores) * ranks)

    def __call__(self, spec: RunSpec, running: list[RunSpec]) -> bool:
        if self.cells[spec.index].uses_gpu and any(self.cells[r.index].uses_gpu
                                                   for r in running):
            return False
        filler = self.fillers.get(spec.index)
        if filler is not None and any(r.index == filler for r in running):
            return False
        return sum(self.cost(r) for r in running) + self.cost(spec) <= self.cores


def cache_fillers(plan: Plan) -> dict[int, int]:
    """Every run of a warm cell, with the run that fills its compile caches (its cold twin's
    first run)."""
    out: dict[int, int] = {}
    for cell in plan.cells:
        cold = cold_twin(cell, plan.cells)
        if cold is not None:
            for run in range(1, plan.per_cell + 1):
                out[plan.index(cell.index, run)] = plan.index(cold.index, 1)
    return out


@contextlib.contextmanager
def compile_caches(axes: Sequence[Axis]) -> Iterator[Path | None]:
    """A folder for the compile caches of a compile-cache axis (None without one), removed
    when the runs are done: cached kernels are no one else's."""
    if not any(a.kind == "compile-cache" for a in axes):
        yield None
        return
    folder = Path(tempfile.mkdtemp(prefix="repro-check-caches-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def cache_contents(folder: Path) -> tuple[int, int]:
    """Files and bytes under ``folder`` (nothing when it does not exist)."""
    files = size = 0
    for path, _, names in os.walk(folder):
        for name in names:
            try:
                size += os.lstat(os.path.join(path, name)).st_size
            except OSError:
                continue
            files += 1
    return files, size


def cache_notes(plan: Plan, by_index: dict[int, RunResult]) -> list[str]:
    """What each warm environment started from: the files its cold twin's first run left in
    the compile caches, or that it left none, so that the pair could not show a cache's effect."""
    if plan.caches is None:
        return []
    notes = []
    for cell in plan.cells:
        cold = cold_twin(cell, plan.cells)
        if cold is None:
            continue
        filler = by_index.get(plan.index(cold.index, 1))
        files, size = cache_contents(plan.cache_folder(cold))
        if filler is not None and filler.failed:
            notes.append(f"compile-cache: {cold.label} failed, so {cell.label} started from "
                         f"whatever its first run left in the compile caches ({files} file(s))")
        elif files:
            notes.append(f"compile-cache: {cell.label} started from the compile caches "
                         f"{cold.label} filled: {files} file(s), {size / 2**20:.1f} MiB")
        else:
            notes.append(f"compile-cache: {cold.label} left its compile caches empty (nothing "
                         f"was compiled, or the caches are off), so {cell.label} ran as cold as "
                         "it did: the pair could not show a cache's effect")
    return notes


class AcrossFeed(Feed):
    """The session's feed, with every event also passed to the comparisons its run is part of
    (as their run ``local``), and the time each run's first and last step arrived."""

    def __init__(self, comparison: Comparison, routes: dict[int, list[tuple[Comparison, int]]],
                 listener: Listener | None = None) -> None:
        super().__init__(comparison, listener)
        self.routes = routes
        self.first_at: dict[int, float] = {}
        self.last_at: dict[int, float] = {}
        #: seconds between consecutive steps of each run, as they arrived (their spread says
        #: how much a time per step can be trusted on a loaded machine)
        self.gaps: dict[int, list[float]] = {}

    def event(self, index: int, event: Record) -> None:
        """A torchrun job's rank 0 stands for its run (the others hold the same parameters,
        which the job's own ranks check); the other ranks' records go to the listener only."""
        if event.rank and isinstance(event, (StepRecord, MetricsRecord, SavedRecord)):
            self.listener.event(index, event)
            return
        super().event(index, event)

    def add_step(self, index: int, event: StepRecord) -> None:
        super().add_step(index, event)
        now = time.monotonic()
        if index in self.last_at:
            self.gaps.setdefault(index, []).append(now - self.last_at[index])
        self.first_at.setdefault(index, now)
        self.last_at[index] = now
        for cmp, local in self.routes.get(index, ()):
            cmp.add_step(local, event.step, event.signals)

    def add_metrics(self, index: int, event: MetricsRecord) -> None:
        super().add_metrics(index, event)
        for cmp, local in self.routes.get(index, ()):
            cmp.set_metrics(local, event.metrics)

    def end(self, result: RunResult) -> None:
        super().end(result)
        complete = not (result.failed or result.status == "cancelled")
        for cmp, local in self.routes.get(result.index, ()):
            cmp.end(local, result.steps, complete=complete)

    def loop_seconds(self, index: int) -> float | None:
        if index not in self.first_at:
            return None
        return self.last_at[index] - self.first_at[index]


def run_across(options: RunOptions, listener: Listener | None = None,
               log: Log | None = None) -> Report:
    """Run ``options.target`` ``options.runs`` times in every environment of ``options.across``
    and compare each environment with the first.

    Raises :class:`UsageError` (exit 2), before any run, for axes this machine cannot honour; a
    target that fails is reported (exit 3), not raised.
    """
    axes = options.axes
    if not axes:
        raise UsageError("--across needs AXIS=A,B")
    check_cores(axes)
    rev_axis = next((a for a in axes if a.kind == "rev"), None)
    if rev_axis is None:
        with compile_caches(axes) as caches:
            return _run_across(options, listener, log, None, {}, caches)
    root = revisions.repository()
    shas = {v: revisions.resolve(root, v) for v in rev_axis.values}  # before any run
    with revisions.Checkouts(root) as checkouts, compile_caches(axes) as caches:
        folders = {v: checkouts.checkout(sha) for v, sha in shas.items()}
        if options.target:
            revisions.check_target(options.target, root, folders)  # before any run
        return _run_across(options, listener, log, root, folders, caches)


def _run_across(options: RunOptions, listener: Listener | None, log: Log | None,
                root: Path | None, checkouts: dict[str, Path],
                caches: Path | None = None) -> Report:
    say = log or (lambda text: None)
    axes = options.axes
    cells = grid(axes)
    session = Session(options, runs=len(cells) * options.runs)
    plan, specs = _planned(session, cells, options, root, checkouts, caches)
    early = compile_warning(axes, session.target)
    if early:
        say(f"warning: {early}")
    policy = cross_device(options.policy()) if plan.device_digest else options.policy()
    if any(a.kind == "nproc" for a in axes):
        policy = across_ranks(policy)
    compared = CellComparisons.of(plan, policy, len(specs))
    feed = AcrossFeed(compared.main, compared.routes, listener)
    fits = Fits({s.index: plan.locate(s.index)[0] for s in specs}, usable_cores(),
                cache_fillers(plan))
    say(f"across {', '.join(a.flag() for a in axes)}: {len(cells)} environments, "
        f"{options.runs} run(s) each")
    outcome = session.run(feed, options.jobs or len(specs), specs=specs, fits=fits)
    report = finished_report(options, outcome, compared.main.result(), policy,
                             feed.uses_dataloader, runs=len(specs))
    by_index = {r.index: r for r in outcome.results}
    infos = [_cell(c, plan, by_index, feed, compared.own.get(c.index)) for c in cells]
    sides = [PairRuns(cells[0], c, by_index.get(plan.index(1, 1)),
                      by_index.get(plan.index(c.index, 1)), compared.pairs[c.index].result())
             for c in cells[1:]]
    loadings = {r.cell.index: loading_of(r, policy) for r in sides}
    interrupted, notes = report.interrupted, cache_notes(plan, by_index)
    found: dict[int, Localization] = {}
    if report.error is None and not report.interrupted:
        interrupted, found, probed = _localize(sides, loadings, session, plan, specs, fits,
                                               options, say)
        notes += probed
    pairs = [_pair(infos[0], r, policy, loadings[r.cell.index], scaling_of(r),
                   found.get(r.cell.index)) for r in sides]
    report = dataclasses.replace(
        report, across=_across_part(axes, plan, infos, pairs), interrupted=interrupted,
        # each environment has its own thread count when threads is an axis
        threads=None if any(a.kind == "threads" for a in axes) else report.threads,
        warnings=[*([early] if early else []), *report.warnings, *notes])
    if report.reproducible and not report.error:
        return report
    return dataclasses.replace(report, replay=replay_line(
        options, upto=report.first_divergent_step or options.max_steps,
        runs=options.runs if options.runs != 1 else None,
        extra=[x for text in options.across or () for x in ("--across", text)]))


def _planned(session: Session, cells: list[Cell], options: RunOptions, root: Path | None,
             checkouts: dict[str, Path], caches: Path | None) -> tuple[Plan, list[RunSpec]]:
    """The plan of every environment's runs and their specs; a :class:`UsageError` (the
    session's folder removed: nothing ran) for an environment this machine cannot run."""
    try:
        check_interpreters(cells)
        devices = any(a.kind == "device" for a in options.axes)
        plan = Plan(cells, options.runs, session.folder, device_digest=devices, root=root,
                    checkouts=checkouts, caches=caches)
        return plan, plan.specs(session.specs())
    except UsageError:
        shutil.rmtree(session.folder, ignore_errors=True)  # nothing ran
        raise


@dataclasses.dataclass
class CellComparisons:
    """The comparisons the runs feed: ``main``, every run against run 1 of the first
    environment (the check's); ``pairs``, each environment's first run against the first
    environment's (its row); ``own``, each environment's runs among themselves (with --runs
    above 1); ``routes``, the comparisons each run index feeds, as which of their runs."""

    main: Comparison
    pairs: dict[int, Comparison]
    own: dict[int, Comparison]
    routes: dict[int, list[tuple[Comparison, int]]]

    @classmethod
    def of(cls, plan: Plan, policy: Policy, total: int) -> CellComparisons:
        """The comparisons of ``total`` runs planned by ``plan``."""
        cells, runs = plan.cells, plan.per_cell
        pairs = {c.index: Comparison(2, policy) for c in cells[1:]}
        own = {c.index: Comparison(runs, policy) for c in cells} if runs > 1 else {}
        routes: dict[int, list[tuple[Comparison, int]]] = {}
        for cell in cells:
            for run in range(1, runs + 1):
                route = routes.setdefault(plan.index(cell.index, run), [])
                if cell.index in own:
                    route.append((own[cell.index], run))
                if run == 1:
                    route += [(cmp, 1) for cmp in pairs.values()] if cell.index == 1 \
                        else [(pairs[cell.index], 2)]
        return cls(Comparison(total, policy), pairs, own, routes)


def _across_part(axes: Sequence[Axis], plan: Plan, infos: list[AcrossCell],
                 pairs: list[AcrossPair]) -> AcrossPart:
    """The report's part: each environment's row, each finished pair with the first, the price
    of determinism and of compiling, the revisions run."""
    cells = plan.cells
    root = plan.root
    described = {} if root is None else {
        v: BisectCommit(**revisions.describe(root, revisions.resolve(root, v)).to_dict())
        for v in plan.checkouts}
    return AcrossPart(axes=[(a.name, list(a.values)) for a in axes], cells=infos, pairs=pairs,
                      runs_per_cell=plan.per_cell, price=price_of_determinism(cells, infos),
                      compile_price=price_of_compile(cells, infos), revisions=described)


@dataclasses.dataclass(frozen=True)
class PairRuns:
    """One environment against the first, before its pair is built: the two cells, the first
    run of each (None: none ended) and their comparison."""

    first: Cell
    cell: Cell
    a: RunResult | None
    b: RunResult | None
    result: ComparisonResult


@dataclasses.dataclass(frozen=True)
class Loading:
    """What a pair whose environments load data differently shows of its batches
    (:func:`loading_of`); nothing for the other pairs."""

    batches_identical: bool | None = None
    first_batch_step: int | None = None
    worker_draw: tuple[str, ...] = ()
    note: str | None = None


@dataclasses.dataclass(frozen=True)
class Scaling:
    """What a pair whose process counts differ shows of its step 1 (:func:`scaling_of`);
    nothing for the other pairs."""

    same_global_batch: bool | None = None
    same_initial_weights: bool | None = None
    note: str | None = None


def _median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _cell(cell: Cell, plan: Plan, by_index: dict[int, RunResult], feed: AcrossFeed,
          own: Comparison | None) -> AcrossCell:
    indices = [plan.index(cell.index, run) for run in range(1, plan.per_cell + 1)]
    results = [by_index[i] for i in indices if i in by_index]
    env = next(((r.header or {}).get("environment") or {} for r in results if r.header), {})
    versions = {k: env.get(k) for k in VERSION_KEYS}
    versions["executable"] = cell.executable or sys.executable
    ran = [r for r in results if r.steps]
    loops = [x for i in indices if (x := feed.loop_seconds(i)) is not None]
    gaps = [g for i in indices for g in feed.gaps.get(i, ())]
    return AcrossCell(
        index=cell.index, label=cell.label, settings=cell.settings_dict(), runs=indices,
        steps=max((r.steps for r in results), default=0),
        seconds=_median([r.seconds for r in ran]) or 0.0, loop_seconds=_median(loops),
        versions=versions, reproducible=own.result().reproducible if own else None,
        step_spread=statistics.stdev(gaps) if len(gaps) >= 2 else None,
        global_batch=results[0].batch_samples if results and cell.nproc is not None else None)


def _pair(first: AcrossCell, runs: PairRuns, policy: Policy, loading: Loading,
          scaling: Scaling, loc: Localization | None) -> AcrossPair:
    """Environment ``runs.cell`` against the ``first``, built once of all that was found of it:
    verdict, first divergence, drift, metrics, environment differences, the data loading and
    scaling notes, and the culprit op its probes named (``loc``)."""
    cell, result, a, b = runs.cell, runs.result, runs.a, runs.b
    bit_identical = result.groups == [[1, 2]]
    # each rank's loss is over its share of the batch: no drift of it between process counts
    ranks_differ = cell.value("nproc") != first.settings.get("nproc")
    drift = _drift(a.trace_path, b.trace_path, policy) \
        if not bit_identical and a is not None and b is not None and a.trace_path \
        and b.trace_path and not ranks_differ else None
    env_a = (a.header or {}).get("environment") if a else None
    env_b = (b.header or {}).get("environment") if b else None
    named = loc is not None and loc.found
    return AcrossPair(
        a=first.label, b=cell.label, cell=cell.index, identical=result.reproducible,
        bit_identical=bit_identical, first_divergent_step=result.first_divergent_step,
        signal=result.divergent_signal,
        culprit=loc.module if loc is not None and named else None,
        culprit_op=loc.op if loc is not None and named else None, localization=loc,
        drift=drift, metrics=metrics_side_by_side(result.metrics_of(1), result.metrics_of(2)),
        environment_differences=[f"{d.label}: {_text(d.reference)} vs {_text(d.value)}"
                                 for d in environment.differences(env_a, env_b)],
        batches_identical=loading.batches_identical, first_batch_step=loading.first_batch_step,
        worker_draw=list(loading.worker_draw), loading_note=loading.note,
        same_global_batch=scaling.same_global_batch,
        same_initial_weights=scaling.same_initial_weights, scaling_note=scaling.note)


def _drift(path_a: str, path_b: str, policy: Policy) -> Drift | None:
    try:
        return loss_drift(path_a, path_b, policy.for_name("loss"))
    except TraceFileError:
        return None


def _text(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, (list, tuple)):
        return ",".join(map(str, v)) or "none"
    return str(v)


def metrics_side_by_side(a: dict[str, Any], b: dict[str, Any]) -> list[MetricPair]:
    """Each final metric of both environments, and their difference."""
    out = []
    for name in list(a) + [n for n in b if n not in a]:
        va, vb = a.get(name), b.get(name)
        same = isinstance(va, dict) and isinstance(vb, dict) and va.get("bits") == vb.get("bits") \
            and va.get("dtype") == vb.get("dtype")
        diff = values.differences(va, vb)[0] if isinstance(va, dict) and isinstance(vb, dict) \
            else None
        out.append(MetricPair(name=name, a=plain_value(va), b=plain_value(vb),
                              abs_diff=0.0 if same else diff, identical=same))
    return out


def price_of_determinism(cells: Sequence[Cell], infos: Sequence[AcrossCell]) -> list[PriceRow]:
    """Every deterministic=on environment beside its deterministic=off twin (all else equal):
    seconds per step of each, and on / off. ``within_noise``: the two times per step differ by
    no more than the spread (standard deviation) of either side's step times, so the ratio says
    nothing (a loaded machine); None when a side has too few steps to tell."""
    return _price(cells, infos, "deterministic")


def price_of_compile(cells: Sequence[Cell], infos: Sequence[AcrossCell]) -> list[CompilePriceRow]:
    """Every compile=on environment beside its compile=off twin, as the price of determinism:
    what torch.compile costs (or saves) per step. With ``measure`` ``run`` the compiling itself
    is inside the time; with ``loop`` (between the first and the last step) mostly not, so
    each row also has the whole run over its steps, compiling included (``*_run_seconds_per_step``)."""
    by_label = {i.label: i for i in infos}
    return [CompilePriceRow(**dataclasses.asdict(row),
                            on_run_seconds_per_step=by_label[row.on].per_step,
                            off_run_seconds_per_step=by_label[row.off].per_step)
            for row in _price(cells, infos, "compile")]


def _price(cells: Sequence[Cell], infos: Sequence[AcrossCell], axis: str) -> list[PriceRow]:
    out = []
    for cell, info in zip(cells, infos):
        if cell.value(axis) != "on":
            continue
        twin_settings = {**info.settings, axis: "off"}
        twin = next((i for i in infos if i.settings == twin_settings), None)
        if twin is None:
            continue
        loop = info.loop_per_step is not None and twin.loop_per_step is not None
        on = info.loop_per_step if loop else info.per_step
        off = twin.loop_per_step if loop else twin.per_step
        spreads = [x for x in (info.step_spread, twin.step_spread) if x is not None]
        noise = max(spreads) if len(spreads) == 2 else None
        out.append(PriceRow(on=info.label, off=twin.label, measure="loop" if loop else "run",
                            on_seconds_per_step=on, off_seconds_per_step=off,
                            ratio=on / off if on and off else None,
                            on_step_spread=info.step_spread, off_step_spread=twin.step_spread,
                            within_noise=None if noise is None or on is None or off is None
                            else abs(on - off) <= noise))
    return out


#: the axes that change how the data is loaded (a worker-side draw shows in the batches)
LOADING_AXES = ("workers", "start")
#: the main process's global streams, as the trace names them, and as users know them
STREAMS = {"rng.python": "Python's random", "rng.numpy": "numpy's global random",
           "rng.torch": "torch's global generator"}


def drawn(run: RunResult) -> dict[str, list[str]]:
    """The global streams the run's DataLoader fetches drew from (the Dataset, the collate
    function), as users know them, each with where: ``main process``, ``workers``."""
    out: dict[str, list[str]] = {}
    for stream, worker in run.draws:
        name = STREAMS.get(f"rng.{stream}")
        if name is not None:
            where = "workers" if worker else "main process"
            if where not in out.setdefault(name, []):
                out[name].append(where)
    return out


def _where_drawn(seen: dict[str, list[str]], streams: Sequence[str], label: str) -> str:
    """``in the workers with workers=2``: where one side was seen drawing each of ``streams``
    (each named when there are several)."""
    said = [(f"{n} " if len(streams) > 1 else "") + f"in the {' and '.join(seen[n])}"
            for n in streams if n in seen]
    return f"{', '.join(said) or 'no draw seen'} with {label}"


def loading_of(runs: PairRuns, policy: Policy) -> Loading:
    """For a pair whose environments load data differently (workers, start method): whether
    the batches themselves are identical, the first step whose batch differs, and the global
    random streams the data loading draws from: those its fetches were seen drawing from, in
    the main process or in the workers (each worker from its own copy, seeded by torch from
    the worker's id), and those of the main process that differ between the two."""
    first, cell, a, b = runs.first, runs.cell, runs.a, runs.b
    varied = [k for k in LOADING_AXES if cell.value(k) != first.value(k)]
    if not varied or a is None or b is None or not a.trace_path or not b.trace_path:
        return Loading()
    try:
        firsts, steps = first_differences(a.trace_path, b.trace_path)
    except TraceFileError:
        return Loading()
    if not steps:
        return Loading()
    seen_a, seen_b = drawn(a), drawn(b)
    main = [STREAMS[s] for s in STREAMS if s in firsts and policy.compares(s)]
    worker_draw = tuple(n for n in STREAMS.values() if n in seen_a or n in seen_b or n in main)
    what = " and ".join(f"{k}={cell.value(k)}" for k in varied)
    first_batch = firsts.get("batch")
    if "batch" not in firsts:
        return Loading(True, first_batch, worker_draw,
                       f"the batches are identical at every one of {steps} steps with {what}")
    note = f"the batches differ from step {first_batch} with {what}"
    fetched = [n for n in worker_draw if n in seen_a or n in seen_b]
    if fetched:
        sides = "; ".join(_where_drawn(seen, fetched, label)
                          for label, seen in ((first.label, seen_a), (cell.label, seen_b)))
        note += (f"; the data loading (the Dataset or its collate function) draws from "
                 f"{' and '.join(fetched)}: {sides}. Without workers it draws from the main "
                 "process's stream; with workers each worker draws from its own copy, "
                 "seeded from the worker's id, so a sample's numbers depend on the worker "
                 "count and on which worker fetches it: draw from a generator seeded by "
                 "the sample's index instead")
    elif main:
        at = min(firsts[s] for s in STREAMS if STREAMS[s] in main)
        note += (f"; {' and '.join(main)} of the main process also differs from "
                 f"step {at}: the data loading draws from it (an augmentation in the "
                 "Dataset), in the main process without workers and in each worker, from "
                 "that worker's own copy, with workers: draw from a generator seeded by "
                 "the sample's index instead")
    else:
        note += ("; no global random stream is seen drawn from in the data loading: the "
                 "workers deliver in another order, or the Dataset draws from a generator "
                 "of its own")
    return Loading(False, first_batch, worker_draw, note)


def scaling_of(runs: PairRuns) -> Scaling:
    """For a pair whose process counts differ: whether step 1 trained on as many samples in
    all (the global batch: every rank's batch added up) and from the same parameters, and how
    to make both so. Only then can the parameters after each step agree (to the order of the
    ranks' gradient sum, which already changes their last bits)."""
    first, cell, a, b = runs.first, runs.cell, runs.a, runs.b
    if cell.nproc == first.nproc or a is None or b is None:
        return Scaling()
    said: list[str] = []
    same_batch = same_weights = None
    na, nb = a.batch_samples, b.batch_samples
    if na is not None and nb is not None:
        same_batch = na == nb
        per = f" ({nb // cell.nproc} a rank)" if cell.nproc and nb % cell.nproc == 0 else ""
        if na == nb:
            said.append(f"the global batch is {nb} samples on both sides{per}")
        else:
            said.append(f"the global batch differs: {na} samples with {first.label}, {nb} with "
                        f"{cell.label}{per}, so the numbers cannot agree: keep the global "
                        "batch fixed (each rank's batch the global batch over the process "
                        "count)")
    ia, ib = signal_at(a.trace_path, 1, "init"), signal_at(b.trace_path, 1, "init")
    if ia is not None and ib is not None:
        same_weights = ia == ib
        said.append("the initial weights are the same" if ia == ib else
                    "the initial weights differ: start every process count from one saved "
                    "initial checkpoint (a seed checkpoint), loaded before training")
    if not said:
        return Scaling(same_batch, same_weights)
    return Scaling(same_batch, same_weights, "; ".join(said) + (
        "; even so, the ranks' gradients are summed in another order than one process "
        "sums them, and each rank draws its own random numbers (dropout masks, "
        "augmentations) where one process draws one stream for the whole batch: the "
        "bits part unless the model draws none and the sums round alike"
        if same_batch and same_weights else ""))


def compile_warning(axes: Sequence[Axis], target: Any) -> str | None:
    """``compile=`` on a script whose source never calls ``torch.compile``: a warning (it may
    compile through a library), not an error."""
    axis = next((a for a in axes if a.kind in ("compile", "compile-cache")), None)
    if axis is None:
        return None
    path = getattr(target, "path", None)
    if path is None:
        return None
    try:
        source = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    if _may_compile(source):
        return None
    return (f"--across {axis.name}=: {path} never calls torch.compile (unless a library it "
            "uses does): its environments will run the same code")


#: modules whose ``compile`` is not torch's (regular expressions)
_OTHER_COMPILES = frozenset({"re", "regex"})


def _may_compile(source: str) -> bool:
    """Whether a script's source may compile a model: any ``X.compile`` (``torch.compile``,
    ``@torch.compile``, ``model.compile()``) but ``re.compile``, or ``compile`` imported from
    torch. Source that does not parse counts as compiling (no warning on a guess)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "compile" and not (
                isinstance(node.value, ast.Name) and node.value.id in _OTHER_COMPILES):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch" \
                and any(alias.name == "compile" for alias in node.names):
            return True
    return False


def _localize(sides: Sequence[PairRuns], loadings: dict[int, Loading], session: Session,
              plan: Plan, specs: Sequence[RunSpec], fits: Fits, options: RunOptions,
              say: Log) -> tuple[bool, dict[int, Localization], list[str]]:
    """A probe run of both sides of every pair that parts at a step, up to that step; the
    first op whose result differs is the pair's culprit. Whether Ctrl-C or SIGTERM stopped
    the probes, each probed pair's localization (by its environment's index), and the
    report's warnings of pairs whose probes failed."""
    wanted = [r for r in sides if _probed(r, loadings[r.cell.index])]
    jobs = [r for r in wanted if r.cell.nproc is not None]
    if jobs:  # a probe records one process's ops; a job's ranks each run their share
        wanted = [r for r in wanted if r not in jobs]
        say("localization: not run for torchrun jobs (nproc=): the first step and signal that "
            "differ are what is named")
    if not wanted:
        return False, {}, []
    probes, probe_specs = _probe_specs(wanted, plan, specs, fits)
    steps = sorted({r.result.first_divergent_step for r in wanted
                    if r.result.first_divergent_step})
    say(f"localization: {len(probe_specs)} probe run(s) to step {', '.join(map(str, steps))}, "
        "recording every op of that step")
    collector = ProbeCollector()
    outcome = session.run(collector, options.jobs or len(probe_specs), specs=probe_specs,
                          fits=fits)
    if outcome.interrupted:
        return True, {}, []
    notes: list[str] = []
    found: dict[int, Localization] = {}
    failed = {r.index: r for r in outcome.results if r.failed}
    for runs in wanted:
        step = runs.result.first_divergent_step
        assert step is not None
        ia, ib = probes[(1, step)], probes[(runs.cell.index, step)]
        broken = [failed[i].describe_failure() for i in (ia, ib) if i in failed]
        if broken:
            notes.append(f"localization of {runs.cell.label} failed: {'; '.join(broken)}")
            continue
        found[runs.cell.index] = pair_localization(runs, step, collector.probes.get((ia, 0), []),
                                                   collector.probes.get((ib, 0), []))
    return False, found, notes


def _probed(runs: PairRuns, loading: Loading) -> bool:
    """Whether a pair's probe can name an op: it parts at a step, on a signal a step's ops
    make, and not on batches or streams its data loading already explains."""
    result = runs.result
    signal = result.divergent_signal
    return not result.reproducible and result.first_divergent_step is not None \
        and signal not in (None, "steps") and not str(signal).startswith("metric:") \
        and not (loading.note and (signal == "batch" or str(signal).startswith("rng.")))


def _probe_specs(wanted: Sequence[PairRuns], plan: Plan, specs: Sequence[RunSpec],
                 fits: Fits) -> tuple[dict[tuple[int, int], int], list[RunSpec]]:
    """One probe run per environment and step the ``wanted`` pairs need (the first
    environment's shared), numbered after the check's runs: their indices by (cell, step),
    and their specs."""
    probes: dict[tuple[int, int], int] = {}
    probe_specs: list[RunSpec] = []
    for runs in wanted:
        step = runs.result.first_divergent_step
        assert step is not None
        for cell in (1, runs.cell.index):
            if (cell, step) in probes:
                continue
            index = len(specs) + len(probe_specs) + 1
            probes[(cell, step)] = index
            fits.cells[index] = plan.cells[cell - 1]
            base = specs[plan.index(cell, 1) - 1]
            probe_specs.append(dataclasses.replace(
                base, told=base.told.replace(run=index, max_steps=step, probe_step=step),
                extra_env=plan.probe_env(plan.cells[cell - 1], base.extra_env),
                trace_path=plan.folder / f"probe-env-{cell}-step-{step}.jsonl"))
    return probes, probe_specs


def pair_localization(runs: PairRuns, step: int, records_a: list[ProbeOp],
                      records_b: list[ProbeOp]) -> Localization:
    """The first op of ``step`` whose result differs between the pair's probes, worded by the
    localizer for the pair's two environments, as it is told them: their names, whether they
    run two revisions' code, one side eager and the other compiled, two argument lists."""
    first, other = runs.first, runs.cell
    a, b = first.label, other.label
    if first.value("device") != other.value("device"):
        records_a, records_b = drop_transfers(records_a), drop_transfers(records_b)
    # two revisions run different code: ops that differ are the change
    code = CodeSides(a, b) if first.value("rev") != other.value("rev") else None
    sides = EnvironmentSides(a, b, compiled=first.value("compile") != other.value("compile"),
                             arguments=first.args != other.args)
    return compare(step, records_a, records_b, code=code, environments=sides)


#: ops that move or copy a tensor: between devices they are what only the GPU side runs
TRANSFERS = frozenset({"aten::_to_copy", "aten::copy_", "aten::to", "aten::lift_fresh",
                       "aten::_to_device"})


def drop_transfers(records: Sequence[P]) -> list[P]:
    """Probe records without the ops that only move bytes (a result equal to an argument): a
    CPU run has no copy to the GPU, so ops would no longer match by position."""
    return [r for r in records if not _transfer(ProbeOp.parse(r))]


def _transfer(rec: ProbeOp | None) -> bool:
    return isinstance(rec, OpRun) and rec.op in TRANSFERS and any(o in rec.ins for o in rec.outs)


class AcrossCommand(GivenCommand):
    """``check --across``: each planned target run in every environment, each compared with
    the first; progress and what is being done said as it goes."""

    name = "check"
    timed = True

    def describe(self, planned: Planned) -> str:
        return f"checking {planned.target}"

    def run(self, planned: Planned) -> Report:
        # each environment runs once unless --runs says (the config's runs are a check's)
        options = self.given.options(planned.target, planned.entry, keys={"runs": None},
                                     defaults={"runs": 1})
        with self.given.progress(options, len(grid(options.axes)) * options.runs) as listener:
            return run_across(options, listener, self.given.log)
