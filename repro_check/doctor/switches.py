"""Determinism switches turned the wrong way: cuDNN benchmarking on (RC102), deterministic cuDNN
off (RC103), deterministic algorithms off or warn-only (RC110)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from repro_check.doctor.evaluate import Evaluator, Hazard, arg, text


def switch_call(ev: Evaluator, call: ast.Call, q: str) -> Iterator[Hazard]:
    """``use_deterministic_algorithms``, ``set_deterministic_debug_mode``, ``cudnn.flags``."""
    if q.endswith("use_deterministic_algorithms"):
        mode = ev.const(arg(call, "mode", 0))
        warn = ev.const(arg(call, "warn_only", 1))
        if mode is False:
            yield ("RC110", call, f"{text(call)} turns deterministic algorithms off")
        elif mode is True and warn is True:
            yield ("RC110", call, f"{text(call)}: ops without a deterministic "
                   "implementation only warn and still run")
    elif q.endswith("set_deterministic_debug_mode"):
        mode = ev.const(arg(call, "debug_mode", 0))
        if mode in (0, "default"):
            yield ("RC110", call, f"{text(call)} turns deterministic algorithms off")
    elif q.endswith("cudnn.flags") or q.endswith("cudnn.set_flags"):
        yield from cudnn_flags(ev, call, q.endswith("set_flags"))


def cudnn_flags(ev: Evaluator, call: ast.Call, setter: bool) -> Iterator[Hazard]:
    """``cudnn.flags(...)`` (deterministic defaults to False) or ``cudnn.set_flags(...)``."""
    prefix = "_" if setter else ""
    if ev.const(arg(call, prefix + "enabled", 0)) is False:
        return  # cuDNN off: none of its kernels run
    bench = ev.const(arg(call, prefix + "benchmark", 1))
    if bench is True:
        yield ("RC102", call, f"{text(call)} turns cuDNN benchmarking on")
    det_expr = arg(call, prefix + "deterministic", 3)
    det = ev.const(det_expr)
    if det is False or (det_expr is None and not setter
                        and not any(k.arg is None for k in call.keywords)):
        yield ("RC103", call, f"{text(call)} turns deterministic cuDNN off (flags() "
                              "defaults to deterministic=False)")


def cudnn_assignment(ev: Evaluator, node: ast.Assign | ast.AnnAssign,
                     target: ast.expr) -> Iterator[Hazard]:
    """``cudnn.benchmark = True`` or ``cudnn.deterministic = False``."""
    if not (isinstance(target, ast.Attribute)
            and (ev.qualname(target.value) or "").endswith("cudnn")):
        return
    v = ev.const(node.value)
    if target.attr == "benchmark" and v is True:
        yield ("RC102", node, f"{text(target)} = True lets cuDNN pick kernels by timing them")
    elif target.attr == "deterministic" and v is False:
        yield ("RC103", node, f"{text(target)} = False allows nondeterministic cuDNN kernels")
