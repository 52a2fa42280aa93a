"""What a run's records carry, typed: each payload the run's process sends, parsed once where its
line becomes a record (:func:`repro_check.trace.protocol.record_of`), so that no reader on the
parent's side re-learns a payload's shape from its keys.

Everything here comes from the target's process and is untrusted: a parser checks each field's
kind, cuts text to size and returns None for a payload it cannot take (the record is then kept as
a plain one and used by nobody). The wire format stays as it is (docs/trace-format.md); these are
its readers. Standard library only: the run's process imports the trace package before torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias, TypedDict, cast

from repro_check.trace.jsonfields import JsonRecord

#: a JSON value as a run sends it (a seed's value, a planted change's ``before``)
JsonValue: TypeAlias = "None | bool | int | float | str | list[JsonValue] | dict[str, JsonValue]"


def _int(value: object) -> int | None:
    """``value`` when it is a whole number (a bool is not), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object, size: int) -> str | None:
    """``value`` cut to ``size`` characters when it is a string, else None."""
    return value[:size] if isinstance(value, str) else None


# ---- a place in the script ------------------------------------------------------------------
@dataclass(frozen=True)
class Location(JsonRecord):
    """A place in the target's code, as a run recorded it (where a seed, a generator, a
    DataLoader, a model or a value from outside torch was made). Its JSON is ``{"file", "line",
    "function"}``, ``function`` null when the run did not record it. A run writes a place two
    ways, ``{"file", "line", "function"}`` (:meth:`of`) and ``"file:line"`` (:meth:`of_site`);
    both are read here, once."""

    file: str
    line: int
    function: str | None = None

    @classmethod
    def of(cls, value: object) -> Location | None:
        """The location a run's record holds (``{"file", "line", "function"}``, untrusted: it
        comes from the target's process), cut to size; None when there is none or it is
        malformed. A :class:`Location` is taken as it is."""
        if isinstance(value, Location):
            return value
        if not isinstance(value, dict):
            return None
        file, line, function = value.get("file"), _int(value.get("line")), value.get("function")
        if not isinstance(file, str) or line is None:
            return None
        return cls(file[:4096], line, function[:200] if isinstance(function, str) else None)

    @classmethod
    def of_site(cls, value: object) -> Location | None:
        """The location (no function) of a record's ``"file:line"``; None when it is not one."""
        if isinstance(value, Location):
            return value
        if not isinstance(value, str):
            return None
        file, _, line = value.rpartition(":")
        if not file or not line.isdigit():
            return None
        return cls(file[:4096], int(line))

    @classmethod
    def stack_of(cls, value: object) -> list[Location]:
        """The locations of a recorded stack (a list of them, outermost first), the last eight,
        malformed frames left out."""
        if not isinstance(value, (list, tuple)):
            return []
        return [loc for loc in map(cls.of, value[-8:]) if loc is not None]

    @property
    def site(self) -> str:
        """``file:line``."""
        return f"{self.file}:{self.line}"


# ---- the seeding watch ----------------------------------------------------------------------
@dataclass(frozen=True)
class SeedOverride:
    """A seeding watch's record (a warning with ``component``, :mod:`repro_check.child.observe.watch`):
    the target overrode seeding component ``component`` or seeded a stream itself, with call
    ``key`` at ``where``; ``value`` the seed it gave (``has_value``: the run said one), ``source``
    where the seed came from (``clock``, ``entropy``, ``unseeded <stream>``), ``order`` its place
    among the run's noted events, ``at_step`` the step in progress, ``worker`` the DataLoader
    worker that made it (None: the main process), ``clock_fields`` the fields of the time the
    seed equals. ``clock_field`` is set by the parent once the runs together show the seed is
    that field of the time (:func:`repro_check.compare.cause.seeding_call`)."""

    component: str
    key: str | None = None
    value: JsonValue = None
    has_value: bool = False
    where: Location | None = None
    source: str | None = None
    order: int | None = None
    at_step: int | None = None
    worker: int | None = None
    clock_fields: tuple[str, ...] | None = None
    clock_field: str | None = None

    @property
    def in_worker(self) -> bool:
        return self.worker is not None

    @property
    def at(self) -> str:
        """`` at file:line``, or nothing when the run did not say where."""
        return f" at {self.where.site}" if self.where is not None else ""

    @property
    def call(self) -> str:
        """One seeding call: its key and its place (the same call in every run)."""
        return f"{self.key}@{self.where.site if self.where is not None else None}"

    @classmethod
    def parse(cls, raw: Mapping[str, object]) -> SeedOverride | None:
        component = raw.get("component")
        if not isinstance(component, str):
            return None
        fields = raw.get("clock_fields")
        return cls(component=component, key=_str(raw.get("key"), 4200),
                   value=_json(raw.get("value")), has_value="value" in raw,
                   where=Location.of_site(raw.get("where")), source=_str(raw.get("source"), 200),
                   order=_int(raw.get("order")), at_step=_int(raw.get("at_step")),
                   worker=_int(raw.get("worker")),
                   clock_fields=tuple(str(f) for f in fields) if isinstance(fields, list)
                   else None)


