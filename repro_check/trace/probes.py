"""What a probed step's records carry, typed: the ``{"probe": {...}}`` lines a run writes while it
replays the step ``diagnose`` localizes (:mod:`repro_check.child.observe.probe`), read once where
the line becomes a record (:func:`repro_check.trace.protocol.record_of`), so that the
localization (:mod:`repro_check.diagnose.localize`) never re-learns their shape from keys.

Each record has a kind (``k``) and its place among the step's records (``i``): an op
(:class:`OpRun`), a module's output or output gradient (:class:`ModuleRun`), the calls inside a
compiled model (:class:`CompiledCallsRun`), a tensor made from
data outside torch (:class:`MadeTensor`), an RL environment's call (:class:`EnvObserved`), and
the probe's arming and disarming (:class:`ProbeMark`). They come from the target's process and
are untrusted: a record of no known kind, or with a field of the wrong kind, is None. Standard
library only.
"""

from __future__ import annotations

import base64
import binascii
import math
from array import array
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeAlias

from repro_check.trace.payloads import Location

#: the longest text kept of a record's field (an op's or a module's name, a fingerprint)
TEXT = 4200
#: the most values a record carries of a model's output (:class:`OutputValues`): a larger
#: output is compared by its fingerprint only
VALUES_LIMIT = 65536
#: the most calls a record of what ran inside a compiled model carries (:class:`CompiledCallsRun`)
CALLS_LIMIT = 4096


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: object) -> str | None:
    return value[:TEXT] if isinstance(value, str) else None


def _texts(value: object) -> tuple[str, ...] | None:
    """A list of texts (an op's arguments' or results' fingerprints); None when it is not one
    (absent: none)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return tuple(v[:TEXT] for v in value)


@dataclass(frozen=True)
class ProbeOp:
    """One record of the probed step: its place among the step's records (``index``, the
    record's ``i``; 0 when it did not say). A subclass per kind; :meth:`parse` reads any."""

    index: int = 0

    @classmethod
    def parse(cls, body: object) -> ProbeOp | None:
        """The record a run sent (``{"k": ..., ...}``, untrusted), or a :class:`ProbeOp` as it
        is; None when it is of no known kind or malformed."""
        if isinstance(body, ProbeOp):
            return body
        if not isinstance(body, Mapping):
            return None
        reader = _READERS.get(str(body.get("k")))
        return reader(body, _int(body.get("i")) or 0) if reader is not None else None


@dataclass(frozen=True)
class OpRun(ProbeOp):
    """An op the step ran (``{"k": "op"}``): its ATen name, the phase it ran in (``forward``,
    ``backward``, ``optimizer``, ``data``), the module that ran it (None: outside any), and the
    fingerprints of its arguments and results."""

    op: str = ""
    phase: str | None = None
    module: str | None = None
    ins: tuple[str, ...] = ()
    outs: tuple[str, ...] = ()


@dataclass(frozen=True)
class OutputValues:
    """The values of a model's output (its first floating-point tensor), as float64, so that
    the largest difference between two sides can be told, not only that they differ. Written
    as ``{"shape": [...], "b64": ...}``: the base64 of the values' float64 bytes (native
    order, as the parent's machine is the run's)."""

    shape: tuple[int, ...]
    data: tuple[float, ...]

    @classmethod
    def parse(cls, value: object) -> OutputValues | None:
        """The values a record holds; None when absent or malformed (a count of values that
        is not the shape's, more than :data:`VALUES_LIMIT`)."""
        if not isinstance(value, Mapping):
            return None
        shape, text = value.get("shape"), value.get("b64")
        if not isinstance(shape, list) or not isinstance(text, str) or len(shape) > 16:
            return None
        dims = [_int(d) for d in shape]
        if any(d is None or d < 0 for d in dims) or len(text) > 12 * VALUES_LIMIT:
            return None
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            return None
        if len(raw) % 8:
            return None
        data = array("d")
        data.frombytes(raw)
        if len(data) != math.prod(d for d in dims if d is not None):
            return None
        return cls(tuple(d for d in dims if d is not None), tuple(data))

    def index(self, flat: int) -> tuple[int, ...]:
        """The index in :attr:`shape` of the ``flat``-th value."""
        at: list[int] = []
        for size in reversed(self.shape):
            flat, rest = divmod(flat, size) if size else (flat, 0)
            at.append(rest)
        return tuple(reversed(at))


@dataclass(frozen=True)
class ModuleRun(ProbeOp):
    """A module's forward returned (``phase`` ``forward``: fingerprints of its inputs and
    output) or its ``output``-th output's gradient arrived (``backward``: the gradient's
    fingerprint as ``out``) (``{"k": "module"}``). ``compiled``: the module ran as
    ``torch.compile`` made it (recorded at its compiled wrapper, the op recorder stepped
    aside while it ran); ``values``: a model's (a root module's) output values."""

    phase: str | None = None
    module: str | None = None
    ins: str | None = None
    out: str | None = None
    output: int | None = None
    compiled: bool = False
    values: OutputValues | None = None


@dataclass(frozen=True)
class GradRun(ProbeOp):
    """A gradient the optimizer was about to use (``{"k": "grad"}``): the parameter's name
    (its model's module path, or the optimizer's group and position), the fingerprint and,
    up to :data:`VALUES_LIMIT`, the values of its gradient."""

    param: str = ""
    out: str | None = None
    values: OutputValues | None = None


