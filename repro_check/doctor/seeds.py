"""Seeding hazards: seeds from the clock or OS entropy (RC104), reseeding from them (RC105),
generators created without a seed (RC106), OS entropy used directly (RC111), and environments
reset or sampled without a seed (RC116); and what each seeding call seeds, for the rules that
need the whole program (:mod:`~repro_check.doctor.program`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass

from repro_check.doctor.evaluate import Draw, Evaluator, Hazard, is_none, text
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


#: a name that holds an environment (``env``, ``envs``, ``train_env``, ``self.eval_env``)
_ENV_NAME = re.compile(r"(^|_)(envs?|environments?)(_|\d|$)|envs?$", re.IGNORECASE)


def _env_name(node: ast.expr) -> str | None:
    """The text of an expression that names an environment, else None."""
    last = node.id if isinstance(node, ast.Name) else \
        node.attr if isinstance(node, ast.Attribute) else ""
    return text(node) if last and _ENV_NAME.search(last) else None


def environments(ev: Evaluator) -> Iterator[Hazard]:
    """``env.reset()`` without ``seed=`` when no reset of that environment in the file has one
    (or ``env.seed(S)``), and ``env.action_space.sample()`` when nothing in the file calls
    ``env.action_space.seed(...)`` (gymnasium: both draw from OS entropy then)."""
    resets: list[tuple[ast.Call, str]] = []
    samples: list[tuple[ast.Call, str]] = []
    seeded: set[str] = set()
    spaces: set[str] = set()
    for node in ev.nodes:
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        receiver, method = node.func.value, node.func.attr
        is_space = isinstance(receiver, ast.Attribute) and receiver.attr == "action_space"
        if is_space and method in ("seed", "sample"):
            (spaces.add(text(receiver)) if method == "seed" else
             samples.append((node, text(receiver))))
            continue
        env = _env_name(receiver)
        if env is None or method not in ("reset", "seed"):
            continue
        given = [k.value for k in node.keywords if k.arg == "seed" or k.arg is None]
        if method == "seed" and node.args and not is_none(node.args[0]):
            seeded.add(env)  # the older gym API: env.seed(S)
        elif method == "reset" and any(not is_none(v) for v in given):
            seeded.add(env)
        elif method == "reset":
            resets.append((node, env))
    for call, env in resets:
        if env not in seeded:
            yield ("RC116", call, f"{text(call)} without seed= lets the environment draw its "
                                  "seed from OS entropy")
    for call, space in samples:
        if space not in spaces:
            yield ("RC116", call, f"{text(call)} draws from an action space that nothing "
                                  f"seeds ({space}.seed(...))")


#: every global stream: what a helper like ``set_seed(SEED)`` or ``seed_everything(SEED)`` seeds
ALL_STREAMS = frozenset({"python", "numpy", "torch"})
#: calls that seed one global stream
STREAM_SEEDS = {
    "torch.manual_seed": "torch", "torch.random.manual_seed": "torch",
    "torch.set_rng_state": "torch", "torch.random.set_rng_state": "torch",
    "random.seed": "python", "random.setstate": "python",
    "numpy.random.seed": "numpy", "numpy.random.set_state": "numpy",
}
#: helpers called as methods (``fabric.seed_everything(42)``); other methods with ``seed`` in
#: their name seed the object they are called on (``g.manual_seed(0)``, ``rng.seed(1)``)
HELPER_METHODS = {"seed_everything", "set_seed"}
#: packages whose ``*Trainer`` seeds every stream from its arguments (transformers' Trainer
#: calls set_seed(args.seed), 42 unless told otherwise; trl's trainers are Trainers)
SEEDING_TRAINERS = ("transformers.", "trl.", "setfit.")
#: calls that seed every stream from a value in a configuration the source does not show
SEEDING_CALLS = {"LightningCLI", "enable_full_determinism"}


@dataclass(frozen=True)
class Seeding:
    """One place a seed is given: the global streams it seeds (none for a generator of its own
    or CUDA's) and the draws its value is computed from (``entropy`` for the clock)."""

    node: ast.AST
    streams: frozenset[str]
    draws: tuple[Draw, ...]
    what: str = ""  # for a message: "torch.manual_seed(seed) seeds", "seed= takes its value"


def seeded_streams(ev: Evaluator, call: ast.Call, q: str, last: str) -> frozenset[str] | None:
    """The global streams a call seeds (empty: it seeds something else), None when it seeds
    nothing. A project's ``set_seed(...)`` or any function with ``seed`` in its name is taken
    to seed every stream: what it does inside is not followed."""
    if q in STREAM_SEEDS:
        return frozenset({STREAM_SEEDS[q]})
    if q in RESEED_ALWAYS or q in RESEED_WITHOUT_ARG:
        return None
    if last in SEEDING_CALLS or seeding_trainer(ev, q, set()):
        return ALL_STREAMS
    low = last.lower()
    if "seed" in low and not low.startswith(("get", "initial")) \
            and not q.startswith(("torch.cuda.", "torch.mps.", "torch.xpu.", "numpy.")) \
            and last not in NUMPY_GENERATORS and (
                isinstance(call.func, ast.Name) or ev.module_of(call.func) is not None
                or last in HELPER_METHODS):
        return ALL_STREAMS
    if last in SEED_FUNCTIONS and (last != "Generator" or q.startswith("numpy")):
        return frozenset()
    return None


def seeding_trainer(ev: Evaluator, q: str, seen: set[str]) -> bool:
    """transformers' ``Trainer`` (and trl's ...), or a class of this module derived from one."""
    if q.split(".")[-1].endswith("Trainer") and q.startswith(SEEDING_TRAINERS):
        return True
    if "." in q or q in seen:
        return False
    seen.add(q)
    return any(seeding_trainer(ev, ev.qualname(b) or "", seen)
               for node in ev.classes.get(q, []) for b in node.bases)


def seedings(ev: Evaluator) -> Iterator[Seeding]:
    """Every seed the module gives: seeding calls, ``seed=``/``random_state=`` keywords and
    argparse ``--seed`` defaults, with what their values are drawn from."""
    for node in ev.nodes:
        if not isinstance(node, ast.Call):
            continue
        q = ev.qualname(node.func) or ""
        last = q.split(".")[-1] if q else (node.func.attr if isinstance(node.func, ast.Attribute)
                                           else "")
        streams = seeded_streams(ev, node, q, last)
        if streams is not None:
            values = [v for v in (*node.args, *(k.value for k in node.keywords)) if not is_none(v)]
            if streams == ALL_STREAMS and "seed" not in last.lower():
                values = []  # Trainer, LightningCLI: the seed is in their configuration
            elif not values and streams != ALL_STREAMS:
                continue  # random.seed(), default_rng(): reported as RC105, RC106
            yield Seeding(node, streams, tuple(d for v in values for d in ev.draws(v)),
                          f"{text(node)} seeds")
            continue
        for k in node.keywords:
            if k.arg and ("seed" in k.arg.lower() or k.arg == "random_state"):
                yield Seeding(node, frozenset(), tuple(ev.draws(k.value)),
                              f"{k.arg}= takes its value")
        if isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            dest = argparse_dest(node)
            default = argparse_default(node)
            if dest and "seed" in dest.lower() and isinstance(default, ast.AST):
                yield Seeding(node, frozenset(), tuple(ev.draws(default)),
                              f"the default of --{dest.replace('_', '-')} comes")
