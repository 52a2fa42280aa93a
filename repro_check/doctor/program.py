"""Hazards that depend on the whole program, every file doctor reads: DataLoader workers while
nothing seeds torch with a fixed value (RC101), training that never seeds torch (RC114), and a
seed drawn from a global stream nothing seeds with a fixed value (RC115).

A file alone cannot say these: the seeding may sit in the script that imports the loader's module.
Each file's scan yields its :class:`Facts`; :func:`program_hazards` decides over all of them.
Since PyTorch 1.9 each DataLoader worker seeds ``random``, torch and numpy's global generator from
``base_seed + worker_id``, and the base seed is drawn from the loader's ``generator`` or torch's
default generator; so workers reproduce exactly when torch is seeded with a fixed value.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from repro_check.doctor.gpu import GpuFacts, gpu_facts
from repro_check.doctor.evaluate import ENTROPY_STREAM, STREAM_NAMES, Evaluator, Hazard, text
from repro_check.doctor.seeds import Seeding, seedings

#: codes a rule finds in one file that hold only while torch has no fixed seed
WITHOUT_FIXED_TORCH = frozenset({"RC101"})
#: codes a rule finds in one file that hold only while the program never turns deterministic
#: algorithms on (wherever it does: at module level, in main, in an imported helper)
WITHOUT_DETERMINISTIC = frozenset({"RC109"})
#: methods a DataLoader worker runs: their draws come from streams seeded from torch's seed
WORKER_METHODS = {"__getitem__", "__getitems__", "__iter__", "__next__"}
#: package folders of optimizers (``torch.optim.AdamW``, ``bitsandbytes.optim.Adam8bit``)
OPTIMIZER_PACKAGES = {"optim", "optimizers", "optimization"}


@dataclass
class Facts:
    """What one file tells about the program: the seeds it gives, its first sign of training,
    its DataLoaders with workers and no generator (RC101 unless torch has a fixed seed)."""

    seedings: list[Seeding] = field(default_factory=list)
    training: ast.AST | None = None
    loaders: list[Hazard] = field(default_factory=list)
    in_workers: set[ast.AST] = field(default_factory=set)  # draws made in DataLoader workers
    #: RC109 hazards, held until the program is known not to turn deterministic algorithms on
    nondeterministic: list[Hazard] = field(default_factory=list)
    gpu: GpuFacts = field(default_factory=GpuFacts)


def facts(ev: Evaluator, loaders: list[Hazard], nondeterministic: list[Hazard]) -> Facts:
    """The program facts of one module, with the RC101 and RC109 hazards its rules held back."""
    found = list(seedings(ev))
    signs = sorted(training_signs(ev), key=lambda n: (n.lineno, n.col_offset))
    workers = worker_functions(ev)
    in_workers: set[ast.AST] = {d[1] for s in found for d in s.draws if inside(ev, d[1], workers)}
    return Facts(found, signs[0] if signs else None, loaders, in_workers, nondeterministic,
                 gpu_facts(ev))


def worker_functions(ev: Evaluator) -> set[ast.AST]:
    """The functions DataLoader workers run: a Dataset's ``__getitem__``/``__iter__``/...
    and what is passed as ``worker_init_fn=`` (a lambda, a function's name, a ``partial``)."""
    out: set[ast.AST] = set()
    names: set[str] = set()
    for node in ev.nodes:
        if isinstance(node, ast.keyword) and node.arg == "worker_init_fn":
            value = node.value
            if isinstance(value, ast.Call) and value.args:  # functools.partial(fn, ...)
                value = value.args[0]
            if isinstance(value, ast.Lambda):
                out.add(value)
            elif isinstance(value, (ast.Name, ast.Attribute)):
                names.add(value.id if isinstance(value, ast.Name) else value.attr)
    for node in ev.nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                node.name in names or node.name in WORKER_METHODS
                and isinstance(ev.parent.get(node), ast.ClassDef)):
            out.add(node)
    return out


def inside(ev: Evaluator, node: ast.AST, functions: set[ast.AST]) -> bool:
    """``node`` is in the body of one of ``functions`` (at any depth)."""
    scope = ev.scope(node)
    while not isinstance(scope, ast.Module):
        if scope in functions:
            return True
        scope = ev.scope(scope)
    return False


def training_signs(ev: Evaluator) -> Iterator[ast.Call]:
    """Calls that train: ``.backward(...)``, an optimizer built, ``trainer.fit()``/``.train()``."""
    for node in ev.nodes:
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "backward":
            yield node
            continue
        q = ev.qualname(f) or ""
        parts = q.split(".")
        if ev.module_of(f) is not None and parts[-1][:1].isupper() and \
                OPTIMIZER_PACKAGES & set(parts[:-1]) and "lr_scheduler" not in parts:
            yield node
        elif isinstance(f, ast.Attribute) and f.attr in ("fit", "train") and \
                is_trainer(ev, f.value):
            yield node


