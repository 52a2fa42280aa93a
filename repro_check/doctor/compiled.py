"""A model compiled with ``torch.compile`` (or ``model.compile()``) while inductor's own
determinism settings stay off (RC117).

Inductor may pick kernels by timing them (autotuning), reorder reductions, and draw random
numbers differently from eager mode; ``torch._inductor.config.deterministic`` (or
``TORCHINDUCTOR_DETERMINISTIC=1``) makes its choices fixed, and ``fallback_random`` makes its
random draws eager's. A file that compiles and says neither is reported at the compile call.

Since PyTorch 2.10, ``torch.use_deterministic_algorithms(True)`` also turns inductor's
deterministic mode on: in a file that calls it, only ``fallback_random`` is left, and only where
the compiled models draw random numbers (dropout, torch's draws in a ``forward``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from repro_check.doctor.evaluate import Evaluator, Hazard, text
from repro_check.doctor.gpu import draws_in_compiled_code, turns_on_deterministic

#: inductor settings that make compiled runs repeat their choices
SETTINGS = ("deterministic", "fallback_random")
ENV = "TORCHINDUCTOR_DETERMINISTIC"


def _compiles(ev: Evaluator, node: ast.AST) -> bool:
    """``torch.compile(...)``, a ``@torch.compile`` decorator, or ``model.compile(...)``
    (``nn.Module.compile``, which compiles the module in place): a ``compile`` method called on
    a variable, not on an imported module (``re.compile``)."""
    target = node.func if isinstance(node, ast.Call) else node
    if (ev.qualname(target) or "") == "torch.compile":
        return True
    return isinstance(node, ast.Call) and isinstance(target, ast.Attribute) \
        and target.attr == "compile" and ev.module_of(target.value) is None \
        and not isinstance(target.value, ast.Constant)


def _inductor(ev: Evaluator, expr: ast.AST) -> bool:
    return "inductor" in (ev.qualname(expr) or text(expr, 200))


def _sets_determinism(ev: Evaluator, node: ast.AST) -> bool:
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Attribute) and t.attr in SETTINGS and _inductor(ev, t.value)
                   and ev.const(node.value) is True for t in node.targets)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "patch" and _inductor(ev, node.func.value):
        return any(k.arg in SETTINGS and ev.const(k.value) is True for k in node.keywords)
    return isinstance(node, ast.Constant) and node.value == ENV


def compile_hazards(ev: Evaluator) -> Iterator[Hazard]:
    """Each compile site of a file that never turns inductor's determinism on."""
    sites: list[ast.AST] = []
    deterministic = False
    for node in ev.nodes:
        if _sets_determinism(ev, node):
            return
        deterministic = deterministic or turns_on_deterministic(ev, node)
        if isinstance(node, ast.Call) and _compiles(ev, node):
            sites.append(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            sites += [d for d in node.decorator_list if _compiles(ev, d)]
    if deterministic:
        # inductor's deterministic mode is on (PyTorch >= 2.10): what is left is random draws
        if not draws_in_compiled_code(ev):
            return
        for site in sites:
            yield ("RC117", site, f"{text(site, 40)} compiles a model that draws random numbers "
                                  "without torch._inductor.config.fallback_random: "
                                  "use_deterministic_algorithms(True) does not cover them")
        return
    for site in sites:
        yield ("RC117", site, f"{text(site, 40)} compiles with inductor's determinism settings "
                              "off (torch._inductor.config.deterministic, fallback_random)")