def _json(value: object) -> JsonValue:
    """A JSON value a run sent, as the JSON type it already is."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    return str(value)


# ---- private generators ---------------------------------------------------------------------
#: what the child sends of a private generator (see :mod:`repro_check.child.seeding.pin`)
GENERATOR_KINDS: dict[str, str] = {"torch": "torch.Generator",
                                   "numpy": "numpy Generator (default_rng)",
                                   "python": "random.Random"}


@dataclass(frozen=True)
class GeneratorSeeded:
    """A private generator the script made (``created``) or seeded: its ``key`` (where it was
    made and its number there), the ``event``-th seeding of it, its ``kind`` (``torch``,
    ``numpy``, ``python``), a fingerprint of the state it was left in (``fp``), ``how`` it was
    seeded, where (``location``) and the stack of the call (``stack``)."""

    key: str
    event: int
    kind: str
    fp: str
    created: bool = False
    how: str = ""
    location: Location | None = None
    stack: tuple[Location, ...] = ()


@dataclass(frozen=True)
class GeneratorDrawn:
    """A private generator first drawn from in step ``drawn`` (0: before the first step)."""

    key: str
    drawn: int


#: a private generator's record: seeded (or made), or first drawn from
GeneratorNote: TypeAlias = "GeneratorSeeded | GeneratorDrawn"


def generator_note(body: object) -> GeneratorNote | None:
    """A generator record from a run (untrusted: it comes from the target's process), checked
    and cut to what is used; None when it is malformed."""
    if not isinstance(body, dict) or not isinstance(body.get("key"), str):
        return None
    key = body["key"][:4200]
    if "drawn" in body:
        drawn = _int(body.get("drawn"))
        return GeneratorDrawn(key, drawn) if drawn is not None else None
    event, kind, fp = _int(body.get("event")), body.get("kind"), body.get("fp")
    if event is None or not isinstance(kind, str) or kind not in GENERATOR_KINDS \
            or not isinstance(fp, str):
        return None
    return GeneratorSeeded(key, event, kind, fp[:64], created=body.get("created") is True,
                           how=str(body.get("how"))[:40],
                           location=Location.of(body.get("location")),
                           stack=tuple(Location.stack_of(body.get("stack"))))


# ---- DataLoaders ----------------------------------------------------------------------------
@dataclass(frozen=True)
class LoaderMade:
    """The script made DataLoader number ``loader`` during step ``made`` (0: before the first),
    over a dataset of class ``dataset``, with ``workers`` worker processes, at ``location``."""

    loader: int
    made: int
    dataset: str = ""
    workers: int = 0
    location: Location | None = None
    stack: tuple[Location, ...] = ()


@dataclass(frozen=True)
class LoaderEpoch:
    """DataLoader number ``loader`` started an epoch during step ``iter``."""

    loader: int
    iter: int


#: a DataLoader's record: made, or an epoch started
LoaderNote: TypeAlias = "LoaderMade | LoaderEpoch"


def loader_note(body: object) -> LoaderNote | None:
    """A DataLoader record from a run (untrusted), checked; None when malformed."""
    if not isinstance(body, dict):
        return None
    n = _int(body.get("loader"))
    if n is None:
        return None
    if "iter" in body:
        it = _int(body["iter"])
        return LoaderEpoch(n, it) if it is not None else None
    made = _int(body.get("made"))
    if made is None:
        return None
    return LoaderMade(n, made, str(body.get("dataset"))[:200], _int(body.get("workers")) or 0,
                      Location.of(body.get("location")), tuple(Location.stack_of(body.get("stack"))))


# ---- RL environments ------------------------------------------------------------------------
@dataclass(frozen=True)
class EnvCall:
    """One call of an RL environment's ``reset`` or ``step`` (``call``), the environment's
    ``n``-th, made after ``step`` optimizer steps at ``location``: a fingerprint of the
    observation it returned (``obs``) and of the action it was given (``action``, step only)."""

    n: int
    call: Literal["reset", "step"]
    step: int
    obs: str
    action: str | None = None
    location: Location | None = None


def env_call(body: object) -> EnvCall | None:
    """An environment call's record from a run (untrusted), checked and cut to what is used;
    None when it is malformed (see :mod:`repro_check.child.observe.env_hooks`)."""
    if not isinstance(body, dict):
        return None
    n, step, call, obs = _int(body.get("n")), _int(body.get("step")), body.get("call"), \
        body.get("obs")
    if n is None or step is None or not isinstance(obs, str):
        return None
    if call == "reset" or call == "step":
        return EnvCall(n, call, step, obs[:64], _str(body.get("action"), 64),
                       Location.of(body.get("loc")))
    return None


# ---- models ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelBuilt:
    """A top-level model whose parameters went into step 1 (:mod:`repro_check.child.observe.origin`):
    its class, the name it was assigned to, where it was built, its place among the run's
    noted events (``order``), and whether its parameters were in memory shared with other
    processes (``shared``: ``model.share_memory()``, Hogwild training)."""

    cls: str
    name: str | None = None
    where: Location | None = None
    order: int | None = None
    shared: bool = False

    @classmethod
    def parse(cls, body: object) -> ModelBuilt | None:
        if not isinstance(body, dict):
            return None
        return cls(str(body.get("class"))[:200], _str(body.get("name"), 200),
                   Location.of_site(body.get("where")), _int(body.get("order")),
                   body.get("shared") is True)


# ---- a resume's saves and its checkpoint ---------------------------------------------------
@dataclass(frozen=True)
class SaveNote:
    """A save a resume's run made that was not (yet) the checkpoint taken (``{"info": {"save":
    ...}}``, :mod:`repro_check.child.observe.checkpoint`): after ``step`` optimizer steps, to
    ``path``; either None when the run did not say it rightly."""

    step: int | None = None
    path: str | None = None

    @classmethod
    def parse(cls, body: object) -> SaveNote | None:
        if not isinstance(body, dict):
            return None
        return cls(_int(body.get("step")), _str(body.get("path"), 4096))


@dataclass(frozen=True)
class CheckpointFile:
    """One file of a checkpoint written by several saves in a row, and where it was copied."""

    path: str
    copy: str | None = None


@dataclass(frozen=True)
class CheckpointNote:
    """The checkpoint a resume's interrupted run took and copied before it stopped (``{"info":
    {"checkpoint": ...}}``, :mod:`repro_check.child.observe.checkpoint`): after ``step`` steps,
    at ``path``, copied to ``copy`` (None: not copied, ``error`` says why), by a save of
    ``kind``; the saved object's top-level ``keys``, each key's kind (``kinds``), the random
    streams it holds (``rng``); the seconds from the save's return to the stop; every file of a
    checkpoint of several saves (None for one)."""

    step: int
    path: str
    copy: str | None = None
    kind: str = "?"
    keys: tuple[str, ...] = ()
    kinds: tuple[tuple[str, str], ...] = ()
    rng: tuple[str, ...] = ()
    stopped_after: float | None = None
    files: tuple[CheckpointFile, ...] | None = None
    error: str | None = None

    @classmethod
    def parse(cls, body: object) -> CheckpointNote | None:
        if not isinstance(body, dict):
            return None
        step = _int(body.get("step", 0))
        if step is None:
            return None
        got = body.get("contents")
        contents: dict[str, object] = got if isinstance(got, dict) else {}
        keys, kinds, rng = contents.get("keys"), contents.get("kinds"), contents.get("rng")
        stopped, files, error = body.get("stopped_after"), body.get("files"), body.get("error")
        return cls(
            step, str(body.get("path", "")), _str(body.get("copy"), 4096),
            str(body.get("kind", "?")),
            keys=tuple(k for k in keys if isinstance(k, str))[:40] if isinstance(keys, list)
            else (),
            kinds=tuple((str(k), str(v)) for k, v in kinds.items()) if isinstance(kinds, dict)
            else (),
            rng=tuple(str(s) for s in rng)[:4] if isinstance(rng, list) else (),
            stopped_after=float(stopped) if isinstance(stopped, (int, float)) else None,
            files=tuple(CheckpointFile(str(f.get("path", "")), _str(f.get("copy"), 4096))
                        for f in files if isinstance(f, dict)) if isinstance(files, list)
            else None,
            error=str(error) if error else None)


# ---- the negative control's plant -----------------------------------------------------------
@dataclass(frozen=True)
class ControlNote:
    """What the negative control's run planted (``{"info": {"control": ...}}``,
    :mod:`repro_check.child.seeding.control`): whether it ``planted`` a change, and if not
    ``why``; the changed ``tensor`` (or ``metric:NAME``), its dtype, shape, the element's
    ``index``, the ``step`` after which and ``where`` (``step``, ``forward``, ``metric``), the
    value ``before`` and ``after``, and whether its gradient moved too; a resume's control: the
    restored state a call ``left_out``."""

    planted: bool
    why: str | None = None
    tensor: str = ""
    dtype: str | None = None
    shape: tuple[int, ...] = ()
    index: tuple[int, ...] = ()
    step: int = 0
    where: str = "step"
    before: JsonValue = None
    after: JsonValue = None
    gradient: bool = False
    left_out: str | None = None

    @classmethod
    def parse(cls, body: object) -> ControlNote | None:
        if not isinstance(body, dict):
            return None
        why = body.get("why")
        return cls(body.get("planted") is True, str(why)[:4200] if why else None,
                   str(body.get("tensor"))[:4200], _str(body.get("dtype"), 200),
                   _ints(body.get("shape")), _ints(body.get("index")),
                   _int(body.get("step")) or 0, str(body.get("where") or "step")[:40],
                   _json(body.get("before")), _json(body.get("after")),
                   body.get("gradient") is True, _str(body.get("left_out"), 40))


def _ints(value: object) -> tuple[int, ...]:
    """The whole numbers of a list (a shape, an index)."""
    return tuple(int(v) for v in value if isinstance(v, int)) if isinstance(value, list) else ()


# ---- what a run's --debug shows -------------------------------------------------------------
@dataclass(frozen=True)
class PatchRow:
    """One row of a run's patch listing: the patched callable (``target``), the features that
    wrapped it, innermost first, or why they were skipped."""

    target: str
    features: tuple[str, ...] = ()
    skipped: str | None = None

    @classmethod
    def parse(cls, row: object) -> PatchRow | None:
        if not isinstance(row, dict):
            return None
        features = row.get("features")
        skipped = row.get("skipped")
        return cls(str(row.get("target")),
                   tuple(str(f) for f in features) if isinstance(features, list) else (),
                   str(skipped) if skipped else None)

    @property
    def line(self) -> str:
        """The row as a line: the patched callable and its features, outermost last, or why
        they were skipped."""
        if self.skipped:
            return f"{self.target}: {', '.join(self.features)} skipped ({self.skipped})"
        return f"{self.target}: {' < '.join(self.features)}"


def rows_of(value: Sequence[object]) -> tuple[PatchRow, ...]:
    return tuple(row for row in map(PatchRow.parse, value) if row is not None)


# ---- the objects a trace keeps as mappings --------------------------------------------------
# The header, a run's error and a trace's end stay JSON objects: the JSON report and the golden
# files write them as the run sent them, keys the parent does not know included. Their known
# keys are typed here.
class TraceHeader(TypedDict, total=False):
    """A trace's first line's ``header`` (:mod:`repro_check.child.main` writes it; a golden's
    adds ``golden``, a torchrun rank's its rank)."""

    target: str
    args: list[str]
    run: int
    seed: int | None
    components: list[str]
    seeding: dict[str, JsonValue]
    max_steps: int | None
    threads: int | None
    probe_step: int | None
    #: ``[name, regex]`` pairs (an older trace: ``"name=regex"`` texts)
    printed_metrics: list[list[str] | str]
    environment: dict[str, JsonValue]
    started: float
    clock_shift_ns: int
    golden: dict[str, JsonValue]


class RunError(TypedDict, total=False):
    """Why a run (a rank, a process) failed: its ``kind`` (``raised``, ``exit``, ``resolve``,
    ``protocol``, ``channel``, ``timeout``, ``launcher``), the exception's ``type`` and
    ``message``, its ``traceback``, the ``time`` it was recorded, a timeout's ``limit``, and the
    torchrun rank it came from."""

    kind: str
    type: str
    message: str
    traceback: str | None
    time: float
    limit: float | None
    rank: int


class TraceEnd(TypedDict, total=False):
    """A kept trace's last line's ``end``: how the run ended, as the parent saw it."""

    status: str
    returncode: int | None
    signal: str | None
    seconds: float
    steps: int
    output_tail: str


def header_of(value: object) -> TraceHeader:
    """A header line's ``header`` (an object: anything else is an empty header)."""
    return cast(TraceHeader, value) if isinstance(value, dict) else TraceHeader()


def error_of(value: object) -> RunError:
    """An error line's ``error``: an object as it is, anything else its text as the message."""
    if isinstance(value, dict):
        return cast(RunError, value)
    return RunError(message=str(value))


def end_of(value: dict[str, JsonValue]) -> TraceEnd:
    """An end line's ``end``."""
    return cast(TraceEnd, value)


@dataclass(frozen=True)
class Flagged:
    """An op PyTorch warned is nondeterministic (``{"flagged": ...}``), the first time the run
    met it: in step ``step``, at ``where`` (``file:line``, or the warning's own place, kept as
    the text the run sent: the report shows it as it is)."""

    op: str
    step: int | None = None
    where: str | None = None

    @classmethod
    def parse(cls, body: object) -> Flagged:
        if isinstance(body, Flagged):
            return body
        if not isinstance(body, Mapping):
            return cls(str(body))
        where = body.get("where")
        return cls(str(body.get("op")), _int(body.get("step")),
                   where[:4200] if isinstance(where, str) else None)


# ---- a torchrun rank's supervisor -----------------------------------------------------------
@dataclass(frozen=True)
class RankProcess:
    """A rank's supervisor started its run entry (``{"info": {"rank_process": ...}}``): the
    process and process group to stop with the job (:mod:`repro_check.child.process.rank_supervisor`)."""

    pid: int | None = None
    pgid: int | None = None

    @classmethod
    def parse(cls, body: object) -> RankProcess:
        if not isinstance(body, dict):
            return cls()
        return cls(_int(body.get("pid")), _int(body.get("pgid")))


@dataclass(frozen=True)
class RankExit:
    """A rank's run entry ended (``{"info": {"rank_exit": ...}}``): its exit status, when (a
    wall-clock time) and the signal its supervisor was stopped by, if any."""

    returncode: int | None = None
    time: float | None = None
    stopped_by: str | None = None

    @classmethod
    def parse(cls, body: object) -> RankExit:
        if not isinstance(body, dict):
            return cls()
        t = body.get("time")
        return cls(_int(body.get("returncode")),
                   float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None,
                   _str(body.get("stopped_by"), 40))
