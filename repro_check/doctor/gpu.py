"""Hazards of today's GPU stacks: TF32 matmuls and convolutions (RC118), flash-attn without
``deterministic=True`` (RC119), NCCL reductions in the network switch (RC120), Transformer
Engine with its nondeterministic algorithms allowed (RC121, decided over the whole program),
memory that nothing wrote read by a reduction (RC122), and what tells whether deterministic
algorithms are turned on, which decides RC109 and RC123 over the whole program.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

from repro_check.doctor.evaluate import TORCH_DRAWS, Evaluator, Hazard, arg, text
from repro_check.doctor.names import UNKNOWN

#: ``torch.set_float32_matmul_precision`` values that let float32 matmuls run in TF32 or bf16
LOW_PRECISION = {"high", "medium"}
#: the ``fp32_precision`` values (PyTorch >= 2.9) that mean TF32
TF32_VALUES = {"tf32"}

#: flash-attn's functions with a backward pass and a ``deterministic`` parameter, with the
#: fewest positional arguments before it in any release (more given: it may be among them)
FLASH_FUNCTIONS = {
    "flash_attn_func": 8, "flash_attn_qkvpacked_func": 6, "flash_attn_kvpacked_func": 7,
    "flash_attn_varlen_func": 12, "flash_attn_varlen_qkvpacked_func": 8,
    "flash_attn_varlen_kvpacked_func": 11,
}
FLASH_MODULES = ("flash_attn", "flash_attn_interface")

#: NCCL algorithms that reduce inside the network switch (NVLink SHARP, CollNet): the order
#: of the sum is the switch's, not a fixed ring or tree
IN_NETWORK = ("nvls", "collnet")
#: Transformer Engine's switch: 0 keeps its kernels deterministic (the default allows others)
NVTE_SWITCH = "NVTE_ALLOW_NONDETERMINISTIC_ALGO"

#: calls that create a tensor whose memory nothing has written
EMPTY = {"torch.empty", "torch.empty_like", "torch.empty_strided"}
EMPTY_METHODS = {"new_empty", "new_empty_strided"}
#: in-place methods that write every element
FULL_WRITES = {"zero_", "fill_", "copy_", "normal_", "uniform_", "random_", "bernoulli_",
               "exponential_", "geometric_", "log_normal_", "cauchy_", "set_", "resize_"}
#: methods and torch functions that read every element into fewer values
REDUCTIONS = {"sum", "mean", "prod", "max", "min", "amax", "amin", "std", "var", "norm",
              "logsumexp", "nansum", "nanmean", "median", "all", "any", "count_nonzero",
              "argmax", "argmin", "cumsum", "cumprod", "item", "tolist"}

#: ops that nearly every model uses, nondeterministic on CUDA unless deterministic algorithms
#: are on: whether only their backward is (atomic adds), and whether a method call on a
#: variable counts (``x.gather(...)``; ``df.cumsum()`` may be pandas')
@dataclass(frozen=True)
class Kernel:
    backward: bool
    method: bool


COMMON_KERNELS = {"Embedding": Kernel(True, False), "embedding": Kernel(True, False),
                  "gather": Kernel(True, True), "take_along_dim": Kernel(True, False),
                  "index_select": Kernel(True, True), "cumsum": Kernel(False, False)}
#: torch modules with dropout on unless told otherwise (dropout=0.1)
DROPOUT_BY_DEFAULT = {"Transformer", "TransformerEncoderLayer", "TransformerDecoderLayer"}
#: calls of frameworks that turn deterministic algorithms on
FRAMEWORK_DETERMINISM = {"enable_full_determinism"}


@dataclass
class GpuFacts:
    """What one file says about the program's GPU determinism."""

    #: the file turns deterministic algorithms on (or may: a value it does not show)
    deterministic: bool = False
    #: the file names CUDA (a "cuda" device, ``.cuda()``, ``torch.cuda``)
    cuda: bool = False
    #: uses of :data:`COMMON_KERNELS` (RC123 when the program never turns deterministic
    #: algorithms on), and whether only their backward pass is nondeterministic
    kernels: list[tuple[Hazard, bool]] = field(default_factory=list)
    #: imports of Transformer Engine (RC121 unless the program sets NVTE_SWITCH to 0)
    te_imports: list[Hazard] = field(default_factory=list)
    sets_nvte: bool = False


# ---- TF32 (RC118) --------------------------------------------------------------------------

