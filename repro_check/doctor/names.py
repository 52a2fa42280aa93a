"""What the names in one module mean, read once from its ``ast`` (pass 1 of the scan).

Imports and their aliases, assignments in every scope, function parameters with their defaults,
``self.<name> = ...``, ``argparse`` defaults, keys of dict literals and names sorted in place:
what a reader of the file could follow, so the hazard rules can ask what a name stands for.
"""

from __future__ import annotations

import ast
from typing import Any

#: an unknown value (anything the scan cannot evaluate)
UNKNOWN: Any = type("Unknown", (), {"__repr__": lambda self: "UNKNOWN"})()

SCOPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


class Names:
    """The bindings of one parsed module; :attr:`imports` is what it imports."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.parent: dict[ast.AST, ast.AST] = {}
        self.nodes: list[ast.AST] = [tree]  # every node, parents before children
        for node in self.nodes:
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node
                self.nodes.append(child)
        self.aliases: dict[str, str] = {}
        self.imports: list[tuple[int, str, tuple[str, ...]]] = []  # (level, module, names)
        self.bindings: dict[ast.AST, dict[str, list[Any]]] = {}
        self.attributes: dict[str, list[Any]] = {}  # self.<name> = ...
        self.fields: dict[tuple[str, str], list[Any]] = {}  # <name>.<attr> = ... (not self)
        self.classes: dict[str, list[ast.ClassDef]] = {}  # class statements by name
        self.options: dict[str, list[Any]] = {}  # argparse dest -> defaults
        self.keys: dict[str, list[Any]] = {}  # dict literal key -> values
        self.sorted_names: dict[ast.AST, set[str]] = {}  # scope -> names with .sort() calls
        self._calls: dict[str, list[ast.Call]] | None = None
        self._collect()

    def scope(self, node: ast.AST) -> ast.AST:
        """The function, lambda, class or module whose bindings ``node`` sees first."""
        n = self.parent.get(node)
        while n is not None and not isinstance(n, SCOPES):
            n = self.parent.get(n)
        return n if n is not None else self.tree

    def _bind(self, scope: ast.AST, name: str, value: Any) -> None:
        self.bindings.setdefault(scope, {}).setdefault(name, []).append(value)

    def _bind_target(self, scope: ast.AST, target: ast.expr, value: Any) -> None:
        if isinstance(target, ast.Name):
            self._bind(scope, target.id, value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = value.elts if isinstance(value, (ast.Tuple, ast.List)) else None
            if values is not None and len(values) != len(target.elts):
                values = None
            for i, t in enumerate(target.elts):
                self._bind_target(scope, t, values[i] if values is not None else UNKNOWN)
        elif isinstance(target, ast.Starred):
            self._bind_target(scope, target.value, UNKNOWN)
        elif (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
              and target.value.id == "self"):
            self.attributes.setdefault(target.attr, []).append(value)
        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
            self.fields.setdefault((target.value.id, target.attr), []).append(value)

    def _collect(self) -> None:
        for node in self.nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        top = a.name.split(".")[0]
                        self.aliases[top] = top
                    self.imports.append((0, a.name, ()))
            elif isinstance(node, ast.ImportFrom):
                base = "." * node.level + (node.module or "")
                for a in node.names:
                    if a.name != "*":
                        self.aliases[a.asname or a.name] = (
                            f"{base}.{a.name}" if node.module else f"{base}{a.name}")
                self.imports.append((node.level, node.module or "",
                                     tuple(a.name for a in node.names if a.name != "*")))
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    self._bind_target(self.scope(node), t, node.value)
            elif isinstance(node, ast.AnnAssign):
                value = node.value if node.value is not None else ("annotation", node.annotation)
                self._bind_target(self.scope(node), node.target, value)
            elif isinstance(node, ast.AugAssign):
                value = ast.BinOp(left=node.target, op=node.op, right=node.value)
                self._bind_target(self.scope(node), node.target, value)
            elif isinstance(node, ast.NamedExpr):
                self._bind_target(self.scope(node), node.target, node.value)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                self._bind_target(self.scope(node), node.target, UNKNOWN)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                self._bind_target(self.scope(node), node.optional_vars, UNKNOWN)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                self._bind(self.scope(node), node.name, UNKNOWN)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self._bind(self.scope(node), node.name, UNKNOWN)
                if isinstance(node, ast.ClassDef):
                    self.classes.setdefault(node.name, []).append(node)
            if isinstance(node, FUNCTIONS):
                self._bind_parameters(node)
            elif isinstance(node, ast.Call):
                self._collect_call(node)
            elif isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values):
                    if isinstance(k, ast.Constant) and isinstance(k.value, str):
                        self.keys.setdefault(k.value, []).append(v)

    def _bind_parameters(self, fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        a = fn.args
        positional = [*a.posonlyargs, *a.args]
        defaults: list[Any] = [UNKNOWN] * (len(positional) - len(a.defaults)) + list(a.defaults)
        for arg, default in zip(positional, defaults):
            self._bind(fn, arg.arg, default)
        for arg, default in zip(a.kwonlyargs, a.kw_defaults):
            self._bind(fn, arg.arg, default if default is not None else UNKNOWN)
        for extra in (a.vararg, a.kwarg):
            if extra is not None:
                self._bind(fn, extra.arg, UNKNOWN)

    def _collect_call(self, call: ast.Call) -> None:
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "sort" and isinstance(func.value, ast.Name):
            self.sorted_names.setdefault(self.scope(call), set()).add(func.value.id)
        if isinstance(func, ast.Attribute) and func.attr == "add_argument":
            dest = argparse_dest(call)
            if dest is not None:
                self.options.setdefault(dest, []).append(argparse_default(call))
        if self.qualname(func) == "dict":
            for kw in call.keywords:
                if kw.arg is not None:
                    self.keys.setdefault(kw.arg, []).append(kw.value)
        if (self.qualname(func) in ("importlib.import_module", "__import__") and call.args
                and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)
                and not call.args[0].value.startswith(".")):
            self.imports.append((0, call.args[0].value, ()))

    def lookup(self, name: str, at: ast.AST) -> list[Any] | None:
        """Every value ``name`` is bound to in the scope that ``at`` sees it from (None: unbound)."""
        scope = self.binding_scope(name, at)
        return None if scope is None else self.bindings[scope][name]

    def qualname(self, expr: ast.AST) -> str | None:
        """``np.random.default_rng`` -> ``numpy.random.default_rng`` via the file's imports."""
        if isinstance(expr, ast.Name):
            return self.aliases.get(expr.id, expr.id)
        if isinstance(expr, ast.Attribute):
            base = self.qualname(expr.value)
            return f"{base}.{expr.attr}" if base is not None else None
        return None

    def module_of(self, expr: ast.AST) -> str | None:
        """The imported module an attribute chain starts from (None: a variable, not a module)."""
        while isinstance(expr, ast.Attribute):
            expr = expr.value
        if isinstance(expr, ast.Name) and expr.id in self.aliases:
            return self.aliases[expr.id].lstrip(".").split(".")[0] or "."
        return None


    def binding_scope(self, name: str, at: ast.AST) -> ast.AST | None:
        """The scope whose binding of ``name`` is the one seen from ``at`` (None: unbound)."""
        scope: ast.AST | None = self.scope(at)
        first = True
        while scope is not None:
            if not (isinstance(scope, ast.ClassDef) and not first) and \
                    name in self.bindings.get(scope, {}):
                return scope
            first = False
            scope = None if isinstance(scope, ast.Module) else self.scope(scope)
        return None

    def passed_for(self, fn: ast.AST, name: str) -> list[ast.expr] | None:
        """What the calls of ``fn`` in this module pass for its parameter ``name``.

        None when ``fn`` is not a named function with that parameter, or a call passes it in a
        way not followed (``*args``, ``**kwargs``).
        """
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        a = fn.args
        positional = [p.arg for p in (*a.posonlyargs, *a.args)]
        if name not in positional and name not in (p.arg for p in a.kwonlyargs):
            return None
        method = isinstance(self.parent.get(fn), ast.ClassDef) and bool(positional) and \
            positional[0] in ("self", "cls")
        out: list[ast.expr] = []
        for call in self.calls_of(fn.name):
            through_attribute = isinstance(call.func, ast.Attribute)
            names = positional[1:] if method and through_attribute else positional
            given = next((k.value for k in call.keywords if k.arg == name), None)
            if given is None and name in names:
                i = names.index(name)
                if any(isinstance(x, ast.Starred) for x in call.args[: i + 1]):
                    return None
                given = call.args[i] if i < len(call.args) else None
            if given is None and any(k.arg is None for k in call.keywords):
                return None
            if given is not None:
                out.append(given)
        return out

    def calls_of(self, name: str) -> list[ast.Call]:
        """Calls of a function by its name (``name(...)``, ``obj.name(...)``) in this module."""
        if self._calls is None:
            self._calls = {}
            for node in self.nodes:
                if isinstance(node, ast.Call):
                    f = node.func
                    called = f.id if isinstance(f, ast.Name) else \
                        f.attr if isinstance(f, ast.Attribute) else None
                    if called:
                        self._calls.setdefault(called, []).append(node)
        return self._calls.get(name, [])

    def named(self, expr: ast.AST) -> tuple[list[Any] | None, Any]:
        """The values a name or ``self.<attr>`` is bound to, and a key that stands for it."""
        if isinstance(expr, ast.Name):
            return self.lookup(expr.id, expr), ("name", expr.id, self.scope(expr))
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and \
                expr.value.id == "self":
            return self.attributes.get(expr.attr), ("self", expr.attr)
        return None, None



def argparse_dest(call: ast.Call) -> str | None:
    for kw in call.keywords:
        if kw.arg == "dest" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
            return kw.value.value
    names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if not names:
        return None
    longs = [n for n in names if n.startswith("--")]
    name = (longs or names)[0].lstrip("-")
    return name.replace("-", "_") or None


def argparse_default(call: ast.Call) -> Any:
    for kw in call.keywords:
        if kw.arg == "default":
            return kw.value
    for kw in call.keywords:
        if kw.arg == "action" and isinstance(kw.value, ast.Constant):
            if kw.value.value == "store_true":
                return ast.Constant(False)
            if kw.value.value == "store_false":
                return ast.Constant(True)
    return UNKNOWN

