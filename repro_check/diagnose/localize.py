"""Where inside a step two runs part: the first op, and its module, whose result differs.

Works on the ``{"probe": ...}`` records two replays of the same step wrote (see
:mod:`repro_check.child.probe`). Ops are matched by position: up to the first difference both runs
execute the same code on the same values, so they run the same ops in the same order.

The first op whose result differs is the culprit. If its arguments agree, the op itself is not
deterministic (a kernel using float atomics, an uninitialised buffer). If an argument differs, no
earlier recorded op produced that difference: the value entered from outside the recorded ops
(Python or numpy numbers, bytes from the OS, a tensor built from them), and the op is where it
first meets the computation. Either way the module that ran the op is the culprit module; the
first module whose output (in forward) or whose output's gradient (in backward) differs is
reported beside it. The result of an op that only allocates (``aten::empty``) is memory nothing
has written yet: it is not compared.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: ops whose result is memory nothing has written yet (unless deterministic algorithms fill
#: it): its bytes differ from run to run and mean nothing, so they are not compared
UNINITIALIZED = frozenset({"aten::empty", "aten::empty_like", "aten::empty_strided",
                           "aten::new_empty", "aten::new_empty_strided", "aten::empty_permuted"})


@dataclass
class Localization:
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
    ops_compared: int = 0
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "found": self.found,
            "phase": self.phase,
            "module": self.module,
            "op": self.op,
            "op_index": self.op_index,
            "inputs_agree": self.inputs_agree,
            "differing_inputs": self.differing_inputs,
            "first_module_forward": self.first_module_forward,
            "first_module_backward": self.first_module_backward,
            "ops_compared": self.ops_compared,
            "detail": self.detail,
        }


def split(records: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(ops, module records) of one run, each in execution order."""
    ops: list[dict[str, Any]] = []
    modules: list[dict[str, Any]] = []
    for rec in records:
        kind = rec.get("k")
        if kind == "op":
            ops.append(rec)
        elif kind == "module":
            modules.append(rec)
    return ops, modules


def _where(module: str | None, phase: str | None) -> str:
    if module is not None:
        return f"module {module!r}"
    return {
        "optimizer": "the optimizer step",
        "data": "the DataLoader (outside any module)",
        "backward": "backward, outside any module's part of the graph",
    }.get(phase or "", "code outside any module (the training script or model set-up)")


def _first_module(modules_a: Sequence[dict[str, Any]], modules_b: Sequence[dict[str, Any]],
                  phase: str) -> str | None:
    """The first module record of ``phase`` whose output differs (inputs agreeing if recorded)."""
    a = [r for r in modules_a if r.get("ph") == phase]
    b = [r for r in modules_b if r.get("ph") == phase]
    for ra, rb in zip(a, b):
        if ra.get("m") != rb.get("m"):
            return None  # the runs took different paths; positions no longer match
        if ra.get("out") != rb.get("out") and ra.get("in") == rb.get("in"):
            return ra.get("m")
    return None


def compare(step: int, records_a: Iterable[dict[str, Any]],
            records_b: Iterable[dict[str, Any]]) -> Localization:
    """Find the first op (and module) whose result differs between the two runs' records."""
    ops_a, mods_a = split(records_a)
    ops_b, mods_b = split(records_b)
    loc = Localization(step)
    loc.first_module_forward = _first_module(mods_a, mods_b, "forward")
    if loc.first_module_forward is None:  # once forward differs, every gradient does
        loc.first_module_backward = _first_module(mods_a, mods_b, "backward")
    garbage_a: set[str] = set()  # what the UNINITIALIZED ops returned, on each side
    garbage_b: set[str] = set()
    for i, (a, b) in enumerate(zip(ops_a, ops_b)):
        loc.ops_compared = i + 1
        if (a.get("op"), a.get("m"), a.get("ph")) != (b.get("op"), b.get("m"), b.get("ph")):
            loc.found, loc.op_index = True, i
            loc.phase, loc.module, loc.op = a.get("ph"), a.get("m"), a.get("op")
            loc.detail = (f"the runs ran different code from op {i} on: {a.get('op')} in "
                          f"{_where(a.get('m'), a.get('ph'))} vs {b.get('op')} in "
                          f"{_where(b.get('m'), b.get('ph'))} (control flow on a value that is "
                          "not reproducible)")
            return loc
        if str(a.get("op")) in UNINITIALIZED:
            garbage_a.update(a.get("out") or [])
            garbage_b.update(b.get("out") or [])
            continue
        if a.get("out") != b.get("out"):
            ins_a, ins_b = a.get("in") or [], b.get("in") or []
            loc.found, loc.op_index = True, i
            loc.phase, loc.module, loc.op = a.get("ph"), a.get("m"), a.get("op")
            loc.differing_inputs = [k for k, (x, y) in enumerate(zip(ins_a, ins_b))
                                    if x != y and not (x in garbage_a and y in garbage_b)]
            if len(ins_a) != len(ins_b):
                loc.differing_inputs.append(min(len(ins_a), len(ins_b)))
            loc.inputs_agree = not loc.differing_inputs
            where = f"{_where(loc.module, loc.phase)}, {loc.phase}"
            if loc.inputs_agree:
                loc.detail = (f"{loc.op} in {where} returned different results for the same "
                              "inputs: the op is not deterministic")
            else:
                args = ", ".join(str(k) for k in loc.differing_inputs)
                loc.detail = (f"{loc.op} in {where} got a different argument ({args}) that no "
                              "earlier op produced: a value from outside the recorded ops (Python "
                              "or numpy numbers, OS entropy, a tensor built from them)")
            return loc
    if len(ops_a) != len(ops_b):
        i = min(len(ops_a), len(ops_b))
        longer = ops_a if len(ops_a) > len(ops_b) else ops_b
        rec = longer[i]
        loc.found, loc.op_index = True, i
        loc.phase, loc.module, loc.op = rec.get("ph"), rec.get("m"), rec.get("op")
        loc.detail = (f"one run stopped after {i} ops, the other went on with {rec.get('op')} "
                      f"in {_where(rec.get('m'), rec.get('ph'))}")
        return loc
    loc.detail = (f"all {len(ops_a)} recorded ops of step {step} agree in both replays"
                  if ops_a else f"no op of step {step} was recorded")
    return loc
