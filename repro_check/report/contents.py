"""The records a report's parts hold: typed, each written to JSON from its fields
(:mod:`repro_check.trace.jsonfields`), under the keys the JSON report has always had."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from repro_check.trace.payloads import RunError
from repro_check.compare.cause import Cause
from repro_check.trace.jsonfields import JsonRecord, json_field
from repro_check.trace.results import FailurePoint, Location, ProcessResult, Status
from repro_check.trace.signals import Signal


@dataclass
class RunEnd(JsonRecord):
    """How one run ended, as ``run_results`` lists it."""

    run: int
    status: Status
    returncode: int | None
    #: the POSIX signal that killed it (``SIGKILL``), not a divergent signal
    signal: str | None
    steps: int
    seconds: float = json_field(digits=3)
    error: RunError | None = None
    trace: str | None = None
    warnings: list[str] = field(default_factory=list)
    #: where a failed run stopped: while importing a module, before the target's first line
    failed_at: FailurePoint | None = json_field(default=None, omit_none=True)


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}{'' if n == 1 else 's'}"


@dataclass
class Evidence(JsonRecord):
    """What a verdict rests on: how many steps, final metrics and saved tensors were compared
    (``evidence`` in the JSON). A verdict resting on no step says so: the training itself was
    not seen, only what it returned."""

    JSON_PROPERTIES = ("training_seen",)

    #: steps compared between the runs (or with the golden)
    steps: int
    #: final metrics compared
    metrics: int
    #: tensors of the files the runs saved, compared (0 when none was)
    saved_tensors: int = 0

    @property
    def training_seen(self) -> bool:
        """Whether any training step was compared."""
        return self.steps > 0

    def what(self) -> str:
        """``12 steps, 1 metric``: the counts, the ones that are not zero (steps always)."""
        parts = [_count(self.steps, "step")] if self.steps else []
        if self.metrics:
            parts.append(_count(self.metrics, "metric"))
        if self.saved_tensors:
            parts.append(_count(self.saved_tensors, "saved tensor"))
        if not parts:
            return "nothing compared"
        return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]

    def text(self) -> str:
        """The verdict line's account: ``rests on 12 steps and 1 metric``, or, without a step,
        ``no training step was seen; the verdict rests on 1 metric``."""
        if self.training_seen:
            return f"rests on {self.what()}"
        others = Evidence(0, self.metrics, self.saved_tensors)
        return f"no training step was seen; the verdict rests on {others.what()}"


@dataclass
class FlaggedOp(JsonRecord):
    """An op PyTorch flags as nondeterministic: the earliest step and call site any run saw it
    at, and the runs that flagged it."""

    op: str
    step: int | None = None
    where: str | None = None
    runs: list[int] = field(default_factory=list)


@dataclass
class Source(JsonRecord):
    """One source of non-determinism ``diagnose`` found, and the pin that took it out of the next
    pair of runs (:mod:`repro_check.diagnose.sources`)."""

    step: int | None
    signal: Signal | None
    cause: Cause | None
    #: under torchrun: the rank where the difference entered
    rank: int | None = json_field(default=None)
    detail: str | None = None
    culprit: str | None = None
    culprit_op: str | None = None
    #: where in the script
    location: Location | None = None
    #: the calls that led there, outermost first
    stack: list[Location] = field(default_factory=list)
    #: what the next pair pins (its replay plan), not in the JSON
    pin: dict[str, Any] | None = json_field(default=None, skip=True)
    pinned_by: str | None = None


@dataclass
class SourcesCost(JsonRecord):
    """What looking for the sources took: the pinned runs and their seconds."""

    runs: int
    seconds: float = json_field(digits=3)


@dataclass
class DesyncRankValue(JsonRecord):
    """A rank's parameters fingerprint at a rank desync."""

    rank: int
    run: int
    params: str
    differs: bool


@dataclass
class MetricRankValue(JsonRecord):
    """A rank's final metric in run 1 (``reference``) and in the divergent run."""

    rank: int
    reference: Any
    value: Any
    differs: bool


@dataclass
class StepRankValue(JsonRecord):
    """A rank's value of the divergent signal at the divergent step, in run 1 and the other run."""

    rank: int
    signal: Signal
    reference: Any
    value: Any
    differs: bool


RankValue = DesyncRankValue | MetricRankValue | StepRankValue


@dataclass
class FailedRank(JsonRecord):
    """The rank that failed first, and in which run."""

    run: int
    rank: int


@dataclass(frozen=True)
class EnvCall(JsonRecord):
    """An environment's call whose observation differs between the runs: which call and where
    the script made it; its JSON is ``{"call", "file", "line", "function"}``."""

    #: ``reset`` or ``step``
    call: str
    location: Location = json_field(flatten=True)


