"""The result of a check, as an object and as the JSON report other tools read.

The JSON keys ``reproducible``, ``first_divergent_step``, ``divergent_signal``, ``steps``,
``metrics``, ``runs``, ``seed`` and ``error`` are a public API; everything else is added beside
them, never renamed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from repro_check.trace import values
from repro_check.compare.control import ControlResult
from repro_check.compare.drift import Drift
from repro_check.compare.resume import NotRestored
from repro_check.compare.saved import SavedFile, SavedResult
from repro_check.compare.steps import ComparisonResult, Divergence, Policy
from repro_check.errors import ExitCode
from repro_check.finished.checkpoints import CheckpointsDiff
from repro_check.finished.logs import LogsDiff
from repro_check.report.contents import (AblationRow, Cause, CompilePriceRow, DistributedLaunch,
                                         EnvironmentDifference, Evidence, FailedRank, FlaggedOp, Localization, MetricPair, PriceRow,
                                         ProcessRow, ProcessRun, RankValue, RunEnd, Source,
                                         SourcesCost)
from repro_check.trace.jsonfields import JsonRecord, json_field, merge
from repro_check.trace.results import Location, RankResult, RunResult
from repro_check.trace.signals import Signal

REPORT_VERSION = 1


Tone = Literal["good", "bad", "warn"]


@dataclass(frozen=True)
class Verdict:
    """What a report says in one word: ``label`` for the terminal headline, ``word`` for plain
    text (CI logs, JUnit), ``tone`` for colour."""

    label: str
    word: str
    tone: Tone


GateMode = Literal["verify", "diff", "record"]


class KindPart(Protocol):
    """The part that makes a report a kind of its own (:class:`GatePart`, :class:`AcrossPart`,
    :class:`ResumePart`): what that kind says of itself, in every output and in the JSON."""

    def verdict(self, report: Report) -> Verdict | None:
        """The kind's own verdict (None: the one any report has)."""

    def sides(self, report: Report) -> list[str]:
        """What the two sides of the comparison are called."""

    def run_name(self, index: int) -> str | None:
        """What run ``index`` is called (None: ``run N``)."""

    def compares(self, report: Report) -> bool:
        """Whether the report's verdict rests on a comparison of its runs (what its evidence
        then counts), rather than on one run alone or on a golden written."""

    def golden_written(self) -> bool:
        """Whether the report wrote a golden: its exit is a success whatever the runs did."""

    def incomplete_name(self, index: int) -> str | None:
        """What run ``index`` is called where the records it left out are listed (None: as
        :meth:`run_name` calls it)."""

    def environment_lines(self) -> list[str]:
        """What differs between the environments of the two sides, a sentence each (what the
        CI step summary lists under a failure)."""


class OwnRuns:
    """What a kind whose runs are the report's own says of them (a check, ``--across``,
    ``resume``): the verdict any report has, runs called ``run N``, compared when there are two
    or more, and no golden written. A kind part overrides what it says otherwise."""

    def verdict(self, report: Report) -> Verdict | None:
        return None

    def sides(self, report: Report) -> list[str]:
        return ["run 1", "run 2"]

    def run_name(self, index: int) -> str | None:
        return None

    def compares(self, report: Report) -> bool:
        """A single run has nothing to be compared with."""
        return report.runs >= 2

    def golden_written(self) -> bool:
        return False

    def incomplete_name(self, index: int) -> str | None:
        return None

    def environment_lines(self) -> list[str]:
        """The runs of one command on one machine: no sides whose environments differ (an
        ``--across`` pair's differences are its pair's, not the report's)."""
        return []


#: what a check, which has no kind part of its own, answers for itself
CHECK_RUNS = OwnRuns()


def _compares(gate: GatePart) -> bool:
    """``verify`` and ``diff`` compare two sides; ``record`` writes a golden."""
    return gate.mode != "record"


def _band_written(gate: GatePart) -> bool:
    """A record that wrote a golden says how its runs spread."""
    return gate.golden_written()


