"""The CUDA ops PyTorch lists as nondeterministic (``torch.use_deterministic_algorithms``):
those with no deterministic implementation (RC108) and those with one only when deterministic
algorithms are on (RC109)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from repro_check.doctor.evaluate import Evaluator, Hazard, arg, is_none, text


@dataclass(frozen=True)
class Op:
    """A nondeterministic op and what makes it so.

    ``when`` is None (always), "given" (``arg`` passed and not None), "true" (``arg`` is True)
    or a mapping from the value of ``arg`` to the code it earns. ``pos`` is the argument's
    position in the method form (``x.op(...)``) or, for ``torch.nn`` classes and
    ``torch.nn.functional``, in the only form; the ``torch.op(x, ...)`` form adds one.
    """

    code: str
    backward: bool = False  # only its backward pass is nondeterministic
    arg: str | None = None
    pos: int | None = None
    when: Any = None
    module_only: bool = False  # a torch.nn class or torch.nn.functional function


_RAISES, _DEFAULT = "RC108", "RC109"
_LINEAR = {m: _RAISES for m in ("linear", "bilinear", "bicubic", "trilinear")}
OPS: dict[str, Op] = {
    **{name: Op(_RAISES, backward=True, module_only=True) for name in (
        "AvgPool3d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool2d",
        "FractionalMaxPool2d", "FractionalMaxPool3d", "ReflectionPad1d", "ReflectionPad2d",
        "ReflectionPad3d", "CTCLoss", "UpsamplingBilinear2d", "avg_pool3d", "adaptive_avg_pool2d",
        "adaptive_avg_pool3d", "adaptive_max_pool2d", "fractional_max_pool2d",
        "fractional_max_pool3d", "ctc_loss", "grid_sample", "upsample_bilinear")},
    **{name: Op(_RAISES, module_only=True) for name in (
        "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "max_unpool1d", "max_unpool2d", "max_unpool3d")},
    "Upsample": Op(_RAISES, True, "mode", 2, _LINEAR, module_only=True),
    "interpolate": Op(_RAISES, True, "mode", 3, _LINEAR, module_only=True),
    "upsample": Op(_RAISES, True, "mode", 3, _LINEAR, module_only=True),
    "EmbeddingBag": Op(_RAISES, True, "mode", 5, {"max": _RAISES}, module_only=True),
    "embedding_bag": Op(_RAISES, True, "mode", 6, {"max": _RAISES}, module_only=True),
    "pad": Op(_RAISES, True, "mode", 2, {"reflect": _RAISES, "replicate": _DEFAULT},
               module_only=True),
    "histc": Op(_RAISES),
    "bincount": Op(_RAISES, False, "weights", 0, "given"),
    "median": Op(_RAISES, False, "dim", 0, "given"),
    "put_": Op(_RAISES),
    "put": Op(_RAISES),
    "scatter_reduce": Op(_RAISES, False, "reduce", 3,
                          {"prod": _RAISES, "sum": _DEFAULT, "mean": _DEFAULT}),
    "scatter_reduce_": Op(_RAISES, False, "reduce", 3,
                           {"prod": _RAISES, "sum": _DEFAULT, "mean": _DEFAULT}),
    **{name: Op(_DEFAULT, backward=True, module_only=True) for name in (
        "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d", "MaxPool3d", "max_pool3d")},
    **{name: Op(_DEFAULT) for name in (
        "index_add", "index_add_", "scatter_add", "scatter_add_", "index_copy", "index_copy_")},
    **{name: Op(_DEFAULT, False, "accumulate", 2, "true") for name in ("index_put", "index_put_")},
}
#: op names that also mean something else outside torch: only a torch receiver counts
_GENERIC_OPS = {"pad", "put", "upsample", "interpolate"}



def op_call(ev: Evaluator, call: ast.Call, q: str, last: str, op: Op) -> Iterator[Hazard]:
    """A call of ``op``: a hazard when the receiver is torch and its arguments make it one."""
    func = call.func
    module = ev.module_of(func.value) if isinstance(func, ast.Attribute) else (
        ev.module_of(func) if isinstance(func, ast.Name) and func.id in ev.aliases else None)
    torch_form = q.startswith("torch.")
    if module is not None and module != "torch":
        return  # numpy.median, statistics.median, a project module: not a torch op
    if not torch_form and (last in _GENERIC_OPS or (isinstance(func, ast.Name)
                                                    and not op.module_only)):
        return  # x.pad(...), queue.put(...), a bare name not imported from torch
    code, detail = op.code, ""
    if op.arg is not None:
        pos = op.pos
        if pos is not None and torch_form and not op.module_only:
            pos += 1  # torch.op(input, ...) and torch.Tensor.op(self, ...)
        value_expr = arg(call, op.arg, pos)
        if value_expr is None or is_none(value_expr):
            return
        if op.when == "given":
            detail = f" with {op.arg}={text(value_expr, 20)}"
        else:
            value = ev.const(value_expr)
            if op.when == "true":
                if value is not True:
                    return
            elif isinstance(op.when, dict):
                if not isinstance(value, str) or value not in op.when:
                    return
                code = op.when[value]
            detail = f" with {op.arg}={value!r}"
    where = "in its backward pass on CUDA" if op.backward else "on CUDA"
    name = text(func, 40)
    if code == _RAISES:
        message = (f"{name}{detail} is nondeterministic {where} and has no deterministic "
                   "implementation")
    else:
        message = (f"{name}{detail} is nondeterministic {where} unless deterministic "
                   "algorithms are on")
    yield (code, call, message)