@dataclass(frozen=True)
class OutputDifference(JsonRecord):
    """How far a model's output differs between the two sides at the localized step: the
    largest absolute difference (``largest``, None when only the fingerprints could be
    compared: more values than the probe keeps, or not floating point), the index where it
    is, the number of values, and whether the model ran compiled (``torch.compile``)."""

    module: str
    compiled: bool = False
    largest: float | None = None
    at: list[int] | None = None
    values: int | None = None
    shape: list[int] | None = None

    @property
    def said(self) -> str:
        """``largest |Δ| 2.98e-08 at [12, 0] of 32 x 1 values``, or why there is none."""
        if self.largest == 0.0 and not self.at:
            return "its output has the same bits"
        if self.largest is None:
            return ("compared by fingerprint only (more values than the probe keeps, or not "
                    "floating point)")
        shape = " x ".join(map(str, self.shape or [])) or "1"
        at = ", ".join(map(str, self.at or []))
        return f"largest |Δ| {self.largest:.3g} at [{at}] of its {shape} output values"


@dataclass
class CompiledCall(JsonRecord):
    """Inside a compiled model that differs: what PyTorch's DebugMode recorded of it on both
    sides (the ops and kernels it dispatched, with their inputs' and outputs' fingerprints)
    and the first call whose output differs (``name``, the ``index``-th of ``calls``), or the
    first where the two sides ran other calls (``parted``). ``inputs_agree``: that call had
    the same inputs on both sides (it returns other bits by itself), else the difference
    arose before it, in code DebugMode does not see (kernels inductor fused on the CPU) or in
    the model's inputs. ``graphs`` and ``breaks``: the graphs dynamo made in the process and
    why it broke them. ``missing``: why nothing was recorded; ``one_side``: only one side ran
    it compiled."""

    model: str
    calls: int = 0
    name: str | None = None
    index: int | None = None
    inputs_agree: bool | None = None
    parted: bool = False
    graphs: int | None = None
    breaks: list[str] = field(default_factory=list)
    missing: str | None = None
    #: only one side ran it compiled (eager against compiled): nothing to compare call by call
    one_side: bool = False

    @property
    def split(self) -> str:
        """``; dynamo made 2 graphs in the run and gives 1 reason for graph breaks: ...``, or
        '' where dynamo's counters were not read."""
        if not self.graphs:
            return ""
        said = f"; dynamo made {self.graphs} graph{'s' if self.graphs != 1 else ''} in the run"
        if self.breaks:
            said += (f" and gives {len(self.breaks)} reason"
                     f"{'s' if len(self.breaks) != 1 else ''} for graph breaks: "
                     f"{self.breaks[0]}")
        return said

    @property
    def said(self) -> str:
        """What DebugMode's record tells of the compiled model, as a clause."""
        split = self.split
        seen = (f"PyTorch's DebugMode recorded {self.calls} op and kernel call"
                f"{'s' if self.calls != 1 else ''} inside it")
        if self.one_side:
            return f"{seen} on the side that ran it compiled{split}"
        if self.missing:
            return f"PyTorch's DebugMode recorded nothing inside it ({self.missing}){split}"
        if self.name is None:
            return (f"{seen} and all agree, so the difference arose in what it does not see "
                    "(the kernels inductor fused on the CPU, the compiled backward)" + split)
        if self.parted:
            return (f"{seen}, and from call {self.index} on the two sides ran other calls "
                    f"({self.name}){split}")
        if self.inputs_agree:
            return (f"{seen}; the first whose output differs is {self.name} (call {self.index}), "
                    f"and its inputs agree: it returns other bits for the same inputs{split}")
        return (f"{seen}; the first whose output differs is {self.name} (call {self.index}), "
                "and its inputs already differ: the difference arose before it, in code "
                f"DebugMode does not see (kernels inductor fused on the CPU){split}")


@dataclass
class Localization(JsonRecord):
    """The outcome of comparing one step's probe records of two runs."""

    step: int
    found: bool = False
    phase: str | None = None
    module: str | None = None
    op: str | None = None
    op_index: int | None = None
    inputs_agree: bool | None = None
    differing_inputs: list[int] = field(default_factory=list)
    first_module_forward: str | None = None
    first_module_backward: str | None = None
    #: the first module's (a model's) output difference, where its values were recorded
    output_difference: OutputDifference | None = None
    #: the first parameter whose gradient differs at the step (its name in ``module``), and
    #: how far, where no model's output differs
    gradient_difference: OutputDifference | None = None
    #: inside a compiled model that differs: what PyTorch's DebugMode recorded of it
    compiled_call: CompiledCall | None = None
    ops_compared: int = 0
    detail: str = ""
    #: ``"rng"`` when a random op drew different numbers from the same inputs, or a value from
    #: outside the recorded ops differs; ``"code"`` when the two sides run different code
    #: (bisect's GOOD and first commit that differs) and that is what differs; else ``"compute"``
    cause: Literal["rng", "compute", "code"] | None = None
    #: where a differing value from outside torch entered
    entered: Location | None = None
    #: the function that made it a tensor (``torch.as_tensor``)
    entered_by: str | None = None
    #: the environment call that returned the differing observation
    env_call: EnvCall | None = None

    @property
    def location(self) -> Location | None:
        """Where to fix it: the environment call, else the line where the value entered."""
        return self.env_call.location if self.env_call is not None else self.entered