@dataclass
class GatePart(JsonRecord):
    """What ``verify``, ``diff`` and ``record`` add to a report: which files, how the two sides
    are called, and the environment differences between them. Each mode writes its own keys."""

    mode: GateMode
    labels: list[str] = json_field(default_factory=lambda: ["run 1", "run 2"], when=_compares)
    golden: str | None = json_field(default=None, when=lambda g: g.mode != "diff")
    a: str | None = json_field(default=None, when=lambda g: g.mode == "diff")
    b: str | None = json_field(default=None, when=lambda g: g.mode == "diff")
    output: str | None = json_field(default=None, when=lambda g: g.mode == "record")
    band: bool | None = json_field(default=None, when=_band_written)
    spread_steps: int = json_field(default=0, when=_band_written)
    widest_spread: float = json_field(default=0.0, when=_band_written)
    environment_differences: list[EnvironmentDifference] = json_field(default_factory=list,
                                                                      when=_compares)
    environment_note: str | None = json_field(default=None, when=_compares)

    def verdict(self, report: Report) -> Verdict | None:
        """``record``: whether the golden was written, whatever the runs did; ``verify`` and
        ``diff``: their word for agreeing (None: the verdict any report has)."""
        if self.mode == "record":
            return Verdict("RECORDED", "recorded", "good") if report.recorded \
                else Verdict("NOT RECORDED", "not recorded", "bad")
        if report.reproducible:
            return Verdict("MATCHES GOLDEN" if self.mode == "verify" else "SAME",
                           "reproducible", "good")
        return None

    def sides(self, report: Report) -> list[str]:
        """The golden and this run, or the two files."""
        return list(self.labels)

    def run_name(self, index: int) -> str | None:
        """A gate's runs are called as any report's (its sides are :attr:`labels`)."""
        return None

    def compares(self, report: Report) -> bool:
        """``verify`` and ``diff`` compare two sides, however many runs made them; ``record``
        writes a golden and compares nothing."""
        return _compares(self)

    def golden_written(self) -> bool:
        """A ``record`` whose golden was written."""
        return self.mode == "record" and self.golden is not None

    def incomplete_name(self, index: int) -> str | None:
        """A gate's records come from a golden's runs, this run or two saved traces, which its
        own numbering does not tell apart: a record left out is said of ``a run``."""
        return "a run"

    def environment_lines(self) -> list[str]:
        """The golden's, this run's or the two files' environments where they differ."""
        return [d.text for d in self.environment_differences]


@dataclass
class DiagnosisPart(JsonRecord):
    """What ``diagnose`` adds: the culprit of a compute divergence, the ops PyTorch flags, and the
    seeding ablation."""

    culprit: str | None = None
    culprit_op: str | None = None
    localization: Localization | None = None
    flagged_ops: list[FlaggedOp] = field(default_factory=list)
    ablation: list[AblationRow] | None = None
    necessary_components: list[str] | None = None
    ablation_note: str | None = None
    #: every source found by pinning one and going on (:mod:`repro_check.diagnose.sources`)
    sources: list[Source] = field(default_factory=list)
    sources_cost: SourcesCost | None = None
    sources_note: str | None = None
    replay_dirs: list[str] = json_field(default_factory=list, skip=True)


@dataclass
class RankDesync(JsonRecord):
    """Ranks of one run that hold different parameters after an optimizer step."""

    run: int
    runs: list[int]
    step: int
    ranks: list[int]
    groups: list[list[int]]
    fingerprints: dict[str, str]


@dataclass
class RankRun(JsonRecord):
    """How each rank of one run ended."""

    run: int
    ranks: list[RankResult]


@dataclass
class DistributedPart(JsonRecord):
    """What a torchrun check adds: the rank where the first divergence entered, every rank's
    value there, the cross-rank check, each rank's end and the launch options."""

    launch: DistributedLaunch = json_field(key="distributed")
    first_divergent_rank: int | None = None
    rank_values: list[RankValue] = field(default_factory=list)
    rank_desync: RankDesync | None = None
    failed_rank: FailedRank | None = None
    rank_results: list[RankRun] = field(default_factory=list)

    @property
    def nproc_per_node(self) -> int:
        return self.launch.nproc_per_node or 1

    @property
    def ranks(self) -> list[int]:
        return self.launch.ranks

    @property
    def ddp_model_seen(self) -> bool:
        return self.launch.ddp_model_seen

    @property
    def cross_rank_steps(self) -> int:
        return self.launch.cross_rank_steps


#: what each environment's report names of it, from its trace header's environment
VERSION_KEYS = ("python", "torch", "cuda", "numpy", "device", "device_name", "threads")


