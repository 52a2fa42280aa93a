"""Static scan of one source file for determinism hazards, with Python's ``ast`` only.

Nothing here imports or runs the code it reads. Names are followed as far as a reader of the
file could follow them: imports and their aliases, assignments in the enclosing scopes, function
defaults, ``argparse`` defaults, keys of dict literals. What cannot be known statically (a value
from a config file, a command-line option without a default) is not reported, so a finding is
something the file itself says. The codes and their texts live in
:mod:`repro_check.doctor.codes`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

#: an unknown value (anything the scan cannot evaluate)
UNKNOWN: Any = type("Unknown", (), {"__repr__": lambda self: "UNKNOWN"})()

_SCOPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_DEPTH = 12

CLOCK = {
    "time.time", "time.time_ns", "time.perf_counter", "time.perf_counter_ns", "time.monotonic",
    "time.monotonic_ns", "time.process_time", "time.process_time_ns", "time.thread_time",
    "time.thread_time_ns", "time.clock_gettime", "time.clock_gettime_ns",
    "datetime.datetime.now", "datetime.datetime.utcnow", "datetime.datetime.today",
    "datetime.date.today",
}
ENTROPY = {"os.urandom", "os.getrandom", "random.SystemRandom", "uuid.uuid1", "uuid.uuid4",
           "os.getpid", "os.times"}
#: values that differ per process: string hashes (PYTHONHASHSEED) and memory addresses
HASHES = {"hash", "id"}
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

CPU_COUNTS = {"os.cpu_count", "multiprocessing.cpu_count", "os.process_cpu_count",
              "torch.get_num_threads", "psutil.cpu_count"}

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
LISTINGS = {"os.listdir", "os.scandir", "glob.glob", "glob.iglob"}


@dataclass(frozen=True)
class Hit:
    """One hazard in one file: ``line``..``end_line`` is the code it points at."""

    code: str
    line: int
    end_line: int
    message: str


# ---- the CUDA ops PyTorch lists as nondeterministic (torch.use_deterministic_algorithms) --------

@dataclass(frozen=True)
class _Op:
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
OPS: dict[str, _Op] = {
    **{name: _Op(_RAISES, backward=True, module_only=True) for name in (
        "AvgPool3d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool2d",
        "FractionalMaxPool2d", "FractionalMaxPool3d", "ReflectionPad1d", "ReflectionPad2d",
        "ReflectionPad3d", "CTCLoss", "UpsamplingBilinear2d", "avg_pool3d", "adaptive_avg_pool2d",
        "adaptive_avg_pool3d", "adaptive_max_pool2d", "fractional_max_pool2d",
        "fractional_max_pool3d", "ctc_loss", "grid_sample", "upsample_bilinear")},
    **{name: _Op(_RAISES, module_only=True) for name in (
        "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "max_unpool1d", "max_unpool2d", "max_unpool3d")},
    "Upsample": _Op(_RAISES, True, "mode", 2, _LINEAR, module_only=True),
    "interpolate": _Op(_RAISES, True, "mode", 3, _LINEAR, module_only=True),
    "upsample": _Op(_RAISES, True, "mode", 3, _LINEAR, module_only=True),
    "EmbeddingBag": _Op(_RAISES, True, "mode", 5, {"max": _RAISES}, module_only=True),
    "embedding_bag": _Op(_RAISES, True, "mode", 6, {"max": _RAISES}, module_only=True),
    "pad": _Op(_RAISES, True, "mode", 2, {"reflect": _RAISES, "replicate": _DEFAULT},
               module_only=True),
    "histc": _Op(_RAISES),
    "bincount": _Op(_RAISES, False, "weights", 0, "given"),
    "median": _Op(_RAISES, False, "dim", 0, "given"),
    "put_": _Op(_RAISES),
    "put": _Op(_RAISES),
    "scatter_reduce": _Op(_RAISES, False, "reduce", 3,
                          {"prod": _RAISES, "sum": _DEFAULT, "mean": _DEFAULT}),
    "scatter_reduce_": _Op(_RAISES, False, "reduce", 3,
                           {"prod": _RAISES, "sum": _DEFAULT, "mean": _DEFAULT}),
    **{name: _Op(_DEFAULT, backward=True, module_only=True) for name in (
        "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d", "MaxPool3d", "max_pool3d")},
    **{name: _Op(_DEFAULT) for name in (
        "index_add", "index_add_", "scatter_add", "scatter_add_", "index_copy", "index_copy_")},
    **{name: _Op(_DEFAULT, False, "accumulate", 2, "true") for name in ("index_put", "index_put_")},
}
#: op names that also mean something else outside torch: only a torch receiver counts
_GENERIC_OPS = {"pad", "put", "upsample", "interpolate"}


# ---- the scanner ------------------------------------------------------------------------------

class Scanner:
    """Scans one parsed module; :meth:`run` returns its hits, :attr:`imports` what it imports."""

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
        self.options: dict[str, list[Any]] = {}  # argparse dest -> defaults
        self.keys: dict[str, list[Any]] = {}  # dict literal key -> values
        self.sorted_names: dict[ast.AST, set[str]] = {}  # scope -> names with .sort() calls
        self.hits: list[Hit] = []
        self._consumed: set[ast.AST] = set()
        self._memo: dict[Any, Any] = {}  # what a name evaluates to, so shared names cost once
        self._collect()

    # ---- pass 1: what names mean -------------------------------------------------------------

    def scope(self, node: ast.AST) -> ast.AST:
        n = self.parent.get(node)
        while n is not None and not isinstance(n, _SCOPES):
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
            if isinstance(node, _FUNCTIONS):
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
        for arg in (a.vararg, a.kwarg):
            if arg is not None:
                self._bind(fn, arg.arg, UNKNOWN)

    def _collect_call(self, call: ast.Call) -> None:
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "sort" and isinstance(func.value, ast.Name):
            self.sorted_names.setdefault(self.scope(call), set()).add(func.value.id)
        if isinstance(func, ast.Attribute) and func.attr == "add_argument":
            dest = _argparse_dest(call)
            if dest is not None:
                self.options.setdefault(dest, []).append(_argparse_default(call))
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
        scope: ast.AST | None = self.scope(at)
        first = True
        while scope is not None:
            if not (isinstance(scope, ast.ClassDef) and not first):
                found = self.bindings.get(scope, {}).get(name)
                if found is not None:
                    return found
            first = False
            scope = None if isinstance(scope, ast.Module) else self.scope(scope)
        return None

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

    # ---- evaluation --------------------------------------------------------------------------

    def const(self, expr: Any, seen: frozenset[Any] = frozenset()) -> Any:
        """The constant an expression always has, or UNKNOWN."""
        if expr is UNKNOWN or not isinstance(expr, ast.AST) or len(seen) > _DEPTH:
            return UNKNOWN
        if isinstance(expr, ast.Constant):
            return expr.value
        if isinstance(expr, ast.Name):
            return self._agree(self.lookup(expr.id, expr), ("name", expr.id, self.scope(expr)), seen)
        if isinstance(expr, ast.Attribute):
            if isinstance(expr.value, ast.Name) and expr.value.id == "self":
                return self._agree(self.attributes.get(expr.attr), ("self", expr.attr), seen)
            if self.module_of(expr) is None:
                return self._agree(self.options.get(expr.attr), ("option", expr.attr), seen)
            return UNKNOWN
        if isinstance(expr, ast.Subscript):
            key = expr.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                return self._agree(self.keys.get(key.value), ("key", key.value), seen)
            return UNKNOWN
        if isinstance(expr, ast.UnaryOp):
            v = self.const(expr.operand, seen)
            if v is UNKNOWN:
                return UNKNOWN
            try:
                return {ast.Not: lambda x: not x, ast.USub: lambda x: -x,
                        ast.UAdd: lambda x: +x}[type(expr.op)](v)
            except (KeyError, TypeError):
                return UNKNOWN
        if isinstance(expr, ast.BinOp):
            a, b = self.const(expr.left, seen), self.const(expr.right, seen)
            if not (isinstance(a, int) and isinstance(b, int)):
                return UNKNOWN
            ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
                   ast.FloorDiv: lambda: a // b}
            try:
                return ops[type(expr.op)]()
            except (KeyError, ZeroDivisionError):
                return UNKNOWN
        if isinstance(expr, ast.BoolOp):
            v: Any = UNKNOWN
            for item in expr.values:
                v = self.const(item, seen)
                if v is UNKNOWN:
                    return UNKNOWN
                if bool(v) == isinstance(expr.op, ast.Or):
                    return v
            return v
        if isinstance(expr, ast.IfExp):
            a, b = self.const(expr.body, seen), self.const(expr.orelse, seen)
            if a == b:
                return a
            if isinstance(a, int) and isinstance(b, int) and a > 0 and b > 0:
                return min(a, b)
            return UNKNOWN
        if isinstance(expr, ast.Call):
            q = self.qualname(expr.func)
            if q in CPU_COUNTS:
                return 2  # at least one core; the machine decides how many
            if q == "len" and expr.args and isinstance(expr.args[0], ast.Call) and \
                    self.qualname(expr.args[0].func) == "os.sched_getaffinity":
                return 2
            if q in ("int", "bool") and len(expr.args) == 1:
                v = self.const(expr.args[0], seen)
                return UNKNOWN if v is UNKNOWN else (int(v) if q == "int" else bool(v))
            if q in ("min", "max") and expr.args and not expr.keywords:
                vals = [self.const(a, seen) for a in expr.args]
                if all(isinstance(v, int) for v in vals):
                    return (min if q == "min" else max)(vals)
        return UNKNOWN

    def _agree(self, values: list[Any] | None, key: Any, seen: frozenset[Any]) -> Any:
        """The one constant every binding agrees on (positive ints agree with each other)."""
        if not values or key in seen:
            return UNKNOWN
        memo = ("const", key)
        if memo not in self._memo:
            self._memo[memo] = self._agreement(
                [self.const(v, seen | {key}) if not isinstance(v, tuple) else UNKNOWN
                 for v in values])
        return self._memo[memo]

    @staticmethod
    def _agreement(out: list[Any]) -> Any:
        if any(v is UNKNOWN for v in out):
            return UNKNOWN
        if all(v == out[0] and type(v) is type(out[0]) for v in out):
            return out[0]
        if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in out):
            return min(out)
        return UNKNOWN

    def source_of(self, expr: Any, seen: frozenset[Any] = frozenset()) -> str | None:
        """The clock or entropy call an expression takes its value from, if any.

        Names that themselves contain ``seed`` are not followed: their assignment is reported.
        """
        if not isinstance(expr, ast.AST) or len(seen) > _DEPTH:
            return None
        for node in ast.walk(expr):
            if isinstance(node, ast.Call):
                q = self.qualname(node.func)
                if q in CLOCK or q in ENTROPY or q in HASHES or (q or "").startswith("secrets."):
                    self._consumed.add(node)
                    return f"{q}()"
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                if "seed" in node.id.lower():
                    continue
                key = ("name", node.id, self.scope(node))
                if key in seen:
                    continue
                memo = ("source", key)
                if memo not in self._memo:
                    self._memo[memo] = next(
                        (src for value in self.lookup(node.id, node) or []
                         if (src := self.source_of(value, seen | {key}))), None)
                if self._memo[memo]:
                    return self._memo[memo]
        return None

    def is_set(self, expr: Any, seen: frozenset[Any] = frozenset()) -> bool:
        if not isinstance(expr, ast.AST) or len(seen) > _DEPTH:
            return False
        if isinstance(expr, (ast.Set, ast.SetComp)):
            return True
        if isinstance(expr, ast.Call):
            q = self.qualname(expr.func)
            if q in ("set", "frozenset"):
                return True
            return (isinstance(expr.func, ast.Attribute)
                    and expr.func.attr in ("union", "intersection", "difference",
                                           "symmetric_difference", "copy")
                    and self.is_set(expr.func.value, seen))
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.BitOr, ast.BitAnd, ast.Sub,
                                                                ast.BitXor)):
            return self.is_set(expr.left, seen) or self.is_set(expr.right, seen)
        values, key = self._named(expr)
        if not values or key in seen:
            return False
        return all(self._set_binding(v, seen | {key}) for v in values)

    def _set_binding(self, value: Any, seen: frozenset[Any]) -> bool:
        if isinstance(value, tuple):  # an annotation without a value
            ann = value[1]
            base = ann.value if isinstance(ann, ast.Subscript) else ann
            return (self.qualname(base) or "").split(".")[-1] in ("set", "Set", "frozenset",
                                                                  "FrozenSet", "AbstractSet")
        return self.is_set(value, seen)

    def _named(self, expr: ast.AST) -> tuple[list[Any] | None, Any]:
        if isinstance(expr, ast.Name):
            return self.lookup(expr.id, expr), ("name", expr.id, self.scope(expr))
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and \
                expr.value.id == "self":
            return self.attributes.get(expr.attr), ("self", expr.attr)
        return None, None

    def is_numeric_set(self, expr: Any, seen: frozenset[Any] = frozenset()) -> bool:
        """A set whose elements are numbers: its order does not depend on string hashing."""
        if not isinstance(expr, ast.AST) or len(seen) > _DEPTH:
            return False
        if isinstance(expr, ast.Set):
            return all(isinstance(e, ast.Constant) and isinstance(e.value, (int, float))
                       for e in expr.elts)
        if isinstance(expr, ast.Call) and self.qualname(expr.func) in ("set", "frozenset"):
            if not expr.args:
                return False
            arg = expr.args[0]
            if isinstance(arg, ast.Call):
                return self.qualname(arg.func) == "range" or (
                    isinstance(arg.func, ast.Attribute) and arg.func.attr == "tolist")
            if isinstance(arg, (ast.List, ast.Tuple)):
                return all(isinstance(e, ast.Constant) and isinstance(e.value, (int, float))
                           for e in arg.elts)
            return False
        if isinstance(expr, ast.BinOp):
            return self.is_numeric_set(expr.left, seen) and (
                isinstance(expr.op, (ast.BitAnd, ast.Sub)) or self.is_numeric_set(expr.right, seen))
        values, key = self._named(expr)
        if not values or key in seen:
            return False
        return all(not isinstance(v, tuple) and self.is_numeric_set(v, seen | {key}) for v in values)

    def listing(self, expr: Any, seen: frozenset[Any] = frozenset()) -> str | None:
        """The directory-listing call an expression is, or names (None when it is sorted)."""
        if not isinstance(expr, ast.AST) or len(seen) > _DEPTH:
            return None
        if isinstance(expr, ast.Call):
            q = self.qualname(expr.func)
            if q in LISTINGS:
                return f"{q}()"
            f = expr.func
            if isinstance(f, ast.Attribute) and f.attr in ("iterdir", "rglob", "glob"):
                return f".{f.attr}()"  # pathlib: glob.glob itself is in LISTINGS
            return None
        values, key = self._named(expr)
        if not values or key in seen:
            return None
        if isinstance(expr, ast.Name) and expr.id in self.sorted_names.get(self.scope(expr), ()):
            return None
        found = [self.listing(v, seen | {key}) for v in values if not isinstance(v, tuple)]
        if found and all(found) and len(found) == len(values):
            return found[0]
        return None

    # ---- pass 2: hazards ---------------------------------------------------------------------

    def hit(self, code: str, node: ast.AST, message: str) -> None:
        line = getattr(node, "lineno", 1)
        self.hits.append(Hit(code, line, getattr(node, "end_lineno", None) or line, message))

    def run(self) -> list[Hit]:
        for node in self.nodes:
            if isinstance(node, ast.Call):
                self._call(node)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                self._assign(node)
            elif isinstance(node, _FUNCTIONS):
                self._seed_parameters(node)
        for node in self.nodes:
            if isinstance(node, ast.Call) and node not in self._consumed:
                q = self.qualname(node.func) or ""
                if q in DIRECT_ENTROPY or q.startswith("secrets."):
                    self.hit("RC111", node, f"{q}() draws from the operating system's entropy")
        for expr, consumer in self._iterations():
            self._order(expr, consumer)
        unique: dict[tuple[str, int], Hit] = {}
        for h in self.hits:
            unique.setdefault((h.code, h.line), h)
        return sorted(unique.values(), key=lambda h: (h.line, h.code))

    def _text(self, node: ast.AST, limit: int = 60) -> str:
        text = ast.unparse(node)
        return text if len(text) <= limit else text[: limit - 3] + "..."

    def _arg(self, call: ast.Call, name: str, pos: int | None) -> Any:
        """The expression given for a parameter, by keyword or position; None when not given."""
        for kw in call.keywords:
            if kw.arg == name:
                return kw.value
        if pos is not None and len(call.args) > pos and not any(
                isinstance(a, ast.Starred) for a in call.args[: pos + 1]):
            return call.args[pos]
        return None

    def _kwargs(self, call: ast.Call) -> tuple[dict[str, ast.expr], bool]:
        """Keyword arguments, with ``**name`` of a dict literal opened; True when some are unknown."""
        out: dict[str, ast.expr] = {}
        opaque = any(isinstance(a, ast.Starred) for a in call.args)
        for kw in call.keywords:
            if kw.arg is not None:
                out[kw.arg] = kw.value
                continue
            values, _ = self._named(kw.value) if isinstance(kw.value, (ast.Name, ast.Attribute)) \
                else ([kw.value], None)
            value = values[0] if values and len(values) == 1 else None
            if isinstance(value, ast.Call) and self.qualname(value.func) == "dict" and \
                    not value.args and all(k.arg for k in value.keywords):
                out.update({k.arg: k.value for k in value.keywords if k.arg})
                continue
            if not isinstance(value, ast.Dict):
                opaque = True
                continue
            for k, v in zip(value.keys, value.values):
                if isinstance(k, ast.Constant) and isinstance(k.value, str):
                    out[k.value] = v
                else:
                    opaque = True
        return out, opaque

    def _call(self, call: ast.Call) -> None:
        q = self.qualname(call.func) or ""
        last = q.split(".")[-1] if q else (call.func.attr if isinstance(call.func, ast.Attribute)
                                           else "")
        if last == "DataLoader":
            self._dataloader(call)
        self._seeds(call, q, last)
        if q.endswith("use_deterministic_algorithms"):
            mode = self.const(self._arg(call, "mode", 0))
            warn = self.const(self._arg(call, "warn_only", 1))
            if mode is False:
                self.hit("RC110", call, f"{self._text(call)} turns deterministic algorithms off")
            elif mode is True and warn is True:
                self.hit("RC110", call, f"{self._text(call)}: ops without a deterministic "
                         "implementation only warn and still run")
        elif q.endswith("set_deterministic_debug_mode"):
            mode = self.const(self._arg(call, "debug_mode", 0))
            if mode in (0, "default"):
                self.hit("RC110", call, f"{self._text(call)} turns deterministic algorithms off")
        elif q.endswith("cudnn.flags") or q.endswith("cudnn.set_flags"):
            self._cudnn_flags(call, q.endswith("set_flags"))
        op = OPS.get(last)
        if op is not None:
            self._op(call, q, last, op)

    def _dataloader(self, call: ast.Call) -> None:
        kw, opaque = self._kwargs(call)
        workers = kw.get("num_workers", call.args[5] if len(call.args) > 5 else None)
        if workers is None:
            return
        n = self.const(workers)
        known_zero = n == 0 and not isinstance(n, bool)
        if not known_zero and self.const(kw.get("in_order")) is False:
            self.hit("RC112", call, "DataLoader(in_order=False) hands out batches in the order "
                                    "workers finish them")
        if not (isinstance(n, int) and not isinstance(n, bool) and n > 0):
            return
        given = {name for name in ("generator", "worker_init_fn")
                 if name in kw and not (isinstance(kw[name], ast.Constant) and kw[name].value is None)}
        if len(call.args) > 10:
            given.add("worker_init_fn")
        if len(call.args) > 12:
            given.add("generator")
        if given or opaque:
            return
        self.hit("RC101", call, f"DataLoader with num_workers={self._text(workers, 30)} and no "
                                "generator or worker_init_fn")

    def _seeds(self, call: ast.Call, q: str, last: str) -> None:
        args = [a for a in call.args if not isinstance(a, ast.Starred)]
        starred = len(args) != len(call.args) or any(k.arg is None for k in call.keywords)
        if last in SEED_FUNCTIONS and (last != "Generator" or q.startswith("numpy")):
            for value in [*args, *(k.value for k in call.keywords if k.arg is not None)]:
                src = self.source_of(value)
                if src:
                    self.hit("RC104", call, f"{self._text(call)} seeds from {src}")
                    return
        for k in call.keywords:
            if k.arg and ("seed" in k.arg.lower() or k.arg == "random_state"):
                src = self.source_of(k.value)
                if src:
                    self.hit("RC104", call, f"{k.arg}= takes its value from {src}")
                    return
        if isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument":
            dest = _argparse_dest(call)
            default = _argparse_default(call)
            if dest and "seed" in dest.lower() and isinstance(default, ast.AST):
                src = self.source_of(default)
                if src:
                    self.hit("RC104", call, f"the default of --{dest.replace('_', '-')} comes "
                                            f"from {src}")
                    return
        unseeded = not args or (len(args) == 1 and _is_none(args[0]))
        seed_kw = [k for k in call.keywords if k.arg in ("seed", "a", "x", "entropy")]
        if seed_kw:
            unseeded = not args and all(_is_none(k.value) for k in seed_kw)
        if starred:
            return
        if q in RESEED_ALWAYS:
            self.hit("RC105", call, f"{q}() reseeds from a nondeterministic source")
        elif (q in RESEED_WITHOUT_ARG or (
                last == "seed" and isinstance(call.func, ast.Attribute)
                and self.module_of(call.func) is None)) and unseeded:
            self.hit("RC105", call, f"{self._text(call)} without a seed reseeds from the clock "
                                    "or OS entropy")
        elif unseeded and (
                (last in NUMPY_GENERATORS and (q.startswith("numpy.") or q == last
                                               or self.module_of(call.func) is None))
                or q == "random.Random"):
            what = "numpy" if q != "random.Random" else "Python"
            self.hit("RC106", call, f"{self._text(call)} creates a {what} generator seeded from "
                                    "OS entropy")

    def _assign(self, node: ast.Assign | ast.AnnAssign) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if node.value is None:
            return
        for t in targets:
            name = t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else ""
            if "seed" in name.lower():
                src = self.source_of(node.value)
                if src:
                    self.hit("RC104", node, f"{self._text(t)} is taken from {src}")
            if isinstance(t, ast.Attribute) and (self.qualname(t.value) or "").endswith("cudnn"):
                v = self.const(node.value)
                if t.attr == "benchmark" and v is True:
                    self.hit("RC102", node, f"{self._text(t)} = True lets cuDNN pick kernels by "
                                            "timing them")
                elif t.attr == "deterministic" and v is False:
                    self.hit("RC103", node, f"{self._text(t)} = False allows nondeterministic "
                                            "cuDNN kernels")

    def _seed_parameters(self, fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        a = fn.args
        positional = [*a.posonlyargs, *a.args]
        pairs = list(zip(positional[len(positional) - len(a.defaults):], a.defaults))
        pairs += [(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
        for arg, default in pairs:
            if "seed" in arg.arg.lower():
                src = self.source_of(default)
                if src:
                    self.hit("RC104", default, f"the default of parameter {arg.arg!r} comes "
                                               f"from {src}")

    def _cudnn_flags(self, call: ast.Call, setter: bool) -> None:
        prefix = "_" if setter else ""
        if self.const(self._arg(call, prefix + "enabled", 0)) is False:
            return  # cuDNN off: none of its kernels run
        bench = self.const(self._arg(call, prefix + "benchmark", 1))
        if bench is True:
            self.hit("RC102", call, f"{self._text(call)} turns cuDNN benchmarking on")
        det_expr = self._arg(call, prefix + "deterministic", 3)
        det = self.const(det_expr)
        if det is False or (det_expr is None and not setter
                            and not any(k.arg is None for k in call.keywords)):
            self.hit("RC103", call, f"{self._text(call)} turns deterministic cuDNN off (flags() "
                                    "defaults to deterministic=False)")

    def _op(self, call: ast.Call, q: str, last: str, op: _Op) -> None:
        func = call.func
        module = self.module_of(func.value) if isinstance(func, ast.Attribute) else (
            self.module_of(func) if isinstance(func, ast.Name) and func.id in self.aliases else None)
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
            value_expr = self._arg(call, op.arg, pos)
            if value_expr is None or _is_none(value_expr):
                return
            if op.when == "given":
                detail = f" with {op.arg}={self._text(value_expr, 20)}"
            else:
                value = self.const(value_expr)
                if op.when == "true":
                    if value is not True:
                        return
                elif isinstance(op.when, dict):
                    if not isinstance(value, str) or value not in op.when:
                        return
                    code = op.when[value]
                detail = f" with {op.arg}={value!r}"
        where = "in its backward pass on CUDA" if op.backward else "on CUDA"
        name = self._text(func, 40)
        if code == _RAISES:
            message = (f"{name}{detail} is nondeterministic {where} and has no deterministic "
                       "implementation")
        else:
            message = (f"{name}{detail} is nondeterministic {where} unless deterministic "
                       "algorithms are on")
        self.hit(code, call, message)

    # ---- iteration order ---------------------------------------------------------------------

    def _iterations(self) -> Iterator[tuple[ast.expr, ast.AST]]:
        """Every expression whose iteration order decides something, with what consumes it."""
        for node in self.nodes:
            if isinstance(node, (ast.For, ast.AsyncFor)):
                yield node.iter, node
            elif isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.DictComp)):
                for gen in node.generators:
                    yield gen.iter, node
            elif isinstance(node, ast.Call):
                q = self.qualname(node.func)
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
                        not args and self.is_set(node.func.value):
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

    def _order_free(self, consumer: ast.AST) -> bool:
        """True when what the consumer builds is used in a way its order cannot change."""
        parent = self.parent.get(consumer)
        if isinstance(parent, ast.Call) and consumer in parent.args:
            return self.qualname(parent.func) in ORDER_FREE
        if isinstance(parent, ast.comprehension) and consumer is parent.iter:
            holder = self.parent.get(parent)
            return isinstance(holder, ast.SetComp) or (
                holder is not None and self._order_free(holder))
        if isinstance(parent, (ast.Assign, ast.AnnAssign)):
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            if len(targets) == 1 and isinstance(targets[0], ast.Name):
                return targets[0].id in self.sorted_names.get(self.scope(parent), ())
        return False

    def _order(self, expr: ast.expr, consumer: ast.AST) -> None:
        if isinstance(consumer, ast.Call) and self._order_free(consumer):
            return
        if isinstance(consumer, (ast.ListComp, ast.GeneratorExp, ast.DictComp)) and \
                self._order_free(consumer):
            return
        if self.is_set(expr):
            if not self.is_numeric_set(expr):
                self.hit("RC107", expr, f"iterating over the set {self._text(expr, 40)}: its "
                                        "order follows hash values")
            return
        src = self.listing(expr)
        if src:
            self.hit("RC113", expr, f"iterating over {self._text(expr, 40)} unsorted: {src} "
                                    "lists in file-system order")


def _is_none(expr: Any) -> bool:
    return isinstance(expr, ast.Constant) and expr.value is None


def _argparse_dest(call: ast.Call) -> str | None:
    for kw in call.keywords:
        if kw.arg == "dest" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
            return kw.value.value
    names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if not names:
        return None
    longs = [n for n in names if n.startswith("--")]
    name = (longs or names)[0].lstrip("-")
    return name.replace("-", "_") or None


def _argparse_default(call: ast.Call) -> Any:
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


def scan_tree(tree: ast.Module) -> tuple[list[Hit], list[tuple[int, str, tuple[str, ...]]]]:
    """The hazards in one parsed module, and the imports it makes (level, module, names)."""
    s = Scanner(tree)
    return s.run(), s.imports
