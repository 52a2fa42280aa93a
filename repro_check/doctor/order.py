"""Iteration-order hazards: a set iterated where its order decides something (RC107), a
directory listing iterated unsorted (RC113)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from repro_check.doctor.evaluate import Evaluator, Hazard, text

#: calls whose result does not depend on the order of what they are given
ORDER_FREE = {"sorted", "set", "frozenset", "len", "min", "max", "any", "all", "collections.Counter"}
#: builtins that consume an iterable in order, and which of their arguments are iterated
_CONSUMERS: dict[str, slice] = {
    "list": slice(0, 1), "tuple": slice(0, 1), "enumerate": slice(0, 1), "iter": slice(0, 1),
    "zip": slice(0, None), "map": slice(1, None), "filter": slice(1, 2), "next": slice(0, 1),
    "dict.fromkeys": slice(0, 1), "collections.OrderedDict.fromkeys": slice(0, 1),
    "collections.deque": slice(0, 1), "numpy.array": slice(0, 1), "numpy.asarray": slice(0, 1),
    "numpy.fromiter": slice(0, 1), "torch.tensor": slice(0, 1), "torch.as_tensor": slice(0, 1),
    "torch.LongTensor": slice(0, 1), "torch.Tensor": slice(0, 1), "random.choice": slice(0, 1),
    "random.sample": slice(0, 1), "random.choices": slice(0, 1),
}


def iterations(ev: Evaluator) -> Iterator[tuple[ast.expr, ast.AST]]:
    """Every expression whose iteration order decides something, with what consumes it."""
    for node in ev.nodes:
        if isinstance(node, (ast.For, ast.AsyncFor)):
            yield node.iter, node
        elif isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.DictComp)):
            for gen in node.generators:
                yield gen.iter, node
        elif isinstance(node, ast.Call):
            q = ev.qualname(node.func)
            args = node.args
            if q in _CONSUMERS:
                for a in args[_CONSUMERS[q]]:
                    yield a, node
            elif isinstance(node.func, ast.Attribute) and node.func.attr in (
                    "join", "extend", "fromkeys") and len(args) == 1:
                yield args[0], node
            elif (q or "").startswith("itertools."):
                for a in args:
                    yield a, node
            elif isinstance(node.func, ast.Attribute) and node.func.attr == "pop" and \
                    not args and ev.is_set(node.func.value):
                yield node.func.value, node
            for a in args:
                if isinstance(a, ast.Starred):
                    yield a.value, node
        elif isinstance(node, (ast.List, ast.Tuple)) and isinstance(node.ctx, ast.Load):
            for e in node.elts:
                if isinstance(e, ast.Starred):
                    yield e.value, node
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], (ast.Tuple, ast.List)):
            yield node.value, node


def order_free(ev: Evaluator, consumer: ast.AST) -> bool:
    """True when what the consumer builds is used in a way its order cannot change."""
    parent = ev.parent.get(consumer)
    if isinstance(parent, ast.Call) and consumer in parent.args:
        return ev.qualname(parent.func) in ORDER_FREE
    if isinstance(parent, ast.comprehension) and consumer is parent.iter:
        holder = ev.parent.get(parent)
        return isinstance(holder, ast.SetComp) or (
            holder is not None and order_free(ev, holder))
    if isinstance(parent, (ast.Assign, ast.AnnAssign)):
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        if len(targets) == 1 and isinstance(targets[0], ast.Name):
            return targets[0].id in ev.sorted_names.get(ev.scope(parent), ())
    return False


def order_hazard(ev: Evaluator, expr: ast.expr, consumer: ast.AST) -> Iterator[Hazard]:
    """A set or an unsorted directory listing whose order ``consumer`` keeps."""
    if isinstance(consumer, ast.Call) and order_free(ev, consumer):
        return
    if isinstance(consumer, (ast.ListComp, ast.GeneratorExp, ast.DictComp)) and \
            order_free(ev, consumer):
        return
    if ev.is_set(expr):
        if not ev.is_numeric_set(expr):
            yield ("RC107", expr, f"iterating over the set {text(expr, 40)}: its "
                                  "order follows hash values")
        return
    src = ev.listing(expr)
    if src:
        yield ("RC113", expr, f"iterating over {text(expr, 40)} unsorted: {src} "
                              "lists in file-system order")


def order_hazards(ev: Evaluator) -> Iterator[Hazard]:
    """Every iteration of the module whose order follows hashes or the file system."""
    for expr, consumer in iterations(ev):
        yield from order_hazard(ev, expr, consumer)