@dataclass
class AcrossCell(JsonRecord):
    """One environment of ``--across``: its settings, its runs and what they took."""

    index: int
    label: str
    settings: dict[str, str]
    runs: list[int]
    steps: int = 0
    seconds: float = json_field(default=0.0, digits=3)
    #: seconds from the first to the last step as they arrived (start-up left out); the JSON
    #: has it per step
    loop_seconds: float | None = json_field(default=None, skip=True)
    versions: dict[str, Any] = field(default_factory=dict)
    #: with --runs >= 2: whether its own runs agree (None with one run a cell)
    reproducible: bool | None = None
    #: standard deviation of the seconds between consecutive steps (None: under 3 steps)
    step_spread: float | None = json_field(default=None, key="seconds_per_step_spread",
                                           digits=6)
    #: with an nproc axis: the samples of step 1 over all ranks of its first run (None: not
    #: seen, or no nproc axis)
    global_batch: int | None = json_field(default=None, omit_none=True)

    @property
    def per_step(self) -> float | None:
        """Wall time per step: the run's seconds over its steps."""
        return self.seconds / self.steps if self.steps else None

    @property
    def loop_per_step(self) -> float | None:
        """Seconds per step between the first and the last step (start-up left out)."""
        if self.loop_seconds is None or self.steps < 2:
            return None
        return self.loop_seconds / (self.steps - 1)

    JSON_PROPERTIES = ("seconds_per_step", "loop_seconds_per_step")

    @property
    def seconds_per_step(self) -> float | None:
        return _rounded(self.per_step)

    @property
    def loop_seconds_per_step(self) -> float | None:
        return _rounded(self.loop_per_step)


@dataclass
class AcrossPair(JsonRecord):
    """One environment compared with the first: the verdict, where they part, the culprit op
    and how far the loss drifts."""

    a: str
    b: str
    #: the index of environment ``b`` (``a`` is environment 1)
    cell: int
    identical: bool
    #: every recorded step and metric has the same bits (not merely within a tolerance)
    bit_identical: bool
    first_divergent_step: int | None = None
    signal: Signal | None = None
    culprit: str | None = None
    culprit_op: str | None = None
    localization: Localization | None = None
    #: None when bit-identical: there is no drift, not a drift of zero
    drift: Drift | None = None
    metrics: list[MetricPair] = field(default_factory=list)
    environment_differences: list[str] = field(default_factory=list)
    #: with a workers or start axis: whether every step's batch has the same fingerprint, the
    #: first step whose batch differs, the global random streams the data loading draws from
    #: (seen drawn from by a DataLoader fetch on either side, in the main process or a worker,
    #: or of the main process and differing), and the reading of it in words
    batches_identical: bool | None = None
    first_batch_step: int | None = None
    worker_draw: list[str] = field(default_factory=list)
    loading_note: str | None = None
    #: with an nproc axis, for a pair whose process counts differ: whether both sides trained
    #: step 1 on as many samples in all and from the same parameters (None: not known), and
    #: the reading of it in words
    same_global_batch: bool | None = json_field(default=None, omit_none=True)
    same_initial_weights: bool | None = json_field(default=None, omit_none=True)
    scaling_note: str | None = json_field(default=None, omit_none=True)

    @property
    def verdict(self) -> Literal["bit-identical", "agrees", "differs"]:
        """``bit-identical``, ``agrees`` (within the tolerances, or in the signals compared, but
        not in every bit) or ``differs``."""
        if self.bit_identical:
            return "bit-identical"
        return "agrees" if self.identical else "differs"

    JSON_PROPERTIES = ("verdict",)


def _axes_json(axes: list[tuple[str, list[str]]]) -> list[dict[str, Any]]:
    return [{"axis": name, "values": vals} for name, vals in axes]


@dataclass
class AcrossPart(JsonRecord, OwnRuns):
    """What ``--across`` adds: the axes, every environment, and every pair with the first."""

    JSON_ENVELOPE = "across"
    JSON_PROPERTIES = ("axis", "values")

    axes: list[tuple[str, list[str]]] = json_field(convert=_axes_json)
    cells: list[AcrossCell] = json_field()
    pairs: list[AcrossPair] = json_field()
    runs_per_cell: int = json_field(default=1, key="runs_per_environment")
    #: each deterministic=on cell beside its off twin: seconds per step and their ratio
    price: list[PriceRow] = json_field(default_factory=list, key="price_of_determinism")
    #: each compile=on cell beside its compile=off twin, the same way (compiling included)
    compile_price: list[CompilePriceRow] = json_field(default_factory=list,
                                                      key="price_of_compile")
    #: with a rev axis: each revision as written -> its commit
    revisions: dict[str, BisectCommit] = field(default_factory=dict)

    @property
    def axis(self) -> str:
        return " x ".join(name for name, _ in self.axes)

    @property
    def values(self) -> list[str]:
        """The values of the one axis, or each cell's label in a grid."""
        if len(self.axes) == 1:
            name, values = self.axes[0]
            # an empty argument list (args=|--flag) is shown as a cell's label shows it
            return [v or "(none)" if name == "args" else v for v in values]
        return [c.label for c in self.cells]

    def run_name(self, index: int) -> str:
        """A run by its environment (and its place there, with several runs each)."""
        for c in self.cells:
            if index in c.runs:
                return c.label if self.runs_per_cell == 1 else \
                    f"{c.label} (run {c.runs.index(index) + 1})"
        return f"run {index}"

    def verdict(self, report: Report) -> Verdict | None:
        """``--across`` says what any check says."""
        return None

    def sides(self, report: Report) -> list[str]:
        """The environments of the first divergence (run 1 and run 2 without one)."""
        div = report.comparison.divergence if report.comparison else None
        if div is None:
            return ["run 1", "run 2"]
        return [self.run_name(1), self.run_name(div.run)]