class _Judged(Protocol):
    """What a pair of ablation runs is read from (a :class:`~repro_check.report.model.Report`)."""

    @property
    def reproducible(self) -> bool: ...
    @property
    def error(self) -> str | None: ...
    @property
    def first_divergent_step(self) -> int | None: ...
    @property
    def divergent_signal(self) -> Signal | None: ...
    @property
    def cause(self) -> Cause | None: ...
    @property
    def results(self) -> Sequence[Any]: ...


@dataclass
class PairResult(JsonRecord):
    """The verdict of one pair of runs of the seeding ablation."""

    label: str
    off: list[str]
    reproducible: bool
    error: str | None = None
    first_divergent_step: int | None = None
    divergent_signal: Signal | None = None
    cause: Cause | None = None
    seconds: float = json_field(default=0.0, digits=3)

    @classmethod
    def of(cls, label: str, off: Sequence[str], report: _Judged) -> PairResult:
        return cls(
            label=label,
            off=list(off),
            reproducible=report.reproducible,
            error=report.error,
            first_divergent_step=report.first_divergent_step,
            divergent_signal=report.divergent_signal,
            cause=report.cause,
            seconds=max((r.seconds for r in report.results), default=0.0),
        )

    def outcome(self) -> str:
        """One short phrase: what the pair showed."""
        if self.error is not None:
            return "failed"
        if self.reproducible:
            return "reproducible"
        where = f"step {self.first_divergent_step}" if self.first_divergent_step else "metrics"
        return f"diverged at {where} ({self.divergent_signal})"


#: whether a workload needs a seeding component (unknown: the pair without it failed)
Need = Literal["needed", "not needed", "unknown"]


@dataclass
class AblationRow(JsonRecord):
    """One row of the seeding ablation: a component (None: the pair with no seeding at all),
    whether this workload needs it, and the pair of runs without it (its keys in the row)."""

    component: str | None
    verdict: Need | None
    pair: PairResult = json_field(flatten=True)


@dataclass
class PriceRow(JsonRecord):
    """A deterministic=on environment beside its deterministic=off twin: seconds per step of
    each (``measure``: between the first and last step, ``loop``, or over the whole run,
    ``run``), on / off, and whether the difference is inside the step times' spread."""

    on: str
    off: str
    measure: Literal["loop", "run"]
    on_seconds_per_step: float | None
    off_seconds_per_step: float | None
    ratio: float | None
    on_step_spread: float | None
    off_step_spread: float | None
    #: None when a side has too few steps to tell
    within_noise: bool | None


@dataclass
class CompilePriceRow(PriceRow):
    """A compile=on environment beside its compile=off twin, as :class:`PriceRow`, with each
    side's whole run over its steps too (the compiling inside it)."""

    on_run_seconds_per_step: float | None = None
    off_run_seconds_per_step: float | None = None


@dataclass
class MetricPair(JsonRecord):
    """A final metric of environment ``a`` and ``b`` as plain numbers, and their difference."""

    name: str
    a: Any
    b: Any
    abs_diff: float | None
    identical: bool


@dataclass
class ProcessRow(JsonRecord):
    """A process the target started (0: the main one): its steps, end and trace in each run."""

    process: int
    steps: list[int]
    status: list[Status | None]
    traces: list[str | None]


@dataclass
class ProcessRun(JsonRecord):
    """Every process one run started, as each ended."""

    run: int
    processes: list[ProcessResult]


@dataclass
class EnvironmentDifference(JsonRecord):
    """An environment entry that differs between the reference and the other side, and the
    sentence that says so."""

    key: str
    label: str
    reference: Any
    value: Any
    text: str


@dataclass
class DistributedLaunch(JsonRecord):
    """How a torchrun check launched its runs (torchrun's options as given, and the arguments of
    run 1), and what its comparison saw: the ranks, a DDP model, the steps checked across
    ranks."""

    launcher: str
    nproc_per_node: int
    nnodes: str
    torchrun_args: list[str]
    ranks: list[int] = field(default_factory=list)
    ddp_model_seen: bool = False
    cross_rank_steps: int = 0
    node_rank: int | None = json_field(default=None, omit_none=True)
    rdzv_backend: str | None = json_field(default=None, omit_none=True)
    rdzv_endpoint: str | None = json_field(default=None, omit_none=True)
    rdzv_id: str | None = json_field(default=None, omit_none=True)
    rdzv_conf: str | None = json_field(default=None, omit_none=True)
    master_addr: str | None = json_field(default=None, omit_none=True)
    master_port: int | None = json_field(default=None, omit_none=True)
