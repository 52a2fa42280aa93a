"""Checkpoints of two finished runs, compared entry by entry: every tensor by its bits (dtype,
shape, then bytes), with the largest absolute and relative difference where they part, and the
plain values beside them (an epoch counter, a learning rate, a name) for equality.

A checkpoint is flattened to key paths the way the saves a run makes are named
(:mod:`repro_check.child.observe.saved`): dict keys and list indices joined by dots
(``model.0.weight``, ``optimizer.state.0.exp_avg``), so a key named here is the key a check's
``saved:FILE:KEY`` signal would name. ``torch.save`` files are read with
``weights_only=True``: a checkpoint that holds pickled objects is refused in one line, never
unpickled, since unpickling runs whatever code the file names. Two folders are matched file by
file by relative path (an HF sharded checkpoint is several files), each key prefixed by its file.
"""

from __future__ import annotations

import math
import os
import re
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from repro_check.errors import UsageError
from repro_check.trace import values
from repro_check.trace.jsonfields import JsonRecord, json_field

#: the file names a checkpoint folder's tensor files end with
TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
SAFETENSORS_SUFFIX = ".safetensors"
TENSOR_SUFFIXES = (*TORCH_SUFFIXES, SAFETENSORS_SUFFIX)
#: elements compared in float64 at a time
CHUNK = 1 << 22
#: the key of a file that holds one tensor or value, not a container of them
WHOLE = "(whole)"

Status = Literal["identical", "within_tolerance", "differs", "dtype", "shape", "type"]


def _readable(x: float | None) -> float | str | None:
    return None if x is None else values.readable_float(x)


def _plain(x: Any) -> Any:
    """A non-tensor leaf as the JSON report holds it: JSON's own types as they are, floats
    readable (NaN as a string), anything else by its repr."""
    if x is None or isinstance(x, (bool, int, str)):
        return x
    if isinstance(x, float):
        return values.readable_float(x)
    return repr(x)


@dataclass
class EntryDiff(JsonRecord):
    """One key both checkpoints hold: a tensor (its dtypes, shapes and how far apart) or a plain
    value (both values when they differ), and the one word of how they compare."""

    key: str
    kind: Literal["tensor", "value"]
    #: ``identical`` (same bits), ``within_tolerance``, ``differs`` (same dtype and shape,
    #: other values), ``dtype``, ``shape`` or ``type`` (a tensor on one side, a value on the other)
    status: Status = "identical"
    dtype_a: str | None = json_field(default=None, omit_none=True)
    dtype_b: str | None = json_field(default=None, omit_none=True)
    shape_a: list[int] | None = json_field(default=None, omit_none=True)
    shape_b: list[int] | None = json_field(default=None, omit_none=True)
    #: elements whose values differ (a tensor of equal shape)
    differing_elements: int | None = json_field(default=None, omit_none=True)
    max_abs_diff: float | None = json_field(default=None, omit_none=True, convert=_readable)
    max_rel_diff: float | None = json_field(default=None, omit_none=True, convert=_readable)
    a_value: Any = json_field(default=None, skip=True)
    b_value: Any = json_field(default=None, skip=True)

    @property
    def same(self) -> bool:
        return self.status in ("identical", "within_tolerance")

    @property
    def compared_values(self) -> list[Any] | None:
        """A plain value's two sides, when they differ (tensors: None)."""
        if self.kind != "value" or self.same:
            return None
        return [_plain(self.a_value), _plain(self.b_value)]

    JSON_PROPERTIES = ("compared_values",)


@dataclass
class CheckpointsDiff(JsonRecord):
    """Two checkpoints (files or folders) compared: the files matched, every key both hold,
    the keys one side holds alone, and the first key, in A's order, that differs."""

    format: str
    #: the tensor files compared, by path relative to their folder (one file: its name)
    files: list[str] = field(default_factory=list)
    files_only_in_a: list[str] = field(default_factory=list)
    files_only_in_b: list[str] = field(default_factory=list)
    entries: list[EntryDiff] = field(default_factory=list)
    keys_only_in_a: list[str] = field(default_factory=list)
    keys_only_in_b: list[str] = field(default_factory=list)
    first_differing_key: str | None = None
    tolerance: str = "exact bits"

    @property
    def tensors_compared(self) -> int:
        return sum(1 for e in self.entries if e.kind == "tensor")

    @property
    def tensors_identical(self) -> int:
        return sum(1 for e in self.entries if e.kind == "tensor" and e.status == "identical")

    @property
    def values_compared(self) -> int:
        return sum(1 for e in self.entries if e.kind == "value")

    @property
    def differing(self) -> list[EntryDiff]:
        return [e for e in self.entries if not e.same]

    @property
    def same(self) -> bool:
        return self.first_differing_key is None and not self.files_only_in_a \
            and not self.files_only_in_b

    JSON_PROPERTIES = ("same", "tensors_compared", "tensors_identical", "values_compared")