def _rounded(x: float | None, digits: int = 6) -> float | None:
    return None if x is None else round(x, digits)


@dataclass
class BisectCommit(JsonRecord):
    """A commit as ``bisect`` names it: hash, subject, author date (ISO 8601) and author."""

    sha: str
    subject: str = ""
    date: str = ""
    author: str = ""


@dataclass
class JudgedCommit(BisectCommit):
    """A commit ``bisect`` ran: ``good`` (matches the reference), ``bad`` (differs: where) or
    ``skip`` (the target fails there: why)."""

    verdict: Literal["good", "bad", "skip"] = "good"
    step: int | None = None
    signal: Signal | None = None
    error: str | None = json_field(default=None, omit_none=True)


@dataclass
class BisectPart(JsonRecord):
    """What ``bisect`` adds: GOOD and BAD, every commit tested (good, bad or skip), the first
    commit that differs and where (step, signal, op, module), the drift, runs and time."""

    JSON_ENVELOPE = "bisect"

    good: BisectCommit
    bad: BisectCommit
    candidates: int
    #: what each commit is compared with: GOOD's run or a golden
    reference: str = "GOOD"
    first_bad: BisectCommit | None = None
    tested: list[JudgedCommit] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    #: with only skipped commits left: the commits one of which is the first that differs
    undecided: list[str] = field(default_factory=list)
    #: BAD itself matches the reference: no commit differs
    matches: bool = False
    step: int | None = None
    signal: Signal | None = None
    op: str | None = None
    module: str | None = None
    localization: Localization | None = None
    drift: Drift | None = None
    runs: int = 0
    probe_runs: int = 0
    seconds: float = json_field(default=0.0, digits=3)
    #: the bisect log's text (``git bisect log``); the JSON has where it is kept
    log: str = json_field(default="", skip=True)
    log_path: str | None = json_field(default=None, key="log")


@dataclass
class ProcessesPart(JsonRecord):
    """What a check adds when processes the target started recorded steps: the process where the
    first divergence is (0: the main process), and each process's steps, end and trace in every
    run. ``ignored``: processes that recorded nothing in any run (helpers)."""

    first_divergent_process: int | None
    processes: list[ProcessRow] = field(default_factory=list)
    ignored: list[int] = json_field(default_factory=list, key="ignored_processes")
    #: every process each run started (ignored ones too): status, steps, exit code, error, trace
    results: list[ProcessRun] = json_field(default_factory=list, key="process_results")


@dataclass
class SavedPart(JsonRecord):
    """What a check adds about what the runs left (:mod:`repro_check.compare.saved`): every file
    the runs saved and their modules' state at the end, each compared tensor by tensor, and how
    many tensors were compared in all."""

    files: list[SavedFile] = json_field(default_factory=list, key="saved")
    tensors_compared: int = json_field(default=0, key="saved_tensors_compared")

    @classmethod
    def of(cls, result: SavedResult) -> SavedPart:
        return cls(list(result.files), result.tensors_compared)

    @property
    def first(self) -> SavedFile | None:
        """The first save (or end state) that differs."""
        return next((f for f in self.files if not f.agrees), None)

    @property
    def saves(self) -> int:
        """Files saved (the end state not counted), as run 1 made them."""
        return sum(1 for f in self.files if f.kind == "file")