@dataclass(frozen=True)
class CompiledCallsRun(ProbeOp):
    """What PyTorch's DebugMode saw while a compiled model ran compiled (``{"k": "calls"}``,
    :mod:`repro_check.child.observe.compiled_calls`): the model (named as its
    :class:`ModuleRun`), each op or kernel it dispatched with the fingerprints of its inputs
    and of what it returned (``calls``, at most :data:`CALLS_LIMIT`; ``total`` of them in
    all), the graphs
    dynamo had made in the process by then and the reasons it broke graphs; ``missing``: why
    nothing was recorded (this torch has no DebugMode)."""

    module: str | None = None
    calls: tuple[tuple[str, str, str], ...] = ()
    total: int = 0
    graphs: int | None = None
    breaks: tuple[str, ...] = ()
    missing: str | None = None


@dataclass(frozen=True)
class MadeTensor(ProbeOp):
    """A tensor made from data outside torch (``{"k": "made"}``): by ``fn`` (``torch.tensor``,
    ``torch.as_tensor``, ...) at ``location`` in the script, with fingerprint ``out``."""

    fn: str = ""
    location: Location | None = None
    out: str | None = None


@dataclass(frozen=True)
class EnvObserved(ProbeOp):
    """An RL environment's ``reset`` or ``step`` (``call``) made at ``location`` returned an
    observation of fingerprint ``obs`` (``{"k": "env"}``, :mod:`repro_check.child.observe.env_hooks`)."""

    call: str = ""
    location: Location | None = None
    obs: str | None = None


@dataclass(frozen=True)
class ProbeMark(ProbeOp):
    """The probe was armed at the start of step ``step`` or disarmed at its end, after
    ``records`` records (``{"k": "armed"}``, ``{"k": "disarmed"}``); ``compiled``: the step
    called code ``torch.compile`` made (the compiled model's class, or ``code``): a compiled
    model runs compiled, the op recorder stepped aside (``ran_compiled``), other compiled code
    eagerly under the recorder."""

    armed: bool = True
    step: int | None = None
    records: int | None = None
    compiled: str | None = None
    #: a compiled model ran compiled (the op recorder stepped aside while it ran), not eagerly
    ran_compiled: bool = False


def _op(body: Mapping[str, object], index: int) -> OpRun | None:
    op, ins, outs = _text(body.get("op")), _texts(body.get("in")), _texts(body.get("out"))
    if op is None or ins is None or outs is None:
        return None
    return OpRun(index, op, _text(body.get("ph")), _text(body.get("m")), ins, outs)


def _module(body: Mapping[str, object], index: int) -> ModuleRun:
    return ModuleRun(index, _text(body.get("ph")), _text(body.get("m")), _text(body.get("in")),
                     _text(body.get("out")), _int(body.get("n")), body.get("c") is True,
                     OutputValues.parse(body.get("v")))


def _grad(body: Mapping[str, object], index: int) -> GradRun | None:
    param = _text(body.get("p"))
    if param is None:
        return None
    return GradRun(index, param, _text(body.get("out")), OutputValues.parse(body.get("v")))


def _calls(body: Mapping[str, object], index: int) -> CompiledCallsRun | None:
    raw = body.get("calls", [])
    if not isinstance(raw, list) or len(raw) > CALLS_LIMIT:
        return None
    calls: list[tuple[str, str, str]] = []
    for call in raw:
        if (not isinstance(call, list) or len(call) != 3
                or not all(isinstance(v, str) for v in call)):
            return None
        calls.append((call[0][:TEXT], call[1][:TEXT], call[2][:TEXT]))
    breaks = _texts(body.get("breaks"))
    if breaks is None:
        return None
    total = _int(body.get("n"))
    return CompiledCallsRun(index, _text(body.get("m")), tuple(calls),
                            max(total or 0, len(calls)), _int(body.get("graphs")),
                            breaks[:16], _text(body.get("missing")))


def _made(body: Mapping[str, object], index: int) -> MadeTensor:
    return MadeTensor(index, str(body.get("fn"))[:200], Location.of(body.get("loc")),
                      _text(body.get("out")))


def _env(body: Mapping[str, object], index: int) -> EnvObserved:
    return EnvObserved(index, str(body.get("call"))[:40], Location.of(body.get("loc")),
                       _text(body.get("obs")))


def _mark(body: Mapping[str, object], index: int) -> ProbeMark:
    return ProbeMark(index, body.get("k") == "armed", _int(body.get("step")),
                     _int(body.get("records")), _text(body.get("compiled")),
                     body.get("ran_compiled") is True)


_READERS: dict[str, Callable[[Mapping[str, object], int], ProbeOp | None]] = {
    "op": _op, "module": _module, "grad": _grad, "calls": _calls, "made": _made, "env": _env,
    "armed": _mark,
    "disarmed": _mark,
}

#: a probe record as a reader may be given it: typed, or as the run wrote it (a test's, an
#: API user's records)
ProbeInput: TypeAlias = "ProbeOp | Mapping[str, object]"


def probe_ops(records: Iterable[ProbeInput]) -> list[ProbeOp]:
    """The records, typed (each read once: :meth:`ProbeOp.parse`), malformed ones left out."""
    return [op for op in map(ProbeOp.parse, records) if op is not None]