def tf32_assignment(ev: Evaluator, node: ast.Assign | ast.AnnAssign,
                    target: ast.expr) -> Iterator[Hazard]:
    """``torch.backends.cuda.matmul.allow_tf32 = True``, ``cudnn.allow_tf32 = True``,
    ``...fp32_precision = "tf32"``."""
    if not isinstance(target, ast.Attribute):
        return
    owner = ev.qualname(target.value) or ""
    if not owner.startswith("torch.backends"):
        return  # self.allow_tf32, a config's field: not torch's switch
    value = ev.const(node.value)
    if target.attr == "allow_tf32" and value is True:
        yield ("RC118", node, f"{text(target)} = True runs float32 "
                              f"{'convolutions' if 'cudnn' in owner else 'matmuls'} in TF32")
    elif target.attr == "fp32_precision" and isinstance(value, str) \
            and value.lower() in TF32_VALUES:
        yield ("RC118", node, f"{text(target)} = {value!r} runs float32 math in TF32")


def precision_call(ev: Evaluator, call: ast.Call, q: str) -> Iterator[Hazard]:
    """``torch.set_float32_matmul_precision("high" or "medium")``."""
    if not q.endswith("set_float32_matmul_precision"):
        return
    value = ev.const(arg(call, "precision", 0))
    if isinstance(value, str) and value.lower() in LOW_PRECISION:
        yield ("RC118", call, f"{text(call)} lets float32 matmuls run in "
                              f"{'TF32' if value.lower() == 'high' else 'bfloat16'}")


# ---- flash-attn (RC119) --------------------------------------------------------------------

def flash_call(ev: Evaluator, call: ast.Call, q: str) -> Iterator[Hazard]:
    """A flash-attn function whose backward runs without ``deterministic=True``."""
    name = q.split(".")[-1]
    before = FLASH_FUNCTIONS.get(name)
    if before is None or not q.startswith(FLASH_MODULES):
        return
    keywords, opaque = ev.keywords(call)
    given = keywords.get("deterministic")
    if given is None:
        if opaque or len(call.args) > before:
            return  # **kwargs or positional arguments that may hold it: not said here
        yield ("RC119", call, f"{text(call, 50)} runs flash-attn's backward with "
                              "deterministic=False, its default")
    elif ev.const(given) is False:
        yield ("RC119", call, f"{text(call, 50)} turns flash-attn's deterministic backward off")


# ---- environment variables (RC120, RC121) --------------------------------------------------

def env_writes(ev: Evaluator) -> Iterator[tuple[str, ast.expr | None, ast.AST]]:
    """Variables the file sets: ``os.environ[NAME] = v``, ``os.environ.setdefault(NAME, v)``,
    ``os.environ.update(NAME=v)``/``update({NAME: v})``, ``os.putenv(NAME, v)``: (name, value
    expression, node)."""
    for node in ev.nodes:
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Subscript) and ev.qualname(t.value) == "os.environ":
                    key = ev.const(t.slice)
                    if isinstance(key, str):
                        yield key, node.value, node
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            q = ev.qualname(node.func) or ""
            if q in ("os.environ.setdefault", "os.putenv") and node.args:
                key = ev.const(node.args[0])
                if isinstance(key, str):
                    yield key, node.args[1] if len(node.args) > 1 else None, node
            elif q == "os.environ.update":
                for kw in node.keywords:
                    if kw.arg is not None:
                        yield kw.arg, kw.value, node
                for a in node.args:
                    if isinstance(a, ast.Dict):
                        for k, v in zip(a.keys, a.values):
                            key = ev.const(k) if k is not None else None
                            if isinstance(key, str):
                                yield key, v, node


def nccl_hazards(ev: Evaluator) -> Iterator[Hazard]:
    """``NCCL_ALGO`` set to an algorithm that reduces in the network switch (``NVLS``,
    ``NVLSTree``, ``CollNet*``, not excluded with ``^``), or ``NCCL_NVLS_ENABLE=1``."""
    for name, value_expr, node in env_writes(ev):
        value = ev.const(value_expr) if value_expr is not None else UNKNOWN
        if not isinstance(value, (str, int)):
            continue
        shown = str(value)
        if name == "NCCL_ALGO" and not shown.startswith("^") and any(
                a in part.strip().lower() for part in shown.split(",") for a in IN_NETWORK):
            yield ("RC120", node, f"NCCL_ALGO={shown!r} lets NCCL reduce in the network switch "
                                  "(NVLS/CollNet), in an order that changes between runs")
        elif name == "NCCL_NVLS_ENABLE" and shown.strip() == "1":
            yield ("RC120", node, "NCCL_NVLS_ENABLE=1 lets NCCL reduce in the NVLink switch, "
                                  "in an order that changes between runs")


def te_imports(ev: Evaluator) -> list[Hazard]:
    """Imports of Transformer Engine (``transformer_engine``, its ``pytorch`` module)."""
    out: list[Hazard] = []
    for node in ev.nodes:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        if any(n == "transformer_engine" or n.startswith("transformer_engine.") for n in names):
            out.append(("RC121", node, f"Transformer Engine imported ({text(node, 50)}) while "
                                       f"nothing sets {NVTE_SWITCH}=0"))
            break  # one finding a file: the switch is the program's, not the import's
    return out