@dataclass
class FinishedPart(JsonRecord):
    """What ``diff`` adds when A and B are what two finished runs left rather than traces: the
    format both were read as, the two paths, and the scalar logs or the checkpoints compared
    (:mod:`repro_check.finished`). Its keys go under ``finished``."""

    JSON_ENVELOPE = "finished"
    JSON_PROPERTIES = ("same", "first_divergent_step", "first_divergent")

    format: str
    a: str
    b: str
    labels: list[str]
    logs: LogsDiff | None = json_field(default=None, omit_none=True)
    checkpoints: CheckpointsDiff | None = json_field(default=None, omit_none=True)

    @property
    def same(self) -> bool:
        """Every scalar at every step, or every key of the checkpoints, agrees."""
        if self.logs is not None:
            return self.logs.same
        return self.checkpoints is not None and self.checkpoints.same

    @property
    def first_divergent_step(self) -> int | None:
        return self.logs.first_divergent_step if self.logs is not None else None

    @property
    def first_divergent(self) -> str | None:
        """The scalar (logs) or the key (checkpoints) that differs first."""
        if self.logs is not None:
            if self.logs.first is not None:
                return self.logs.first.name
            only = self.logs.scalars_only_in_a + self.logs.scalars_only_in_b
            return only[0] if only else None
        if self.checkpoints is None:
            return None
        ck = self.checkpoints
        only = ck.files_only_in_a + ck.files_only_in_b
        return ck.first_differing_key or (only[0] if only else None)


@dataclass
class ReportCore(JsonRecord):
    """The keys every JSON report has (the first eight, and ``exit_code``, are the public API
    the module's docstring names); a report's parts add theirs beside them."""

    report_version: int
    reproducible: bool
    first_divergent_step: int | None
    divergent_signal: Signal | None
    #: steps each run recorded
    steps: list[int]
    #: each run's final metrics by name, as plain numbers
    metrics: list[dict[str, Any]]
    runs: int
    seed: int | None
    error: str | None
    exit_code: int
    cause: Cause | None
    target: str
    args: list[str]
    components: list[str]
    threads: int | None
    max_steps: int | None
    tolerance: str
    divergence: Divergence | None
    divergences: list[Divergence]
    metric_divergences: list[Divergence]
    steps_compared: int
    metrics_compared: int
    metrics_skipped: list[str]
    incomplete: list[str]
    identical_groups: list[list[int]]
    #: what accepted the values that agreed (exact bits, a tolerance, a band), counted
    judged: dict[str, int]
    run_results: list[RunEnd]
    #: the first run's environment fingerprint (its entries are data, not schema)
    environment: dict[str, Any] | None
    interrupted: bool
    trace_dir: str | None
    replay: str | None
    warnings: list[str]
    cause_detail: str | None
    cause_location: Location | None
    #: what the verdict rests on: steps, metrics and saved tensors compared
    evidence: Evidence
    #: the verdict in one word: ``reproducible``, ``not reproducible``, ``unverified``, ...
    #: (:attr:`Report.verdict`)
    verdict: str


@dataclass
class CheckpointFile(JsonRecord):
    """One file of a checkpoint written by several saves in a row, and its copy."""

    path: str
    copy: str | None = None


@dataclass
class CheckpointInfo(JsonRecord):
    """The checkpoint the interrupted run wrote: where, after which step, what it holds (as the
    save call in the run saw it)."""

    JSON_PROPERTIES = ("summary",)

    step: int
    path: str
    copy: str | None
    kind: str
    #: top-level keys in order, ``kinds`` {key: model|optimizer|scheduler|rng|grad_scaler|other}
    keys: list[str] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)
    rng: list[str] = field(default_factory=list)
    #: seconds from the save's return to the interrupted run's end (the copy), as it measured
    stopped_after: float | None = json_field(default=None, key="stopped_after_s")
    #: every file of a checkpoint written by several saves in a row (``path`` is the first);
    #: None for one save
    files: list[CheckpointFile] | None = json_field(default=None, omit_none=True)

    @property
    def where(self) -> str:
        """``path`` and the other files of the checkpoint, for the reports."""
        others = [f.path for f in self.files or [] if f.path != self.path]
        if not others:
            return self.path
        shown = ", ".join(others[:4]) + (f" and {len(others) - 4} more" if len(others) > 4 else "")
        return f"{self.path} (with {shown})"

    @property
    def summary(self) -> str:
        """``the checkpoint holds model, opt, epoch; no RNG state, no scheduler``."""
        if not self.kinds:
            return f"the checkpoint ({self.kind}) was written by a save whose contents repro-check " \
                   "cannot see"
        names = [k for k in self.keys] or [self.kinds.get("(whole)", "?")]
        shown = []
        for k in names[:12]:
            kind = self.kinds.get(k, "other")
            if kind == "rng" and self.rng:
                shown.append(f"{k} ({', '.join(self.rng)} RNG)")
            elif kind not in ("other", k) and k != "(whole)":
                shown.append(f"{k} ({kind})")
            else:
                shown.append(k if k != "(whole)" else kind)
        if len(names) > 12:
            shown.append(f"and {len(names) - 12} more")
        have = set(self.kinds.values())
        missing = [text for kind, text in (("model", "no model weights"),
                                           ("optimizer", "no optimizer state"),
                                           ("scheduler", "no scheduler"), ("rng", "no RNG state"))
                   if kind not in have]
        return "the checkpoint holds " + ", ".join(shown) + \
            (f"; {', '.join(missing)}" if missing else "")


