"""The line between repro-check and a run's process: what the run is told, what it tells back.

Both sides import this module, and nothing of the other side: the parent (``run/``,
``distributed/``) builds one frozen :class:`RunConfig` per run, serialises it once
(:meth:`RunConfig.to_json`, carried by :mod:`repro_check.trace.runconfig`); the run entry
(:mod:`repro_check.child.main`) reads it once (:meth:`RunConfig.from_json`) and passes the typed
object on. What comes back are trace lines (:mod:`repro_check.trace.format`), which the parent's
readers turn into the typed records below (:func:`record_of`) instead of recognising dicts by
their keys.

Both ends check the trace format's version: a run refuses a configuration of another version
(:class:`ProtocolError`, which it reports as a failed run), and the parent refuses a run whose
header speaks another (:func:`check_version`). Standard library only, as the child starts
before torch is imported.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from repro_check.targets import Target
from repro_check.trace.payloads import (CheckpointNote, ControlNote, EnvCall, Flagged,
                                        GeneratorNote, Location, LoaderNote, ModelBuilt, PatchRow,
                                        RunError, SaveNote, SeedOverride, TraceEnd, TraceHeader,
                                        end_of, env_call, error_of, generator_note, header_of,
                                        loader_note, rows_of)
from repro_check.trace.probes import ProbeOp

#: the trace format's name and version, in every trace's first line and in every run's
#: configuration (docs/trace-format.md)
FORMAT = "repro-check-trace"
VERSION = 2

#: every seeding component, in the order it is applied (:mod:`repro_check.child.seeding.components`)
COMPONENTS: tuple[str, ...] = (
    "hashseed",
    "python",
    "numpy",
    "torch",
    "cuda",
    "cudnn",
    "deterministic_algorithms",
    "dataloader",
    "threads",
)
#: largest seed every component accepts (numpy's legacy seed and PYTHONHASHSEED are 32-bit)
MAX_SEED = 2**32 - 1


class ProtocolError(ValueError):
    """A configuration or a trace header this side cannot take: another version of the format,
    or a field of the wrong kind."""


def check_version(version: Any, what: str) -> None:
    """Refuse a ``version`` other than this side's: the two sides would read each other's
    records wrongly (``what``: whose version it is, for the message)."""
    if version != VERSION:
        raise ProtocolError(f"{what} speaks trace format version {version!r}, this repro-check "
                            f"speaks version {VERSION}: both sides must be the same repro-check")


# ---- what a run is told ------------------------------------------------------------------------
def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _optional_int(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is not None and not _is_int(value):
        raise ProtocolError(f"the run configuration's {key!r} is not a whole number: {value!r}")
    return value


def _optional_str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ProtocolError(f"the run configuration's {key!r} is not a string: {value!r}")
    return value


def _optional_bool(data: Mapping[str, Any], key: str) -> bool | None:
    value = data.get(key)
    if value is not None and not isinstance(value, bool):
        raise ProtocolError(f"the run configuration's {key!r} is not true or false: {value!r}")
    return value


def _strings(data: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ProtocolError(f"the run configuration's {key!r} is not a list of strings")
    return tuple(value)


#: the roles of a resume's runs (``repro-check resume``)
RESUME_ROLES = ("reference", "interrupted", "resumed")
#: the restored states a resume's control can leave out
LEFT_OUT = ("rng", "optimizer")


@dataclass(frozen=True)
class ResumeSettings:
    """What a run of ``repro-check resume`` is told beside the rest (:mod:`repro_check.child.observe.checkpoint`
    reads it): its ``role``; for the interrupted run, ``stop_at`` (stop right after the first save
    made once that many steps are recorded) and ``copy_dir`` (where the save's copy goes);
    ``checkpoint``, ``--checkpoint``'s path or glob (a file whose save is not seen); ``lock``, the
    file through which the reference and the interrupted run save one at a time."""

    role: str
    stop_at: int | None = None
    copy_dir: str | None = None
    checkpoint: str | None = None
    lock: str | None = None
    #: the resume's negative control (a resumed run): the restored state it leaves out on
    #: purpose, ``"rng"`` or ``"optimizer"`` (:mod:`repro_check.child.seeding.control`)
    leave_out: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> ResumeSettings:
        if not isinstance(data, dict) or data.get("role") not in RESUME_ROLES:
            raise ProtocolError("the run configuration's 'resume' names no role of a resume")
        leave_out = _optional_str(data, "leave_out")
        if leave_out not in (None, *LEFT_OUT):
            raise ProtocolError(f"the run configuration's 'leave_out' is no state: {leave_out!r}")
        return cls(role=data["role"], stop_at=_optional_int(data, "stop_at"),
                   copy_dir=_optional_str(data, "copy_dir"),
                   checkpoint=_optional_str(data, "checkpoint"), lock=_optional_str(data, "lock"),
                   leave_out=leave_out)


#: where a control run plants its change (:mod:`repro_check.child.seeding.control`)
CONTROL_PLACES = ("step", "forward")


@dataclass(frozen=True)
class ControlSettings:
    """What the negative control's run is told (:mod:`repro_check.child.seeding.control`): plant a
    1-ulp change ``where``: ``"step"``, in one element of a tensor step ``step`` trained, right
    after that step is recorded; ``"forward"`` (the runs recorded no step), in a parameter of the
    first module called, before its forward, or, when no module is called, in final metric
    ``metric`` as reported."""

    where: str = "step"
    step: int = 1
    metric: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> ControlSettings:
        if not isinstance(data, dict) or data.get("where") not in CONTROL_PLACES:
            raise ProtocolError("the run configuration's 'control' names no place to plant")
        step = _optional_int(data, "step")
        return cls(where=data["where"], step=1 if step is None else step,
                   metric=_optional_str(data, "metric"))


@dataclass(frozen=True)
class RunConfig:
    """Everything a run's process is told: what to run, how to seed it, what to record.

    Made by the parent from its :class:`~repro_check.run.options.RunOptions` (one per run),
    written once, read once by the run entry; the field names are those of the options."""

    #: the run's number (1, 2, ...): the trace header's ``run``, and the clock shift
    run: int
    target: Target
    args: tuple[str, ...] = ()
    seed: int | None = 0
    components: tuple[str, ...] = COMPONENTS
    threads: int | None = 1
    max_steps: int | None = None
    warn_only: bool = False
    probe_step: int | None = None
    #: ``--metric NAME=REGEX`` rules (picked by the parent; in the header for ``verify``)
    printed_metrics: tuple[tuple[str, str], ...] = ()
    #: ``diagnose``'s pin plan: a JSON file the run reads (:mod:`repro_check.child.seeding.pin`, through
    #: the environment, as the target's own processes read it too)
    pin_plan: str | None = None
    #: the descriptor trace lines go to (set by whoever starts the run entry)
    event_fd: int | None = None
    #: under torchrun: the folder each rank writes its events to
    distributed: str | None = None
    #: recording the processes the target starts: the folder their streams go to
    processes: str | None = None
    #: a run of ``repro-check resume``: its role, where it stops, where its checkpoint's copy goes
    resume: ResumeSettings | None = None
    #: what an ``--across`` environment imposes inside the run (:mod:`repro_check.child.seeding.overrides`;
    #: None: left alone): every DataLoader's ``num_workers``, the multiprocessing start method,
    #: and ``torch.compile`` off (False)
    num_workers: int | None = None
    start_method: str | None = None
    compile: bool | None = None
    #: the negative control's run: where it plants a 1-ulp change (None: a plain run)
    control: ControlSettings | None = None
    #: the trace format the parent reads
    version: int = VERSION

    def __post_init__(self) -> None:
        # sequences given as lists (the API's, a test's) are kept as tuples: the object is frozen
        for name in ("args", "components"):
            value = getattr(self, name)
            if not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        if not isinstance(self.printed_metrics, tuple):
            object.__setattr__(self, "printed_metrics",
                               tuple((a, b) for a, b in self.printed_metrics))

    def replace(self, **changes: Any) -> RunConfig:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> str:
        """The one serialised form (what :mod:`repro_check.trace.runconfig` carries)."""
        return json.dumps({
            "version": self.version,
            "run": self.run,
            "target": self.target.to_dict(),
            "args": list(self.args),
            "seed": self.seed,
            "components": list(self.components),
            "threads": self.threads,
            "max_steps": self.max_steps,
            "warn_only": self.warn_only,
            "probe_step": self.probe_step,
            "printed_metrics": [list(rule) for rule in self.printed_metrics],
            "pin_plan": self.pin_plan,
            "event_fd": self.event_fd,
            "distributed": self.distributed,
            "processes": self.processes,
            "resume": self.resume.to_dict() if self.resume is not None else None,
            "num_workers": self.num_workers,
            "start_method": self.start_method,
            "compile": self.compile,
            "control": self.control.to_dict() if self.control is not None else None,
        })

    @classmethod
    def from_json(cls, text: str | bytes) -> RunConfig:
        """The configuration :meth:`to_json` wrote; :class:`ProtocolError` for one of another
        version or a broken one."""
        try:
            data = json.loads(text)
        except ValueError as e:
            raise ProtocolError(f"the run configuration is not JSON: {e}") from None
        if not isinstance(data, dict):
            raise ProtocolError("the run configuration is not a JSON object")
        check_version(data.get("version"), "the run configuration")
        target = data.get("target")
        if not isinstance(target, dict) or not isinstance(target.get("text"), str) \
                or not isinstance(target.get("kind"), str):
            raise ProtocolError("the run configuration names no target")
        try:
            tgt = Target(**target)
        except TypeError as e:
            raise ProtocolError(f"the run configuration's target is broken: {e}") from None
        rules = data.get("printed_metrics", [])
        if not isinstance(rules, list) or not all(
                isinstance(r, list) and len(r) == 2 and all(isinstance(x, str) for x in r)
                for r in rules):
            raise ProtocolError("the run configuration's 'printed_metrics' are not pairs")
        run = _optional_int(data, "run")
        return cls(
            run=1 if run is None else run,
            target=tgt,
            args=_strings(data, "args"),
            seed=_optional_int(data, "seed"),
            components=_strings(data, "components"),
            threads=_optional_int(data, "threads"),
            max_steps=_optional_int(data, "max_steps"),
            warn_only=bool(data.get("warn_only", False)),
            probe_step=_optional_int(data, "probe_step"),
            printed_metrics=tuple((a, b) for a, b in rules),
            pin_plan=_optional_str(data, "pin_plan"),
            event_fd=_optional_int(data, "event_fd"),
            distributed=_optional_str(data, "distributed"),
            processes=_optional_str(data, "processes"),
            resume=ResumeSettings.from_dict(data["resume"])
            if data.get("resume") is not None else None,
            num_workers=_optional_int(data, "num_workers"),
            start_method=_optional_str(data, "start_method"),
            compile=_optional_bool(data, "compile"),
            control=ControlSettings.from_dict(data["control"])
            if data.get("control") is not None else None,
            version=data["version"],
        )


# ---- what a run tells back ---------------------------------------------------------------------
@dataclass
class Record:
    """One trace record, as the parent reads it. ``proc`` is the process of the target it came
    from (``None``: the run's main process), ``rank`` the torchrun rank (``None`` without);
    ``raw`` is the record as written (the trace files keep it byte for byte)."""

    raw: dict[str, Any] = field(repr=False)

    @property
    def proc(self) -> int | None:
        value = self.raw.get("proc")
        return value if _is_int(value) else None

    @property
    def rank(self) -> int | None:
        value = self.raw.get("rank")
        return value if _is_int(value) else None


@dataclass
class HeaderRecord(Record):
    """The first line: what was run, how it was seeded, in which environment."""

    header: TraceHeader = field(default_factory=TraceHeader)
    version: int = VERSION


@dataclass
class StepRecord(Record):
    """One optimizer step's signals (encoded values or fingerprints)."""

    step: int = 0
    signals: dict[str, Any] = field(default_factory=dict)

    @property
    def band(self) -> dict[str, Any] | None:
        """A golden of repeats: each signal's ``{"min", "max"}`` over the runs it recorded."""
        band = self.raw.get("band")
        return band if isinstance(band, dict) else None


@dataclass
class MetricsRecord(Record):
    """The run's final metrics (encoded values)."""

    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass
class WarningRecord(Record):
    """A warning; ``component`` set when the target overrode a seeding component (the seeding
    watch's record, read into :attr:`override`); ``incomplete`` when a record was left out."""

    warning: str = ""
    incomplete: bool = False
    component: str | None = None
    override: SeedOverride | None = None


@dataclass
class ErrorRecord(Record):
    """Why the run failed: ``{"kind", "message", "traceback", ...}``."""

    error: RunError = field(default_factory=RunError)


@dataclass
class InfoRecord(Record):
    """Something the run noticed: its end (``status``), a generator or DataLoader it made, the
    models of step 1, the steps it expects, a torchrun rank's process, a resume's saves."""

    info: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str | None:
        value = self.info.get("status")
        return None if value is None else str(value)


@dataclass
class EndedInfo(InfoRecord):
    """The target returned, stopped or exited (``{"info": {"status": ...}}``): the
    :attr:`status` it ended with, the steps it recorded, its backward calls, a process's exit
    code, and the metrics a run stopped by ``--max-steps`` held (not final)."""

    steps: int = 0
    backward_calls: int = 0
    exitcode: int | None = None
    held_metrics: tuple[str, ...] | None = None


@dataclass
class GeneratorInfo(InfoRecord):
    """A private generator the script made, seeded or first drew from
    (:mod:`repro_check.child.seeding.pin`)."""

    note: GeneratorNote | None = None


@dataclass
class LoaderInfo(InfoRecord):
    """A DataLoader the script made, or an epoch it started (:mod:`repro_check.child.seeding.pin`)."""

    note: LoaderNote | None = None


@dataclass
class EnvInfo(InfoRecord):
    """One of the first calls of an RL environment (:mod:`repro_check.child.observe.env_hooks`)."""

    call: EnvCall | None = None


@dataclass
class DrawInfo(InfoRecord):
    """A global random stream a DataLoader fetch drew from (``worker``: in a worker process),
    noted once a stream (:mod:`repro_check.child.observe.watch`)."""

    stream: str = ""
    worker: bool = False


@dataclass
class PatchesInfo(InfoRecord):
    """What the run patched, and what it skipped (``--debug``, :mod:`repro_check.child.patches`)."""

    rows: tuple[PatchRow, ...] = ()


@dataclass
class ModelsInfo(InfoRecord):
    """The top-level models whose parameters went into step 1 (:mod:`repro_check.child.observe.initial`),
    and how many of those parameters were in memory shared with other processes."""

    models: tuple[ModelBuilt, ...] = ()
    shared_params: int = 0


@dataclass
class CheckpointedInfo(InfoRecord):
    """A resume's interrupted run: the checkpoint it took and copied, before it stopped
    (:mod:`repro_check.child.observe.checkpoint`)."""

    checkpoint: CheckpointNote = field(default_factory=lambda: CheckpointNote(0, ""))


@dataclass
class SaveInfo(InfoRecord):
    """A resume's run: a save it made that was not (yet) the checkpoint taken."""

    save: SaveNote = field(default_factory=SaveNote)


@dataclass
class ControlInfo(InfoRecord):
    """The negative control's run: what it planted where, or the restored state it left out
    (:mod:`repro_check.child.seeding.control`)."""

    control: ControlNote = field(default_factory=lambda: ControlNote(False))


@dataclass
class ExpectedStepsInfo(InfoRecord):
    """The steps the run expects in all, as its DataLoader tells (:mod:`repro_check.child.observe.capture`)."""

    total: int = 0


@dataclass
class BatchSamplesInfo(InfoRecord):
    """The samples of the batches of step 1, as the leading size of each batch's first tensor
    (:mod:`repro_check.child.observe.capture`): under torchrun, the ranks' add up to the global
    batch that ``--across nproc=`` compares."""

    samples: int = 0


#: the kinds of a :class:`SavedRecord`: a file the run saved, the modules' state at its end
SAVED_FILE = "file"
SAVED_STATE = "state"
SAVED_KINDS = (SAVED_FILE, SAVED_STATE)


@dataclass(frozen=True)
class SavedTensor:
    """One tensor or array of a save: its key path in the saved object, dtype, shape and the
    fingerprint of its exact bytes."""

    key: str
    dtype: str
    shape: tuple[int, ...]
    digest: str


@dataclass
class SavedRecord(InfoRecord):
    """What a run saved (``kind`` ``file``: the ``order``-th save of the run, by ``saver``, to
    ``path`` relative to its working folder, after ``step`` optimizer steps, at ``location`` in the
    script) or its modules' state at its end (``state``): ``count`` tensors, described one by one
    in ``tensors`` (:mod:`repro_check.child.observe.saved`). Written as ``{"info": {"saved": {...}}}``."""

    kind: str = SAVED_FILE
    order: int = 0
    saver: str = ""
    path: str | None = None
    step: int = 0
    #: where in the script the save's call was made (None: not known)
    location: Location | None = None
    count: int = 0
    tensors: tuple[SavedTensor, ...] = ()

    @classmethod
    def of(cls, raw: dict[str, Any], body: Mapping[str, Any]) -> SavedRecord:
        """The record of a line whose ``info`` holds ``saved`` (checked by the trace reader;
        malformed rows are left out here too)."""
        rows = body.get("tensors")
        tensors = tuple(
            SavedTensor(r[0], r[1], tuple(r[2]), r[3]) for r in (rows if isinstance(rows, list)
                                                                else ())
            if isinstance(r, list) and len(r) == 4 and isinstance(r[0], str)
            and isinstance(r[1], str) and isinstance(r[2], list) and isinstance(r[3], str))
        path = body.get("path")
        return cls(raw, dict(raw["info"]),
                   kind=str(body.get("kind", SAVED_FILE)),
                   order=body["order"] if _is_int(body.get("order")) else 0,
                   saver=str(body.get("saver", "")),
                   path=path if isinstance(path, str) else None,
                   step=body["step"] if _is_int(body.get("step")) else 0,
                   location=Location.of(body.get("location")),
                   count=body["count"] if _is_int(body.get("count")) else len(tensors),
                   tensors=tensors)


#: the environment variable that asks for repro-check's debugging output (``--debug``)
DEBUG_VAR = "REPRO_CHECK_DEBUG"
#: tells a run at another git revision the repository's folder and that revision's checkout
#: (``ROOT{os.pathsep}CHECKOUT``): nothing it imports may come from the working tree
REVISION_VAR = "REPRO_CHECK_REVISION"


def patch_line(row: Mapping[str, Any]) -> str:
    """One row of a run's patch listing (``{"info": {"patches": [...]}}``) as a line: the patched
    callable and its features, outermost last, or why they were skipped."""
    parsed = PatchRow.parse(dict(row))
    return parsed.line if parsed is not None else ""


@dataclass
class ProbeRecord(Record):
    """One record of the probed step (``diagnose``): an op, a module's output, a tensor made from
    outside data, an environment's call (:mod:`repro_check.trace.probes`); None when the run
    sent one of no known kind or malformed."""

    probe: ProbeOp | None = None


@dataclass
class FlaggedRecord(Record):
    """An op PyTorch reports as nondeterministic."""

    flagged: Flagged = field(default_factory=lambda: Flagged(""))


@dataclass
class EndRecord(Record):
    """The last line of a trace the parent wrote: how the run ended."""

    end: TraceEnd = field(default_factory=TraceEnd)


@dataclass
class OtherRecord(Record):
    """A record of a kind this reader does not know (a newer run entry): kept, not used."""


def record_of(obj: Mapping[str, Any]) -> Record:
    """The typed record of one validated trace line (:func:`repro_check.trace.format.parse_event`
    checked its fields; a header line is checked here: its version must be this side's)."""
    raw = dict(obj)
    if "format" in raw and "header" in raw:
        check_version(raw.get("version"), "the run")
        return HeaderRecord(raw, header_of(raw["header"]), VERSION)
    if "step" in raw:
        return StepRecord(raw, raw["step"], raw.get("signals") or {})
    if "metrics" in raw:
        return MetricsRecord(raw, raw["metrics"])
    if "warning" in raw:
        component = raw.get("component")
        return WarningRecord(raw, str(raw["warning"]), raw.get("incomplete") is True,
                             component if isinstance(component, str) else None,
                             SeedOverride.parse(raw))
    if "error" in raw:
        return ErrorRecord(raw, error_of(raw["error"]))
    if "info" in raw and isinstance(raw["info"], dict):
        return info_record(raw, raw["info"])
    if "probe" in raw:
        return ProbeRecord(raw, ProbeOp.parse(raw["probe"]))
    if "flagged" in raw:
        return FlaggedRecord(raw, Flagged.parse(raw["flagged"]))
    if "end" in raw and isinstance(raw["end"], dict):
        return EndRecord(raw, end_of(raw["end"]))
    return OtherRecord(raw)


def info_record(raw: dict[str, Any], info: dict[str, Any]) -> InfoRecord:
    """The typed record of an ``info`` line, by what it holds; a payload that cannot be taken
    leaves a plain :class:`InfoRecord` that no reader uses."""
    if isinstance(info.get("saved"), dict):
        return SavedRecord.of(raw, info["saved"])
    if "generator" in info:
        note = generator_note(info["generator"])
        if note is not None:
            return GeneratorInfo(raw, info, note)
    elif "loader" in info:
        loader = loader_note(info["loader"])
        if loader is not None:
            return LoaderInfo(raw, info, loader)
    elif "env" in info:
        call = env_call(info["env"])
        if call is not None:
            return EnvInfo(raw, info, call)
    elif isinstance(info.get("draw"), dict):
        drawn = info["draw"]
        return DrawInfo(raw, info, str(drawn.get("stream")), drawn.get("worker") is True)
    elif isinstance(info.get("patches"), list):
        return PatchesInfo(raw, info, rows_of(info["patches"]))
    elif isinstance(info.get("models"), list):
        shared = _int_or(info.get("shared_params"), 0)
        return ModelsInfo(raw, info, tuple(m for m in map(ModelBuilt.parse, info["models"])
                                           if m is not None), max(shared, 0))
    elif "checkpoint" in info or "save" in info or "control" in info:
        typed = _saved_or_planted(raw, info)
        if typed is not None:
            return typed
    elif _is_int(info.get("expected_steps")):
        return ExpectedStepsInfo(raw, info, info["expected_steps"])
    elif _is_int(info.get("batch_samples")) and info["batch_samples"] >= 0:
        return BatchSamplesInfo(raw, info, info["batch_samples"])
    if info.get("status") is not None:
        held = info.get("held_metrics")
        return EndedInfo(raw, info, steps=_int_or(info.get("steps"), 0),
                         backward_calls=_int_or(info.get("backward_calls"), 0),
                         exitcode=info["exitcode"] if _is_int(info.get("exitcode")) else None,
                         held_metrics=tuple(str(n) for n in held) if isinstance(held, list)
                         else None)
    return InfoRecord(raw, info)


def _saved_or_planted(raw: dict[str, Any], info: dict[str, Any]) -> InfoRecord | None:
    """The record of a resume's checkpoint or save, or of a control's plant; None when its
    payload cannot be taken."""
    checkpoint = CheckpointNote.parse(info.get("checkpoint"))
    if checkpoint is not None:
        return CheckpointedInfo(raw, info, checkpoint)
    save = SaveNote.parse(info.get("save"))
    if save is not None:
        return SaveInfo(raw, info, save)
    control = ControlNote.parse(info.get("control"))
    return ControlInfo(raw, info, control) if control is not None else None


def typed_info(record: InfoRecord) -> InfoRecord:
    """The typed record of an info record built as a plain one (by a test, an API user)
    rather than read by :func:`record_of`; a typed one as it is."""
    return info_record(record.raw, record.info) if type(record) is InfoRecord else record


def _int_or(value: Any, default: int) -> int:
    return value if _is_int(value) else default


def records_of(objs: Sequence[Mapping[str, Any]]) -> list[Record]:
    return [record_of(o) for o in objs]