def sets_nvte(ev: Evaluator) -> bool:
    """The file sets :data:`NVTE_SWITCH` to 0 (or to a value it does not show)."""
    for name, value_expr, _ in env_writes(ev):
        if name == NVTE_SWITCH:
            value = ev.const(value_expr) if value_expr is not None else UNKNOWN
            if value is UNKNOWN or str(value).strip() == "0":
                return True
    return False


# ---- memory nothing wrote (RC122) ----------------------------------------------------------

def _full_slice(s: ast.expr) -> bool:
    """``x[:]``, ``x[...]``, ``x[:, :]``: every element."""
    parts = s.elts if isinstance(s, ast.Tuple) else [s]
    return all((isinstance(p, ast.Slice) and p.lower is None and p.upper is None
                and p.step is None) or (isinstance(p, ast.Constant) and p.value is Ellipsis)
               for p in parts)


def _in_loop(ev: Evaluator, node: ast.AST, stop: ast.AST) -> bool:
    n = ev.parent.get(node)
    while n is not None and n is not stop:
        if isinstance(n, (ast.For, ast.AsyncFor, ast.While, ast.comprehension)):
            return True
        n = ev.parent.get(n)
    return False


def _creates_empty(ev: Evaluator, value: ast.expr) -> bool:
    if not isinstance(value, ast.Call):
        return False
    q = ev.qualname(value.func) or ""
    if q in EMPTY:
        return True
    return isinstance(value.func, ast.Attribute) and value.func.attr in EMPTY_METHODS \
        and ev.module_of(value.func.value) is None


def _use(ev: Evaluator, name: ast.Name) -> str:
    """How a load of the tensor's name uses it: "full" (writes every element), "partial"
    (writes some), "reduce" (reads every element into fewer), "other" (anything else: it may
    be filled there) or "inert" (its shape, dtype, device)."""
    parent = ev.parent.get(name)
    if isinstance(parent, ast.Attribute) and parent.value is name:
        call = ev.parent.get(parent)
        if isinstance(call, ast.Call) and call.func is parent:
            if parent.attr in FULL_WRITES:
                return "full"
            if parent.attr in REDUCTIONS:
                return "reduce"
            return "other"
        if parent.attr in ("shape", "dtype", "device", "size", "ndim", "numel", "dim"):
            return "inert"
        return "other"
    if isinstance(parent, ast.Subscript) and parent.value is name:
        holder = ev.parent.get(parent)
        if isinstance(parent.ctx, ast.Store) or (isinstance(holder, ast.Attribute)
                                                 and holder.attr in FULL_WRITES):
            return "full" if _full_slice(parent.slice) else "partial"
        return "inert"  # reading a part: what was written there, or not (not followed)
    if isinstance(parent, ast.Call) and name in parent.args:
        q = ev.qualname(parent.func) or ""
        if q.startswith("torch.") and q.split(".")[-1] in REDUCTIONS and parent.args[0] is name:
            return "reduce"
    return "other"


def _enclosing_call(ev: Evaluator, node: ast.AST) -> ast.AST:
    n = ev.parent.get(node)
    while n is not None and not isinstance(n, ast.Call):
        n = ev.parent.get(n)
    return n if n is not None else node


def uninitialized(ev: Evaluator) -> Iterator[Hazard]:
    """``buf = torch.empty(...)``, some elements written (or none), then ``buf.sum()``: the
    rest is whatever the allocator's memory held."""
    for node in ev.nodes:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and _creates_empty(ev, node.value)):
            continue
        var, scope = node.targets[0].id, ev.scope(node)
        start = (node.end_lineno or node.lineno, node.end_col_offset or 0)
        uses: list[tuple[tuple[int, int], ast.Name, bool]] = []
        for n in ev.nodes:
            if isinstance(n, ast.Name) and n.id == var and ev.scope(n) is scope \
                    and (n.lineno, n.col_offset) > start:
                uses.append(((n.lineno, n.col_offset), n, isinstance(n.ctx, ast.Store)))
        uses.sort(key=lambda u: u[0])
        written = False
        for _, n, rebound in uses:
            if rebound:
                break  # a new value under the same name
            how = _use(ev, n)
            if how == "inert":
                continue
            if how == "partial" and not written and not _in_loop(ev, n, scope):
                written = True  # a second part written (out[mask], out[~mask]) may complete it
                continue
            if how == "reduce":
                what = "partly written" if written else "never written"
                yield ("RC122", _enclosing_call(ev, n),
                       f"{var} from {text(node.value, 40)} (line {node.lineno}) is "
                       f"{what}, then reduced: the rest is whatever that memory held")
            break  # a full write, a fill in a loop, or a use not followed