@dataclass
class ResumePart(JsonRecord, OwnRuns):
    """``resume``: the reference, the interrupted run and the resumed one. Its JSON has
    ``resumes_exactly`` too, which is the report's verdict (:meth:`Report.to_dict`)."""

    JSON_PROPERTIES = ("checkpoint_step", "not_restored_detail")

    at: int = json_field(key="resume_at")
    resume_args: str | None = None
    checkpoint: CheckpointInfo | None = None
    #: the reference and the interrupted run agree up to the checkpoint (None: not compared)
    reference_reproducible: bool | None = None
    not_restored: list[NotRestored] = json_field(default_factory=list,
                                                 convert=lambda ns: [n.state for n in ns])
    #: steps of the reference, the interrupted run and the resumed run
    steps: dict[str, int] = json_field(default_factory=dict, key="resume_steps")
    #: (step, loss) of the reference and of the resumed run (resumed steps numbered as the
    #: reference's), bounded
    curves: dict[str, list[tuple[int, float]]] = json_field(default_factory=dict, skip=True)
    #: saves seen before the one taken: the steps they followed
    earlier_saves: list[int] = json_field(default_factory=list, skip=True)
    #: checkpoints the reference saved after the checkpoint's step, at other paths, moved into
    #: the trace folder before the resumed run (``--resume-args`` without ``{checkpoint}``)
    moved_aside: list[str] = json_field(default_factory=list, key="moved_aside")
    #: why the reference and the interrupted run went one after the other (None: in parallel):
    #: one job (``--jobs 1``, or a CPU too few), or a ``--checkpoint`` file
    serial: str | None = json_field(default=None, skip=True)

    @property
    def not_restored_names(self) -> list[str]:
        return [n.state for n in self.not_restored]

    @property
    def checkpoint_step(self) -> int | None:
        return self.checkpoint.step if self.checkpoint else None

    @property
    def not_restored_detail(self) -> list[NotRestored]:
        return list(self.not_restored)

    @property
    def second(self) -> str:
        """The comparison's run 2: the resumed run, unless the reference was found not
        reproducible (then it is the interrupted run)."""
        return "interrupted" if self.reference_reproducible is False else "resumed"

    def verdict(self, report: Report) -> Verdict | None:
        """Whether the resumed run continues the reference exactly, or which of the two parted
        (None when UNVERIFIED: the verdict any report has)."""
        if report.unverified:
            return None
        if report.reproducible:
            return Verdict("RESUMES EXACTLY", "resumes exactly", "good")
        if self.reference_reproducible is False:
            return Verdict("REFERENCE NOT REPRODUCIBLE", "reference not reproducible", "bad")
        return Verdict("RESUME DIFFERS", "resume differs", "bad")

    def sides(self, report: Report) -> list[str]:
        return ["reference", self.second]

    def run_name(self, index: int) -> str:
        return {1: "reference", 2: self.second, 3: "resumed"}.get(index, f"run {index}")