# ---- reading ----------------------------------------------------------------------------------
def _join(prefix: str, key: Any) -> str:
    text = str(key)
    return f"{prefix}.{text}" if prefix and text else prefix or text


def flatten(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf of ``obj`` with its key path: tensors, and the plain values beside them; dicts
    by key and lists and tuples by index, in the order they hold them."""
    import torch

    if isinstance(obj, torch.Tensor):
        yield prefix or WHOLE, obj
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            yield from flatten(v, _join(prefix, k))
    elif isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        for i, v in enumerate(obj):
            yield from flatten(v, _join(prefix, i))
    else:
        yield prefix or WHOLE, obj


def _first_line(e: BaseException) -> str:
    text = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return text[:200] + ("..." if len(text) > 200 else "")


def _refusal(text: str) -> str:
    """The line of a weights-only refusal that names what it refused (the global it met)."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in text.splitlines()]
    named = [line for line in lines if line.startswith("Unsupported")] + \
        [line for line in lines if "WeightsUnpickler error: " in line and not line.endswith(":")]
    return (named or lines or ["refused"])[0].split(". Please")[0][:200]


def load_torch(path: str) -> dict[str, Any]:
    """A ``torch.save`` file's leaves by key path, read with ``weights_only=True`` on the CPU."""
    import torch

    try:
        try:  # memory-mapped: a checkpoint larger than memory is read as it is compared
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as e:
            if "mmap" not in str(e):
                raise
            obj = torch.load(path, map_location="cpu", weights_only=True)  # the legacy format
    except Exception as e:  # torch.load fails in many ways on a file that is not its own
        text = str(e)
        # a global the weights-only unpickler will not load: an object, not a corrupt file
        if "Weights only load failed" in text and "global" in text.lower():
            raise UsageError(
                f"{path}: torch.load(weights_only=True) refuses it ({_refusal(text)}); it holds "
                "pickled objects besides tensors and plain containers, and repro-check does not "
                "run a checkpoint's pickled code: save its state_dict() and compare that"
            ) from None
        raise UsageError(f"{path}: cannot read it as a torch.save checkpoint "
                         f"({_refusal(text) if 'Weights only' in text else _first_line(e)})"
                         ) from None
    return dict(flatten(obj))


class SafeTensors(Mapping[str, Any]):
    """A ``.safetensors`` file's tensors by name, each read when asked for: one pair of tensors
    in memory at a time, however large the shard."""

    def __init__(self, path: str) -> None:
        try:
            from safetensors import safe_open
        except ImportError:
            raise UsageError("reading .safetensors files needs the safetensors package (pip "
                             "install safetensors)") from None
        self.path = path
        try:
            self.file = safe_open(path, framework="pt")
            self.names = list(self.file.keys())
        except Exception as e:  # the library's own error types for a file that is not one
            raise UsageError(f"{path}: cannot read it as a .safetensors file "
                             f"({_first_line(e)})") from None

    def __getitem__(self, key: str) -> Any:
        if key not in self.names:
            raise KeyError(key)
        try:
            return self.file.get_tensor(key)
        except Exception as e:  # a tensor whose bytes the header does not describe
            raise UsageError(f"{self.path}: cannot read tensor {key} ({_first_line(e)})"
                             ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, key: object) -> bool:
        return key in self.names


def load_file(path: str) -> Mapping[str, Any]:
    """A checkpoint file's leaves by key path (a ``.safetensors`` file's read one by one)."""
    return SafeTensors(path) if path.endswith(SAFETENSORS_SUFFIX) else load_torch(path)


def tensor_files(folder: str) -> list[str]:
    """The tensor files of a checkpoint folder (its subfolders too), by relative path."""
    root = Path(folder)
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and p.name.endswith(TENSOR_SUFFIXES))