# ---- deterministic algorithms (RC109, RC123) and the program's CUDA ------------------------

def turns_on_deterministic(ev: Evaluator, node: ast.AST) -> bool:
    """``torch.use_deterministic_algorithms(True)`` (not warn-only; a value the file does not
    show counts), ``set_deterministic_debug_mode(1/2)``, ``enable_full_determinism()``,
    a Trainer or arguments with ``deterministic=True``/``full_determinism=True``."""
    if not isinstance(node, ast.Call):
        return False
    q = ev.qualname(node.func) or (node.func.attr if isinstance(node.func, ast.Attribute) else "")
    last = q.split(".")[-1]
    if last == "use_deterministic_algorithms":
        mode = ev.const(arg(node, "mode", 0))
        return mode is not False and ev.const(arg(node, "warn_only", 1)) is not True
    if last == "set_deterministic_debug_mode":
        return ev.const(arg(node, "debug_mode", 0)) not in (0, "default")
    if last in FRAMEWORK_DETERMINISM:
        return True
    return any(k.arg in ("deterministic", "full_determinism") and ev.const(k.value) is True
               and last[:1].isupper() for k in node.keywords)


def names_cuda(ev: Evaluator, node: ast.AST) -> bool:
    """A ``"cuda"`` device string, ``.cuda()``, ``torch.cuda``, ``device_map=``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value == "cuda" or node.value.startswith("cuda:")
    if isinstance(node, ast.Attribute) and node.attr == "cuda":
        return True
    return isinstance(node, ast.keyword) and node.arg == "device_map"


def common_kernel(ev: Evaluator, call: ast.Call, q: str,
                  last: str) -> Iterator[tuple[Hazard, bool]]:
    """A use of :data:`COMMON_KERNELS`, a torch one (``nn.Embedding``, ``x.gather(...)``)."""
    kernel = COMMON_KERNELS.get(last)
    if kernel is None:
        return
    func = call.func
    if not q.startswith("torch."):
        if ev.module_of(func) is not None or not isinstance(func, ast.Attribute) \
                or not kernel.method:
            return  # numpy's cumsum, a project's own embedding function, df.cumsum()
    shown = q if q.startswith("torch.") else f".{last}()"
    where = " in its backward" if kernel.backward else ""
    yield (("RC123", call, f"{shown} is nondeterministic on CUDA (atomic adds{where}) while "
                           "nothing turns deterministic algorithms on"), kernel.backward)


def gpu_facts(ev: Evaluator) -> GpuFacts:
    """The program facts of one file about GPU determinism."""
    out = GpuFacts(te_imports=te_imports(ev), sets_nvte=sets_nvte(ev))
    for node in ev.nodes:
        if not out.deterministic and turns_on_deterministic(ev, node):
            out.deterministic = True
        if not out.cuda and names_cuda(ev, node):
            out.cuda = True
        if isinstance(node, ast.Call):
            q = ev.qualname(node.func) or ""
            last = q.split(".")[-1] if q else (node.func.attr if isinstance(node.func,
                                                                             ast.Attribute) else "")
            out.kernels.extend(common_kernel(ev, node, q, last))
    return out


def draws_in_compiled_code(ev: Evaluator) -> bool:
    """The file's models draw random numbers: dropout (a module or function with a rate not
    shown to be 0, attention's ``dropout_p``), or torch's draws inside a ``forward`` or a
    function with a compiling decorator."""
    for node in ev.nodes:
        if not isinstance(node, ast.Call):
            continue
        q = ev.qualname(node.func) or (node.func.attr if isinstance(node.func, ast.Attribute)
                                       else "")
        last = q.split(".")[-1]
        rates = [k.value for k in node.keywords if k.arg is not None and (
            "dropout" in k.arg or k.arg.endswith("pdrop"))]
        if any(ev.const(r) not in (0, 0.0) for r in rates):
            return True  # nn.MultiheadAttention(dropout=0.1), GPTConfig(attn_pdrop=0.1)
        if last in DROPOUT_BY_DEFAULT and not rates:
            return True
        if last == "scaled_dot_product_attention":
            rate = arg(node, "dropout_p", 4)
            if rate is not None and ev.const(rate) not in (0, 0.0):
                return True
        elif "dropout" in last.lower():
            rate = arg(node, "p", 0)
            if rate is None or ev.const(rate) not in (0, 0.0):
                return True
        elif last in TORCH_DRAWS or last in ("bernoulli_", "normal_", "uniform_",
                                              "exponential_"):
            fn = ev.scope(node)
            while not isinstance(fn, ast.Module):
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                        fn.name == "forward"
                        or any("compile" in text(d, 80) for d in fn.decorator_list)):
                    return True
                fn = ev.scope(fn)
    return False