def is_trainer(ev: Evaluator, expr: ast.expr) -> bool:
    """``L.Trainer(...)``, ``Trainer.from_argparse_args(...)`` or a name bound to one."""
    if isinstance(expr, ast.Call):
        return any(p.endswith("Trainer") for p in (ev.qualname(expr.func) or "").split("."))
    if isinstance(expr, ast.Name):
        return any(isinstance(v, ast.Call) and is_trainer(ev, v)
                   for v in ev.lookup(expr.id, expr) or [])
    return False


def dependencies(seeding: Seeding, in_workers: set[ast.AST]) -> frozenset[str]:
    """The streams a seed's value is drawn from (what a worker draws depends on torch only)."""
    return frozenset("torch" if d[1] in in_workers else d[0] for d in seeding.draws)


def fixed_streams(files: Sequence[Facts]) -> frozenset[str]:
    """The global streams the program seeds with a fixed value.

    A seed drawn from a stream is fixed once that stream is; the clock and OS entropy never are.
    Where in the program the seeding happens is not checked.
    """
    fixed: set[str] = set()
    pending = [(s.streams, dependencies(s, f.in_workers)) for f in files for s in f.seedings]
    changed = True
    while changed:
        changed = False
        for streams, deps in pending:
            if ENTROPY_STREAM not in deps and deps <= fixed and not streams <= fixed:
                fixed |= streams
                changed = True
    return frozenset(fixed)


def drawn_seeds(f: Facts, fixed: frozenset[str]) -> Iterator[Hazard]:
    """Each draw from a stream without a fixed seed that a seed is taken from, once, at the
    seeding it reaches through the fewest function parameters (then the first by line)."""
    sites: dict[ast.AST, list[tuple[int, int, Seeding, str]]] = {}
    for s in f.seedings:
        for stream, draw, via in s.draws:
            effective = "torch" if draw in f.in_workers else stream
            if stream != ENTROPY_STREAM and effective not in fixed:
                sites.setdefault(draw, []).append((via, getattr(s.node, "lineno", 0), s, stream))
    for site_draw, found in sites.items():
        _, line, site, stream = min(found, key=lambda t: (t[0], t[1]))
        draw_line = getattr(site_draw, "lineno", 0)
        where = f" (line {draw_line})" if draw_line != line else ""
        yield ("RC115", site.node,
               f"{site.what} from {text(site_draw, 40)}{where}, drawn from {STREAM_NAMES[stream]}, "
               "which nothing seeds with a fixed value")


def program_hazards(files: Sequence[Facts]) -> list[list[Hazard]]:
    """The program-wide hazards, per file (in the order given, the target's first)."""
    fixed = fixed_streams(files)
    seeds_torch = any("torch" in s.streams for f in files for s in f.seedings)
    out: list[list[Hazard]] = [[] for _ in files]
    trains = next(((i, f.training) for i, f in enumerate(files) if f.training is not None),
                  None)
    if trains is not None and not seeds_torch:
        i, sign = trains
        out[i].append(("RC114", sign, f"training ({text(sign, 40)}) never seeds torch: "
                                      "model init and shuffling differ between runs"))
    deterministic = any(f.gpu.deterministic for f in files)
    nvte = any(f.gpu.sets_nvte for f in files)
    for f, hazards in zip(files, out):
        if "torch" not in fixed:
            hazards.extend(f.loaders)
        hazards.extend(drawn_seeds(f, fixed))
        if not deterministic:
            hazards.extend(f.nondeterministic)
        if not nvte:
            hazards.extend(f.gpu.te_imports)
    if not deterministic and any(f.gpu.cuda for f in files):
        common_kernels(files, out, trains is not None)
    return out


def common_kernels(files: Sequence[Facts], out: list[list[Hazard]], trains: bool) -> None:
    """RC123 once for the program, at its first use of a common nondeterministic kernel (one
    finding, not one per embedding and gather: they are in nearly every model); kernels
    nondeterministic only in their backward count only in a program that trains."""
    uses = [(i, k) for i, f in enumerate(files) for k, backward in f.gpu.kernels
            if trains or not backward]
    if not uses:
        return
    i, (code, node, message) = min(uses, key=lambda u: (u[0], getattr(u[1][1], "lineno", 0)))
    named = {k[2].split(" is ", 1)[0] for _, k in uses}  # the op's name leads its message
    more = sorted(named - {message.split(" is ", 1)[0]})
    also = f" (also: {', '.join(more[:4])}{', ...' if len(more) > 4 else ''})" if more else ""
    out[i].append((code, node, message + also))