# ---- comparing --------------------------------------------------------------------------------
def _dtype(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def _same_bits(a: Any, b: Any) -> bool:
    import torch

    try:
        ba = a.detach().contiguous().reshape(-1).view(torch.uint8)
        bb = b.detach().contiguous().reshape(-1).view(torch.uint8)
    except RuntimeError:  # a layout with no byte view (sparse, quantized): by value
        return bool(torch.equal(a, b))
    return bool(torch.equal(ba, bb))


def _peak(current: float, value: float) -> float:
    """The larger of two differences, a NaN (one side NaN, the other not) the largest."""
    if math.isnan(current):
        return current
    return value if math.isnan(value) or value > current else current


def compare_tensors(key: str, a: Any, b: Any, tol: values.Tolerance) -> EntryDiff:
    """One tensor of both: dtype, shape, bits, and how far apart where the shapes agree."""
    import torch

    out = EntryDiff(key, "tensor", dtype_a=_dtype(a), dtype_b=_dtype(b),
                    shape_a=list(a.shape), shape_b=list(b.shape))
    if list(a.shape) != list(b.shape):
        out.status = "shape" if a.dtype == b.dtype else "dtype"
        return out
    if a.dtype == b.dtype and _same_bits(a, b):
        return out
    out.status = "dtype" if a.dtype != b.dtype else "differs"
    if a.is_complex() or b.is_complex() or a.numel() == 0:
        return out
    fa, fb = a.detach().reshape(-1), b.detach().reshape(-1)
    differing, peak_abs, peak_rel, close = 0, 0.0, 0.0, True
    for i in range(0, fa.numel(), CHUNK):  # in float64, a chunk at a time: memory stays flat
        x, y = fa[i:i + CHUNK].to(torch.float64), fb[i:i + CHUNK].to(torch.float64)
        d = torch.where((x == y) | (x.isnan() & y.isnan()), torch.zeros_like(x), (x - y).abs())
        rel = torch.where(d == 0, torch.zeros_like(d), d / x.abs())
        differing += int((d != 0).sum())
        peak_abs, peak_rel = _peak(peak_abs, float(d.max())), _peak(peak_rel, float(rel.max()))
        if close and not tol.exact and (tol.atol or tol.rtol):
            close = bool(torch.isclose(y, x, rtol=tol.rtol, atol=tol.atol, equal_nan=True).all())
    out.differing_elements, out.max_abs_diff, out.max_rel_diff = differing, peak_abs, peak_rel
    if out.status == "differs" and not tol.exact and (tol.atol or tol.rtol) and close:
        out.status = "within_tolerance"
    return out


def _float_bits(x: float) -> bytes:
    return struct.pack(">d", x)


def compare_values(key: str, a: Any, b: Any, tol: values.Tolerance) -> EntryDiff:
    """Two plain values: equal (floats by their bits, or within the tolerance), else differs."""
    out = EntryDiff(key, "value", a_value=a, b_value=b)
    if isinstance(a, float) and isinstance(b, float):
        if _float_bits(a) == _float_bits(b):
            return out
        ea, eb = values.encode_float64(a), values.encode_float64(b)
        out.status = "within_tolerance" if values.equal(ea, eb, tol) else "differs"
        out.max_abs_diff = abs(a - b) if not (math.isnan(a) or math.isnan(b)) else math.nan
        return out
    if type(a) is not type(b) or a != b:
        out.status = "differs"
    return out


def compare_leaves(key: str, a: Any, b: Any, tol: values.Tolerance) -> EntryDiff:
    import torch

    ta, tb = isinstance(a, torch.Tensor), isinstance(b, torch.Tensor)
    if ta and tb:
        return compare_tensors(key, a, b, tol)
    if ta or tb:
        return EntryDiff(key, "value", status="type", a_value=a if not ta else f"tensor {_dtype(a)}",
                         b_value=b if not tb else f"tensor {_dtype(b)}")
    return compare_values(key, a, b, tol)


def compare_checkpoints(a: str, b: str, fmt: str, tol: values.Tolerance,
                        describe: str = "exact bits") -> CheckpointsDiff:
    """Two checkpoint files (``torch``, ``safetensors``) or folders (``checkpoint-folder``),
    compared key by key; a folder's files are matched by relative path, one pair in memory at a
    time."""
    out = CheckpointsDiff(fmt, tolerance=describe)
    if fmt == "checkpoint-folder":
        fa, fb = tensor_files(a), tensor_files(b)
        for side, files in (("A", fa), ("B", fb)):
            if not files:
                path = a if side == "A" else b
                raise UsageError(f"{path}: no checkpoint file in it (expected "
                                 f"{', '.join('*' + s for s in TENSOR_SUFFIXES)})")
        out.files = [f for f in fa if f in fb]
        out.files_only_in_a = [f for f in fa if f not in fb]
        out.files_only_in_b = [f for f in fb if f not in fa]
        pairs = [(os.path.join(a, f), os.path.join(b, f), f"{f}:") for f in out.files]
    else:
        out.files = [Path(a).name] if Path(a).name == Path(b).name else [Path(a).name,
                                                                         Path(b).name]
        pairs = [(a, b, "")]
    first_in_b: str | None = None
    for pa, pb, prefix in pairs:
        la, lb = load_file(pa), load_file(pb)
        for key, va in la.items():
            name = prefix + key
            if key not in lb:
                out.keys_only_in_a.append(name)
                out.first_differing_key = out.first_differing_key or name
                continue
            entry = compare_leaves(name, va, lb[key], tol)
            out.entries.append(entry)
            if not entry.same:
                out.first_differing_key = out.first_differing_key or name
        for key in lb:
            if key not in la:
                out.keys_only_in_b.append(prefix + key)
                first_in_b = first_in_b or prefix + key
        del la, lb
    out.first_differing_key = out.first_differing_key or first_in_b
    return out
