"""Seeding hazards: seeds from the clock or OS entropy (RC104), reseeding from them (RC105),
generators created without a seed (RC106), and OS entropy used directly (RC111)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from repro_check.doctor.evaluate import Evaluator, Hazard, is_none, text
from repro_check.doctor.names import argparse_default, argparse_dest

#: entropy sources that are a hazard wherever they are used (uuid and pid are fine for run names)
DIRECT_ENTROPY = {"os.urandom", "os.getrandom", "random.SystemRandom"}

SEED_FUNCTIONS = {
    "manual_seed", "manual_seed_all", "seed", "seed_all", "set_seed", "seed_everything",
    "default_rng", "RandomState", "Random", "SeedSequence", "PCG64", "PCG64DXSM", "MT19937",
    "Philox", "SFC64", "Generator",
}
RESEED_ALWAYS = {"torch.seed", "torch.random.seed", "torch.cuda.seed", "torch.cuda.seed_all",
                 "torch.cuda.random.seed", "torch.cuda.random.seed_all"}
RESEED_WITHOUT_ARG = {"random.seed", "numpy.random.seed"}
NUMPY_GENERATORS = {"default_rng", "RandomState", "SeedSequence", "PCG64", "PCG64DXSM", "MT19937",
                    "Philox", "SFC64"}


def seed_call(ev: Evaluator, call: ast.Call, q: str, last: str) -> Iterator[Hazard]:
    """A call that seeds from the clock or entropy, reseeds, or makes an unseeded generator."""
    args = [a for a in call.args if not isinstance(a, ast.Starred)]
    starred = len(args) != len(call.args) or any(k.arg is None for k in call.keywords)
    if last in SEED_FUNCTIONS and (last != "Generator" or q.startswith("numpy")):
        for value in [*args, *(k.value for k in call.keywords if k.arg is not None)]:
            src = ev.source_of(value)
            if src:
                yield ("RC104", call, f"{text(call)} seeds from {src}")
                return
    for k in call.keywords:
        if k.arg and ("seed" in k.arg.lower() or k.arg == "random_state"):
            src = ev.source_of(k.value)
            if src:
                yield ("RC104", call, f"{k.arg}= takes its value from {src}")
                return
    if isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument":
        dest = argparse_dest(call)
        default = argparse_default(call)
        if dest and "seed" in dest.lower() and isinstance(default, ast.AST):
            src = ev.source_of(default)
            if src:
                yield ("RC104", call, f"the default of --{dest.replace('_', '-')} comes "
                                      f"from {src}")
                return
    unseeded = not args or (len(args) == 1 and is_none(args[0]))
    seed_kw = [k for k in call.keywords if k.arg in ("seed", "a", "x", "entropy")]
    if seed_kw:
        unseeded = not args and all(is_none(k.value) for k in seed_kw)
    if starred:
        return
    if q in RESEED_ALWAYS:
        yield ("RC105", call, f"{q}() reseeds from a nondeterministic source")
    elif (q in RESEED_WITHOUT_ARG or (
            last == "seed" and isinstance(call.func, ast.Attribute)
            and ev.module_of(call.func) is None)) and unseeded:
        yield ("RC105", call, f"{text(call)} without a seed reseeds from the clock "
                              "or OS entropy")
    elif unseeded and (
            (last in NUMPY_GENERATORS and (q.startswith("numpy.") or q == last
                                           or ev.module_of(call.func) is None))
            or q == "random.Random"):
        what = "numpy" if q != "random.Random" else "Python"
        yield ("RC106", call, f"{text(call)} creates a {what} generator seeded from "
                              "OS entropy")


def seed_assignment(ev: Evaluator, node: ast.Assign | ast.AnnAssign,
                    target: ast.expr) -> Iterator[Hazard]:
    """``seed = <the clock or entropy>`` (any name or attribute with ``seed`` in it)."""
    name = (target.id if isinstance(target, ast.Name)
            else target.attr if isinstance(target, ast.Attribute) else "")
    if "seed" in name.lower():
        src = ev.source_of(node.value)
        if src:
            yield ("RC104", node, f"{text(target)} is taken from {src}")


def seed_parameters(ev: Evaluator,
                    fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> Iterator[Hazard]:
    """A ``seed`` parameter whose default is the clock or entropy."""
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    pairs = list(zip(positional[len(positional) - len(a.defaults):], a.defaults))
    pairs += [(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
    for arg, default in pairs:
        if "seed" in arg.arg.lower():
            src = ev.source_of(default)
            if src:
                yield ("RC104", default, f"the default of parameter {arg.arg!r} comes "
                                         f"from {src}")


def os_entropy(ev: Evaluator) -> Iterator[Hazard]:
    """OS entropy drawn anywhere but into a seed already reported (run after the seed rules)."""
    for node in ev.nodes:
        if isinstance(node, ast.Call) and node not in ev.consumed:
            q = ev.qualname(node.func) or ""
            if q in DIRECT_ENTROPY or q.startswith("secrets."):
                yield ("RC111", node, f"{q}() draws from the operating system's entropy")