@dataclass
class Report:
    """What ``repro_check.check`` returns and the CLI prints."""

    target: str
    args: list[str]
    seed: int | None
    components: list[str]
    runs: int
    results: list[RunResult]
    comparison: ComparisonResult | None
    policy: Policy = field(default_factory=Policy)
    max_steps: int | None = None
    threads: int | None = None
    error: str | None = None
    interrupted: bool = False
    trace_dir: str | None = None
    replay: str | None = None
    warnings: list[str] = field(default_factory=list)
    cause: Cause | None = None
    cause_detail: str | None = None
    #: where in the script the cause was made, when known
    cause_location: Location | None = None
    gate: GatePart | None = None
    diagnosis: DiagnosisPart | None = None
    distributed: DistributedPart | None = None
    across: AcrossPart | None = None
    processes: ProcessesPart | None = None
    resume: ResumePart | None = None
    bisect: BisectPart | None = None
    #: what the runs saved and their modules' state at the end, compared (a check's runs)
    saved: SavedPart | None = None
    #: wall-clock seconds the whole command took for this target (runs in parallel count once);
    #: None when not measured (then a JUnit time falls back to the runs' sum)
    wall_seconds: float | None = None
    #: the negative control behind an agreeing verdict (:mod:`repro_check.compare.control`):
    #: None when the runs did not agree (nothing to stand behind)
    control: ControlResult | None = None
    #: two finished runs' logs or checkpoints compared (``diff`` of files that are not traces)
    finished: FinishedPart | None = None

    @property
    def evidence(self) -> Evidence:
        """What the verdict rests on: the steps, metrics and saved tensors compared (two finished
        runs: the most steps of a scalar, the scalars, the checkpoints' tensors)."""
        if self.finished is not None:
            logs, ck = self.finished.logs, self.finished.checkpoints
            scalars = logs.scalars if logs is not None else []
            return Evidence(steps=max((s.steps_compared for s in scalars), default=0),
                            metrics=len(scalars),
                            saved_tensors=ck.tensors_compared if ck is not None else 0)
        cmp = self.comparison
        return Evidence(steps=cmp.steps_compared if cmp else 0,
                        metrics=cmp.metrics_compared if cmp else 0,
                        saved_tensors=self.saved_tensors_compared)

    @property
    def kind_part(self) -> KindPart | None:
        """The part that makes this report a kind of its own (a gate, ``--across``,
        ``resume``), asked in :data:`repro_check.report.kinds.KINDS`' order; None: a check.
        What the kind says of itself is the part's to answer (the JSON's verdict needs it, and
        this module cannot ask the kinds' renderers, which import it)."""
        return self.gate or self.across or self.resume

    @property
    def kind_answers(self) -> KindPart:
        """Who answers for this report's kind: its :attr:`kind_part`, or for a check
        :data:`CHECK_RUNS`."""
        return self.kind_part or CHECK_RUNS

    @property
    def labels(self) -> list[str]:
        """What the two sides of a comparison are called: run 1/run 2, golden/this run, files,
        the environments of the first divergence."""
        return self.kind_answers.sides(self)

    def run_name(self, index: int) -> str:
        """What a run is called in reports: ``run 2``, or its environment with ``--across``."""
        return self.kind_answers.run_name(index) or f"run {index}"

    @property
    def recorded(self) -> bool:
        """A ``record`` report whose golden was written."""
        return self.kind_answers.golden_written()

    @property
    def compares(self) -> bool:
        """The verdict rests on a comparison of the runs (not a single run's, nor a golden
        written): what its evidence counts."""
        return self.kind_answers.compares(self)

    @property
    def incomplete(self) -> list[str]:
        """Why the comparison is incomplete: records a run wrote that were left out (too large
        for a trace line, or unreadable), one line each; such a check is never reproducible."""
        out: list[str] = []
        for r in self.results:
            for why in r.incomplete:
                name = self.kind_answers.incomplete_name(r.index) or self.run_name(r.index)
                line = f"{name}: {why}"
                if line not in out:
                    out.append(line)
        return out

    @property
    def agrees(self) -> bool:
        """The runs (or the run and the golden, or the resume) agree: what the negative control
        then stands behind. Two finished runs agree when all they left does."""
        if self.finished is not None:
            return self.error is None and not self.interrupted and self.finished.same
        return (
            self.error is None
            and not self.interrupted
            and self.comparison is not None
            and self.comparison.reproducible
            and not self.incomplete
        )

    @property
    def verdict_comparison(self) -> ComparisonResult | None:
        """The comparison a verdict may rest on: none when the target failed (a run that crashed
        or raised says nothing about reproducibility, and what it did not record is no
        divergence)."""
        return None if self.error is not None else self.comparison

    @property
    def saved_tensors_compared(self) -> int:
        """Tensors of saved files and of the modules' end state compared between the runs (what
        a verdict's evidence can cite; 0 when nothing was saved or compared)."""
        return self.saved.tensors_compared if self.saved is not None else 0

    @property
    def unverified(self) -> bool:
        """The runs agree, but the change planted on purpose in the control run was not seen:
        the check could not have seen a difference there, so it claims nothing."""
        return self.agrees and self.control is not None and not self.control.verified

    @property
    def reproducible(self) -> bool:
        return self.agrees and not self.unverified

    @property
    def first_divergent_step(self) -> int | None:
        if self.finished is not None:
            return self.finished.first_divergent_step
        return self.verdict_comparison.first_divergent_step if self.verdict_comparison else None

    @property
    def divergent_signal(self) -> Signal | None:
        if self.finished is not None:  # the scalar or the checkpoint key that differs first
            return None if self.finished.same else self.finished.first_divergent
        return self.verdict_comparison.divergent_signal if self.verdict_comparison else None

    @property
    def exit_code(self) -> ExitCode:
        if self.recorded:  # the runs may differ: their spread is what the golden stores
            return ExitCode.REPRODUCIBLE
        if self.interrupted:
            return ExitCode.INTERRUPTED
        if self.error is not None:
            return ExitCode.TARGET_FAILED
        return ExitCode.REPRODUCIBLE if self.reproducible else ExitCode.NOT_REPRODUCIBLE

    @property
    def verdict(self) -> Verdict:
        """The one verdict every renderer shows."""
        if self.interrupted:
            return Verdict("INTERRUPTED", "interrupted", "warn")
        if self.error is not None:
            return Verdict("TARGET FAILED", "target failed", "bad")
        own = self.kind_answers.verdict(self)
        if own is not None:
            return own
        if self.unverified:
            return Verdict("UNVERIFIED", "unverified", "warn")
        if self.finished is not None:
            return Verdict("SAME", "same", "good") if self.reproducible \
                else Verdict("DIFFERS", "differs", "bad")
        if self.reproducible:
            return Verdict("REPRODUCIBLE", "reproducible", "good")
        if self.incomplete and (self.comparison is None or self.comparison.reproducible):
            return Verdict("INCOMPLETE", "incomplete", "bad")
        return Verdict("NOT REPRODUCIBLE", "not reproducible", "bad")

    def metrics_readable(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for k in range(1, self.runs + 1):
            got = self.comparison.metrics_of(k) if self.comparison else {}
            out.append({name: plain_value(v) for name, v in got.items()})
        return out

    def core(self) -> ReportCore:
        """The keys every report has, read from this report as they are now."""
        cmp, judged = self.comparison, self.verdict_comparison
        return ReportCore(
            report_version=REPORT_VERSION,
            reproducible=self.reproducible,
            first_divergent_step=self.first_divergent_step,
            divergent_signal=self.divergent_signal,
            steps=[r.steps for r in self.results],
            metrics=self.metrics_readable(),
            runs=self.runs,
            seed=self.seed,
            error=self.error,
            exit_code=int(self.exit_code),
            cause=self.cause,
            target=self.target,
            args=self.args,
            components=self.components,
            threads=self.threads,
            max_steps=self.max_steps,
            tolerance=self.policy.describe(),
            divergence=judged.divergence if judged else None,
            divergences=[d for d in (judged.per_run.values() if judged else []) if d],
            metric_divergences=list(judged.metric_divergences) if judged else [],
            steps_compared=cmp.steps_compared if cmp else 0,
            metrics_compared=cmp.metrics_compared if cmp else 0,
            metrics_skipped=list(cmp.metrics_skipped) if cmp else [],
            incomplete=self.incomplete,
            identical_groups=cmp.groups if cmp else [],
            judged=dict(cmp.judged) if cmp else {},
            run_results=[
                RunEnd(run=r.index, status=r.status, returncode=r.returncode, signal=r.signal,
                       steps=r.steps, seconds=r.seconds, error=r.error, trace=r.trace_path,
                       warnings=r.warnings, failed_at=r.failed_at)
                for r in self.results
            ],
            environment=(self.results[0].header or {}).get("environment") if self.results
            else None,
            interrupted=self.interrupted,
            trace_dir=self.trace_dir,
            replay=self.replay,
            warnings=self.warnings,
            cause_detail=self.cause_detail,
            cause_location=self.cause_location,
            evidence=self.evidence,
            verdict=self.verdict.word,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON report: the core keys and each part's, a key written twice refused."""
        parts = (self.gate, self.diagnosis, self.distributed, self.across, self.processes,
                 self.bisect, self.saved, self.finished)
        resume = [] if self.resume is None else [
            {"resumes_exactly": self.reproducible}, self.resume.to_dict()]
        control = [] if self.control is None else [{"control": self.control.to_dict()}]
        return merge([self.core().to_dict(),
                      *(part.to_dict() for part in parts if part is not None), *resume,
                      *control])

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n"


def plain_value(enc: Any) -> Any:
    """A metric as a plain JSON number (or a string for NaN/inf)."""
    if isinstance(enc, dict):
        v = enc.get("value")
        if enc.get("dtype") in ("float16", "bfloat16", "float32", "float64"):
            x = values.to_float(enc)
            return x if x == x and abs(x) != float("inf") else str(x)
        return v
    return enc
