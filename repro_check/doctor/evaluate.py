"""What an expression of one module evaluates to, as far as the file itself says.

Constants followed through names, attributes, argparse defaults and dict keys; the clock or
entropy call a value comes from; whether an expression is a set, or a directory listing. What
cannot be known statically is UNKNOWN (or None, False), so a rule reports only what the file says.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterable
from typing import Any

from repro_check.doctor.names import UNKNOWN, Names

#: how many names deep a value is followed
DEPTH = 12

#: calls whose value is the time
CLOCK = {
    "time.time", "time.time_ns", "time.perf_counter", "time.perf_counter_ns", "time.monotonic",
    "time.monotonic_ns", "time.process_time", "time.process_time_ns", "time.thread_time",
    "time.thread_time_ns", "time.clock_gettime", "time.clock_gettime_ns",
    "datetime.datetime.now", "datetime.datetime.utcnow", "datetime.datetime.today",
    "datetime.date.today",
}
#: calls that read the clock when their time argument (at this position, 0-based) is not given
CLOCK_WITHOUT_TIME = {"time.localtime": 0, "time.gmtime": 0, "time.ctime": 0,
                      "time.asctime": 0, "time.strftime": 1}


def reads_clock(call: ast.Call, q: str | None) -> bool:
    """Whether a call's value is the time: a clock call, or ``time.strftime(fmt)``,
    ``time.localtime()`` and the like without a time."""
    if q in CLOCK:
        return True
    pos = CLOCK_WITHOUT_TIME.get(q or "")
    if pos is None:
        return False
    given = len(call.args) > pos or any(k.arg is None for k in call.keywords) or \
        any(isinstance(a, ast.Starred) for a in call.args)
    arg = call.args[pos] if len(call.args) > pos else None
    return not given or (isinstance(arg, ast.Constant) and arg.value is None)


#: calls whose value differs in every run or process
ENTROPY = {"os.urandom", "os.getrandom", "random.SystemRandom", "uuid.uuid1", "uuid.uuid4",
           "os.getpid", "os.times"}
#: values that differ per process: string hashes (PYTHONHASHSEED) and memory addresses
HASHES = {"hash", "id"}
#: calls that count the machine's cores: their value is taken as 2 (at least one, more unknown)
CPU_COUNTS = {"os.cpu_count", "multiprocessing.cpu_count", "os.process_cpu_count",
              "torch.get_num_threads", "psutil.cpu_count"}
#: calls that list a directory in file-system order
LISTINGS = {"os.listdir", "os.scandir", "glob.glob", "glob.iglob"}

#: torch's functions that draw from its default generator (which starts from OS entropy)
TORCH_DRAWS = {"rand", "randn", "randint", "randperm", "normal", "bernoulli", "multinomial",
               "poisson", "rand_like", "randn_like", "randint_like"}
#: attributes of ``random`` and ``numpy.random`` that are not draws from the global generator
NOT_DRAWS = {"seed", "getstate", "setstate", "get_state", "set_state", "Random", "SystemRandom",
             "default_rng", "RandomState", "SeedSequence", "Generator", "BitGenerator", "PCG64",
             "PCG64DXSM", "MT19937", "Philox", "SFC64"}
#: the global random streams, by the module that draws from them
STREAMS = {"random": "python", "numpy.random": "numpy", "torch": "torch"}
#: the stream of a value from the clock or OS entropy, which no seed fixes
ENTROPY_STREAM = "entropy"
#: how a message names each stream
STREAM_NAMES = {"python": "Python's random", "numpy": "numpy's global generator",
                "torch": "torch's default generator"}

#: comparisons a test with known values is evaluated with
COMPARISONS: dict[type, Any] = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
                                ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}

#: a hazard as a rule finds it: (code, the node it points at, message)
Hazard = tuple[str, ast.AST, str]
#: a draw from a global stream: (stream, the call, how many function parameters it went through)
Draw = tuple[str, ast.Call, int]


class Evaluator(Names):
    """The bindings of one module and what its expressions evaluate to.

    :attr:`consumed` holds the entropy calls already reported as the source of a seed.
    """

    def __init__(self, tree: ast.Module) -> None:
        super().__init__(tree)
        self.consumed: set[ast.AST] = set()
        self._memo: dict[Any, Any] = {}  # what a name evaluates to, so shared names cost once

    def const(self, expr: Any, seen: frozenset[Any] = frozenset()) -> Any:
        """The constant an expression always has, or UNKNOWN (by the kind of expression:
        :attr:`CONST_RULES`)."""
        if expr is UNKNOWN or not isinstance(expr, ast.AST) or len(seen) > DEPTH:
            return UNKNOWN
        for kind, rule in Evaluator.CONST_RULES:
            if isinstance(expr, kind):
                return rule(self, expr, seen)
        return UNKNOWN

    def _const_name(self, expr: ast.Name, seen: frozenset[Any]) -> Any:
        return self._agree(self.lookup(expr.id, expr), ("name", expr.id, self.scope(expr)), seen)

    def _const_attribute(self, expr: ast.Attribute, seen: frozenset[Any]) -> Any:
        """``self.x`` as every assignment to it agrees; ``args.x`` as its option's default."""
        if isinstance(expr.value, ast.Name) and expr.value.id == "self":
            return self._agree(self.attributes.get(expr.attr), ("self", expr.attr), seen)
        if self.module_of(expr) is None:
            return self._agree(self.options.get(expr.attr), ("option", expr.attr), seen)
        return UNKNOWN

    def _const_subscript(self, expr: ast.Subscript, seen: frozenset[Any]) -> Any:
        """``d["key"]`` as every value given that key agrees."""
        key = expr.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return self._agree(self.keys.get(key.value), ("key", key.value), seen)
        return UNKNOWN

    def _const_unary(self, expr: ast.UnaryOp, seen: frozenset[Any]) -> Any:
        v = self.const(expr.operand, seen)
        if v is UNKNOWN:
            return UNKNOWN
        try:
            return {ast.Not: lambda x: not x, ast.USub: lambda x: -x,
                    ast.UAdd: lambda x: +x}[type(expr.op)](v)
        except (KeyError, TypeError):
            return UNKNOWN

    def _const_binary(self, expr: ast.BinOp, seen: frozenset[Any]) -> Any:
        """Whole-number arithmetic only."""
        a, b = self.const(expr.left, seen), self.const(expr.right, seen)
        if not (isinstance(a, int) and isinstance(b, int)):
            return UNKNOWN
        ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
               ast.FloorDiv: lambda: a // b}
        try:
            return ops[type(expr.op)]()
        except (KeyError, ZeroDivisionError):
            return UNKNOWN

    def _const_bool(self, expr: ast.BoolOp, seen: frozenset[Any]) -> Any:
        """``a or b``, ``a and b``: the operand that decides, once every one before is known."""
        v = UNKNOWN
        for item in expr.values:
            v = self.const(item, seen)
            if v is UNKNOWN:
                return UNKNOWN
            if bool(v) == isinstance(expr.op, ast.Or):
                return v
        return v

    def _const_if(self, expr: ast.IfExp, seen: frozenset[Any]) -> Any:
        """Both branches' value when they agree; the smaller of two positive counts."""
        a, b = self.const(expr.body, seen), self.const(expr.orelse, seen)
        if a == b:
            return a
        if isinstance(a, int) and isinstance(b, int) and a > 0 and b > 0:
            return min(a, b)
        return UNKNOWN

    def _const_call(self, expr: ast.Call, seen: frozenset[Any]) -> Any:
        """A CPU count (2: at least one core, the machine decides how many); ``int``,
        ``bool``, ``min`` and ``max`` of known values."""
        q = self.qualname(expr.func)
        if q in CPU_COUNTS:
            return 2
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

    #: how :meth:`const` evaluates each kind of expression (any other is UNKNOWN)
    CONST_RULES: tuple[tuple[type, Callable[[Evaluator, Any, frozenset[Any]], Any]], ...] = (
        (ast.Constant, lambda self, expr, seen: expr.value),
        (ast.Name, _const_name), (ast.Attribute, _const_attribute),
        (ast.Subscript, _const_subscript), (ast.UnaryOp, _const_unary),
        (ast.BinOp, _const_binary), (ast.BoolOp, _const_bool), (ast.IfExp, _const_if),
        (ast.Call, _const_call))

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
        if not isinstance(expr, ast.AST) or len(seen) > DEPTH:
            return None
        for node in ast.walk(expr):
            if isinstance(node, ast.Call):
                q = self.qualname(node.func)
                if reads_clock(node, q) or q in ENTROPY or q in HASHES \
                        or (q or "").startswith("secrets."):
                    self.consumed.add(node)
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

    def draw_stream(self, call: ast.Call) -> str | None:
        """The global stream a call draws from (``random.randint``: "python", ``np.random.rand``:
        "numpy", ``torch.randn``: "torch"), or "entropy" for the clock and OS entropy."""
        q = self.qualname(call.func) or ""
        if reads_clock(call, q) or q in ENTROPY or q in HASHES or q.startswith("secrets."):
            return ENTROPY_STREAM
        module, _, last = q.rpartition(".")
        if module not in STREAMS or last in NOT_DRAWS or last.startswith("_"):
            return None
        if module == "torch" and (last not in TORCH_DRAWS
                                  or any(k.arg == "generator" for k in call.keywords)):
            return None
        return STREAMS[module]

    def draws(self, expr: Any, seen: frozenset[Any] = frozenset(), via: int = 0) -> list[Draw]:
        """The draws from global streams a value is computed from, followed through names,
        ``obj.attr = ...``, argparse defaults, dict keys and the arguments of calls in this file
        (by the kind of expression: :attr:`DRAW_RULES`).

        Branches a known value rules out are skipped: ``args.seed or random.randint(...)`` with
        a ``--seed`` default, ``if args.seed is None: args.seed = ...`` likewise.
        """
        if not isinstance(expr, ast.AST) or len(seen) > DEPTH:
            return []
        for kind, rule in Evaluator.DRAW_RULES:
            if isinstance(expr, kind):
                return rule(self, expr, seen, via)
        return []

    def _parts_draws(self, parts: Iterable[Any], seen: frozenset[Any], via: int) -> list[Draw]:
        return [d for p in parts for d in self.draws(p, seen, via)]

    def _call_draws(self, expr: ast.Call, seen: frozenset[Any], via: int) -> list[Draw]:
        """The call's own draw, or its arguments' (and its receiver's)."""
        stream = self.draw_stream(expr)
        if stream is not None:
            return [(stream, expr, via)]
        parts: list[Any] = [*expr.args, *(k.value for k in expr.keywords)]
        f = expr.func
        if isinstance(f, ast.Attribute) and not isinstance(f.value, (ast.Name, ast.Attribute)):
            parts.append(f.value)  # torch.randint(...).item(), not cfg.get_seed()
        return self._parts_draws(parts, seen, via)

    def _bool_draws(self, expr: ast.BoolOp, seen: frozenset[Any], via: int) -> list[Draw]:
        """Operands up to the first known to decide the value."""
        out: list[Draw] = []
        for item in expr.values:
            out += self.draws(item, seen, via)
            v = self.const(item)
            if v is not UNKNOWN and bool(v) == isinstance(expr.op, ast.Or):
                break
        return out

    def _subscript_draws(self, expr: ast.Subscript, seen: frozenset[Any],
                         via: int) -> list[Draw]:
        index = expr.slice
        if isinstance(index, ast.Constant) and isinstance(index.value, str):
            return self._bound_draws(self.keys.get(index.value), ("key", index.value), seen, via)
        return self.draws(expr.value, seen, via) + self.draws(index, seen, via)

    def _name_draws(self, expr: ast.Name, seen: frozenset[Any], via: int) -> list[Draw]:
        """What the name is bound to, and what calls in this file pass for it as a parameter."""
        if not isinstance(expr.ctx, ast.Load):
            return []
        key: tuple[Any, ...] = ("name", expr.id, self.scope(expr))
        memo = ("draws", key, via)
        if key in seen:
            return []
        if memo not in self._memo:
            self._memo[memo] = []  # a name that refers back to itself adds nothing
            scope = self.binding_scope(expr.id, expr)
            out = self._bound_draws(self.lookup(expr.id, expr), key, seen, via)
            passed = self.passed_for(scope, expr.id) if scope is not None else None
            out += [d for p in passed or [] for d in self.draws(p, seen | {key}, via + 1)]
            self._memo[memo] = out
        return self._memo[memo]

    def _attribute_draws(self, expr: ast.Attribute, seen: frozenset[Any],
                         via: int) -> list[Draw]:
        """``self.x``, ``obj.x`` (its assignments) and ``args.x`` (its option's default)."""
        if not isinstance(expr.value, ast.Name):
            return []
        if expr.value.id == "self":
            return self._bound_draws(self.attributes.get(expr.attr), ("self", expr.attr),
                                     seen, via)
        if self.module_of(expr) is not None:
            return []
        key = ("field", expr.value.id, expr.attr)
        return (self._bound_draws(self.fields.get((expr.value.id, expr.attr)), key, seen, via)
                + self._bound_draws(self.options.get(expr.attr), ("option", expr.attr), seen,
                                    via))

    #: how :meth:`draws` follows each kind of expression (any other draws nothing)
    DRAW_RULES: tuple[tuple[type | tuple[type, ...],
                            Callable[[Evaluator, Any, frozenset[Any], int], list[Draw]]], ...] = (
        (ast.Call, _call_draws),
        (ast.Starred, lambda self, expr, seen, via: self.draws(expr.value, seen, via)),
        (ast.IfExp, lambda self, expr, seen, via: self._parts_draws(self._branch(expr), seen,
                                                                     via)),
        (ast.BoolOp, _bool_draws),
        ((ast.BinOp, ast.UnaryOp, ast.Tuple, ast.List, ast.JoinedStr, ast.FormattedValue),
         lambda self, expr, seen, via: self._parts_draws(
             [p for p in ast.iter_child_nodes(expr) if isinstance(p, ast.expr)], seen, via)),
        (ast.Subscript, _subscript_draws), (ast.Name, _name_draws),
        (ast.Attribute, _attribute_draws))

    def _bound_draws(self, values: list[Any] | None, key: Any, seen: frozenset[Any],
                     via: int) -> list[Draw]:
        if not values or key in seen:
            return []
        return [d for v in values if isinstance(v, ast.AST) and not self._ruled_out(v)
                for d in self.draws(v, seen | {key}, via)]

    def _branch(self, expr: ast.IfExp) -> list[ast.expr]:
        """The branches of ``a if test else b`` a known value does not rule out."""
        truth = self.truth(expr.test)
        return [expr.body, expr.orelse] if truth is None else [expr.body if truth else expr.orelse]

    def truth(self, test: ast.expr, value: Any = None) -> bool | None:
        """What a test evaluates to where the file fixes it (None: not known): ``x is None``,
        ``not x``, ``x == -1`` with a known ``x``. ``value`` evaluates the names in it."""
        value = value or self.const
        subject, kind = none_test(test)
        if subject is not None:
            v = value(subject)
            if v is UNKNOWN:
                return None
            return v is None if kind == "is None" else v is not None if kind == "is not None" \
                else not v
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            a, b = value(test.left), value(test.comparators[0])
            op = COMPARISONS.get(type(test.ops[0]))
            if a is UNKNOWN or b is UNKNOWN or op is None:
                return None
            try:
                return bool(op(a, b))
            except TypeError:
                return None
        v = value(test)
        return None if v is UNKNOWN else bool(v)

    def _ruled_out(self, value: ast.AST) -> bool:
        """An assignment in the branch of an ``if`` that a known value rules out, as in
        ``if args.seed is None: args.seed = random.randint(...)`` with a ``--seed`` default."""
        stmt = self.parent.get(value)
        block = self.parent.get(stmt) if stmt is not None else None
        if not (isinstance(stmt, ast.Assign) and isinstance(block, ast.If)):
            return False
        assigned = {t.id for t in stmt.targets if isinstance(t, ast.Name)}

        def known(expr: Any) -> Any:
            """A name this statement assigns is known by its other bindings."""
            if isinstance(expr, ast.Name) and expr.id in assigned:
                others = [v for v in self.lookup(expr.id, expr) or [] if v is not value]
                if not others or not all(isinstance(v, ast.AST) for v in others):
                    return UNKNOWN
                return self._agreement([self.const(v) for v in others])
            return self.const(expr)

        truth = self.truth(block.test, known)
        return (truth is False and stmt in block.body) or (truth is True and stmt in block.orelse)

    def is_set(self, expr: Any, seen: frozenset[Any] = frozenset()) -> bool:
        if not isinstance(expr, ast.AST) or len(seen) > DEPTH:
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
        values, key = self.named(expr)
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


    def is_numeric_set(self, expr: Any, seen: frozenset[Any] = frozenset()) -> bool:
        """A set whose elements are numbers: its order does not depend on string hashing."""
        if not isinstance(expr, ast.AST) or len(seen) > DEPTH:
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
        values, key = self.named(expr)
        if not values or key in seen:
            return False
        return all(not isinstance(v, tuple) and self.is_numeric_set(v, seen | {key}) for v in values)

    def listing(self, expr: Any, seen: frozenset[Any] = frozenset()) -> str | None:
        """The directory-listing call an expression is, or names (None when it is sorted)."""
        if not isinstance(expr, ast.AST) or len(seen) > DEPTH:
            return None
        if isinstance(expr, ast.Call):
            q = self.qualname(expr.func)
            if q in LISTINGS:
                return f"{q}()"
            f = expr.func
            if isinstance(f, ast.Attribute) and f.attr in ("iterdir", "rglob", "glob"):
                return f".{f.attr}()"  # pathlib: glob.glob itself is in LISTINGS
            return None
        values, key = self.named(expr)
        if not values or key in seen:
            return None
        if isinstance(expr, ast.Name) and expr.id in self.sorted_names.get(self.scope(expr), ()):
            return None
        found = [self.listing(v, seen | {key}) for v in values if not isinstance(v, tuple)]
        if found and all(found) and len(found) == len(values):
            return found[0]
        return None

    def keywords(self, call: ast.Call) -> tuple[dict[str, ast.expr], bool]:
        """Keyword arguments, with ``**name`` of a dict literal opened; True when some are unknown."""
        out: dict[str, ast.expr] = {}
        opaque = any(isinstance(a, ast.Starred) for a in call.args)
        for kw in call.keywords:
            if kw.arg is not None:
                out[kw.arg] = kw.value
                continue
            values, _ = self.named(kw.value) if isinstance(kw.value, (ast.Name, ast.Attribute)) \
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


def none_test(test: ast.expr) -> tuple[ast.expr | None, str]:
    """``x is None``, ``x is not None`` or ``not x``: (x, which of them); (None, "") otherwise."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and is_none(test.comparators[0]):
        if isinstance(test.ops[0], ast.Is):
            return test.left, "is None"
        if isinstance(test.ops[0], ast.IsNot):
            return test.left, "is not None"
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand, "not"
    return None, ""


def text(node: ast.AST, limit: int = 60) -> str:
    """The source of ``node`` for a message, cut to ``limit`` characters."""
    shown = ast.unparse(node)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def arg(call: ast.Call, name: str, pos: int | None) -> Any:
    """The expression given for a parameter, by keyword or position; None when not given."""
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    if pos is not None and len(call.args) > pos and not any(
            isinstance(a, ast.Starred) for a in call.args[: pos + 1]):
        return call.args[pos]
    return None


def is_none(expr: Any) -> bool:
    """A literal None (an argument given as None counts as not given)."""
    return isinstance(expr, ast.Constant) and expr.value is None

