"""Static scan of one source file for determinism hazards, with Python's ``ast`` only.

Nothing here imports or runs the code it reads. Names are followed as far as a reader of the
file could follow them (:mod:`~repro_check.doctor.names`, :mod:`~repro_check.doctor.evaluate`):
imports and their aliases, assignments in the enclosing scopes, function defaults, ``argparse``
defaults, keys of dict literals. What cannot be known statically (a value from a config file, a
command-line option without a default) is not reported, so a finding is something the file itself
says. Each family of hazards has its module of rules (seeds, switches, loaders, ops, order); the
codes and their texts live in :mod:`repro_check.doctor_codes`. What depends on every file read
(is torch seeded anywhere? does the program train?) is decided by :func:`program_hits` over the
:class:`FileScan` of each (:mod:`~repro_check.doctor.program`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from repro_check.doctor import compiled, gpu, loaders, ops, order, program, seeds, switches
from repro_check.doctor.evaluate import Evaluator, Hazard
from repro_check.doctor.names import FUNCTIONS


@dataclass(frozen=True)
class Hit:
    """One hazard in one file: ``line``..``end_line`` is the code it points at."""

    code: str
    line: int
    end_line: int
    message: str

    @classmethod
    def at(cls, code: str, node: ast.AST, message: str) -> Hit:
        """The hit pointing at ``node``'s lines."""
        line = getattr(node, "lineno", 1)
        return cls(code, line, getattr(node, "end_lineno", None) or line, message)


def call_hazards(ev: Evaluator, call: ast.Call) -> Iterator[Hazard]:
    """What one call may be: a DataLoader, a seeding, a determinism switch, a CUDA op."""
    q = ev.qualname(call.func) or ""
    last = q.split(".")[-1] if q else (call.func.attr if isinstance(call.func, ast.Attribute)
                                       else "")
    if last == "DataLoader":
        yield from loaders.dataloader(ev, call)
    yield from seeds.seed_call(ev, call, q, last)
    yield from switches.switch_call(ev, call, q)
    yield from gpu.precision_call(ev, call, q)
    yield from gpu.flash_call(ev, call, q)
    op = ops.OPS.get(last)
    if op is not None:
        yield from ops.op_call(ev, call, q, last, op)


def hazards(ev: Evaluator) -> Iterator[Hazard]:
    """Every hazard of the module, in the order the rules find them."""
    for node in ev.nodes:
        if isinstance(node, ast.Call):
            yield from call_hazards(ev, node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            if node.value is None:
                continue  # a bare annotation assigns nothing
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                yield from seeds.seed_assignment(ev, node, target)
                yield from switches.cudnn_assignment(ev, node, target)
                yield from gpu.tf32_assignment(ev, node, target)
        elif isinstance(node, FUNCTIONS):
            yield from seeds.seed_parameters(ev, node)
    yield from seeds.os_entropy(ev)  # after the seed rules: what they reported is not repeated
    yield from seeds.environments(ev)
    yield from order.order_hazards(ev)
    yield from compiled.compile_hazards(ev)
    yield from gpu.nccl_hazards(ev)
    yield from gpu.uninitialized(ev)


@dataclass
class FileScan:
    """One file's scan: the hits that hold whatever else the program does, its imports
    (level, module, names) and what it tells about the program."""

    hits: list[Hit]
    imports: list[tuple[int, str, tuple[str, ...]]]
    facts: program.Facts


def unique_hits(hazards: Iterable[Hazard]) -> list[Hit]:
    """One hit per code and line (the first rule to find it there says why), in line order."""
    unique: dict[tuple[str, int], Hit] = {}
    for code, node, message in hazards:
        h = Hit.at(code, node, message)
        unique.setdefault((h.code, h.line), h)
    return sorted(unique.values(), key=lambda h: (h.line, h.code))


def scan_tree(tree: ast.Module) -> FileScan:
    """The hazards in one parsed module, its imports and its program facts."""
    ev = Evaluator(tree)
    found = list(hazards(ev))
    held = program.WITHOUT_FIXED_TORCH | program.WITHOUT_DETERMINISTIC
    kept = [h for h in found if h[0] not in held]
    return FileScan(unique_hits(kept), ev.imports, program.facts(
        ev, [h for h in found if h[0] in program.WITHOUT_FIXED_TORCH],
        [h for h in found if h[0] in program.WITHOUT_DETERMINISTIC]))


def program_hits(scans: Sequence[FileScan]) -> list[list[Hit]]:
    """The hits of each file once the whole program is known (the target's file first)."""
    extra = program.program_hazards([s.facts for s in scans])
    return [sorted({(h.code, h.line): h for h in [*unique_hits(more), *s.hits]}.values(),
                   key=lambda h: (h.line, h.code))
            for s, more in zip(scans, extra)]
