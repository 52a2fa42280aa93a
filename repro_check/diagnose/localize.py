"""Where inside a step two runs part: the first op, and its module, whose result differs.

Works on the ``{"probe": ...}`` records two replays of the same step wrote (see
:mod:`repro_check.child.observe.probe`). Ops are matched by position: up to the first difference both runs
execute the same code on the same values, so they run the same ops in the same order.

The first op whose result differs is the culprit. If its arguments agree, the op itself is not
deterministic (a kernel using float atomics), unless it is a random op (:data:`RANDOM_OPS`:
``normal_``, ``bernoulli_``, ``randn``, dropout, ...): then the generator it draws from is in a
different state in each run, and the cause is ``rng``, not the op. If an argument differs, no
earlier recorded op produced that difference: the value entered from outside the recorded ops
(Python or numpy numbers, bytes from the OS, an environment's observation, a tensor built from
them), and the op is where it first meets the computation. That is no nondeterministic op: the
cause is ``rng`` (something outside torch that no seed reaches), and the line where the value
entered is named (``entered``): the tensor made from outside data (``torch.tensor``,
``as_tensor``, ``from_numpy``, ``frombuffer`` of a numpy array or bytes) that differs between
the runs and that the op's differing argument was computed from. When the target ran an RL
environment (gymnasium), the environment call that returned the differing observation is named
too (``env_call``): the one whose observation is the entered tensor's bytes, else the first
whose observation differs between the runs (see :mod:`repro_check.child.observe.env_hooks`). Either way the module that ran the op is the culprit module; the
first module whose output (in forward) or whose output's gradient (in backward) differs is
reported beside it.

When the two sides run different code (``bisect``'s GOOD and its first commit that differs,
``--across rev=``: :class:`CodeSides`), op sequences that part, an op that returns other bits
for the same tensor inputs and an argument no earlier op produced are what a change of the
code does: the cause is ``code`` and the detail says which side's code runs what, never that a
value is not reproducible or that something should be seeded. When they are two environments of
the same code (``--across``: :class:`EnvironmentSides`), the detail says what differs between
the environments, not between two runs of one.

Ops that only allocate (``empty``: its bytes are whatever the memory held) are never culprits.
When the batch agreed (``batch_agreed``), neither are the ops that only deliver it: every op of
the DataLoader's phase (with workers, receiving a batch, ``set_`` on shared memory, happens for
whichever batch arrives first, so its place among the step's ops depends on timing) and the ops
outside any module that only move data (``to``, ``copy_``, ``pin_memory``, ...).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from repro_check.compare.cause import env_call_differs
from repro_check.report.contents import CompiledCall, EnvCall, Localization, OutputDifference
from repro_check.trace.probes import (CompiledCallsRun, EnvObserved, GradRun, MadeTensor,
                                      ModuleRun, OpRun, OutputValues, ProbeInput, ProbeMark,
                                      ProbeOp, probe_ops)
from repro_check.trace.results import RunResult


#: ops that draw from a random generator (ATen names without the namespace)
RANDOM_OPS: frozenset[str] = frozenset({
    "normal", "normal_", "uniform_", "bernoulli", "bernoulli_", "random_", "exponential_",
    "geometric_", "cauchy_", "log_normal_", "rand", "rand_like", "randn", "randn_like",
    "randint", "randint_like", "randperm", "multinomial", "poisson", "binomial",
    "_standard_gamma", "_sample_dirichlet", "native_dropout", "dropout", "dropout_",
    "feature_dropout", "feature_dropout_", "alpha_dropout", "alpha_dropout_",
    "feature_alpha_dropout", "feature_alpha_dropout_", "_fused_dropout", "rrelu",
    "rrelu_with_noise", "rrelu_with_noise_",
})
#: random ops that overwrite their first argument: what it held does not matter
RANDOM_FILLS: frozenset[str] = frozenset({
    "normal_", "uniform_", "bernoulli_", "random_", "exponential_", "geometric_", "cauchy_",
    "log_normal_",
})
#: ops that only allocate: their result is whatever the memory held
ALLOCATING: frozenset[str] = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
})
#: ops that only move or receive data (outside any module, they carry a batch that agreed)
MOVING: frozenset[str] = frozenset({
    "set_", "to", "_to_copy", "copy_", "_copy_from", "_copy_from_and_resize", "pin_memory",
    "_pin_memory", "is_pinned", "record_stream", "resize_", "detach", "alias", "lift_fresh",
    "lift_fresh_copy", "clone", "contiguous", "_has_same_storage_numel",
})


@dataclass(frozen=True)
class CodeSides:
    """The two record sets come from different code: ``reference``'s (``GOOD 1a2b3c4d5e6f``)
    and ``changed``'s (``commit 7e8f9a0b1c2d``), as the detail names them."""

    reference: str
    changed: str


@dataclass(frozen=True)
class EnvironmentSides:
    """The two record sets come from two environments (``--across``): the first's
    (``threads=1``) and the other's (``threads=4``), as the detail names them. Where both run
    the same code (no :class:`CodeSides`), the detail says what differs between the
    environments, not between two runs of one. ``compiled``: one side runs eager, the other
    compiled code, so op sequences that part name no op; ``arguments``: their argument lists
    differ, so a culprit is what the arguments do."""

    reference: str
    other: str
    compiled: bool = False
    arguments: bool = False


#: what a value from outside torch that no environment call is known to have returned asks for
SEED_ADVICE = (": seed what produced it (an environment: env.reset(seed=...) and "
               "env.action_space.seed(...); numpy: a seeded np.random.default_rng(seed); "
               "os.urandom and the like cannot be seeded: draw from a seeded generator instead)")


def env_call_before(loc: Localization, results: Sequence[RunResult]) -> None:
    """A value from outside torch that no environment call of the probed step returned, traced
    to the first call, made before the step, whose observation differs between the first two
    runs (their first calls: :func:`repro_check.compare.cause.env_call_differs`; an
    ``envs.reset()`` before the loop, its observations reaching the step through a replay
    buffer): named as ``env_call``, with why in place of the general advice."""
    if loc.cause != "rng" or loc.inputs_agree is not False or loc.env_call is not None \
            or len(results) < 2:
        return
    env = env_call_differs(results[0].env_calls, results[1].env_calls, loc.step)
    if env is not None and env.location is not None:
        loc.env_call = EnvCall(env.call, env.location)
        loc.detail = loc.detail.removesuffix(SEED_ADVICE) + f"; {env.detail}"


def base_name(op: str | None) -> str:
    """``aten::normal_`` gives ``normal_``."""
    return (op or "").split("::", 1)[-1].split(".", 1)[0]


def culprit_candidate(rec: OpRun, batch_agreed: bool) -> bool:
    """Whether a differing result of this op can name the culprit (see the module docstring)."""
    name = base_name(rec.op)
    if name in ALLOCATING:
        return False
    if batch_agreed and (rec.phase == "data" or rec.module is None and name in MOVING):
        return False
    return True


def split(records: Iterable[ProbeOp]) -> tuple[list[OpRun], list[ModuleRun]]:
    """(ops, module records) of one run, each in execution order."""
    ops = [r for r in records if isinstance(r, OpRun)]
    modules = [r for r in records if isinstance(r, ModuleRun)]
    return ops, modules


def _where(module: str | None, phase: str | None) -> str:
    if module is not None:
        return f"module {module!r}"
    return {
        "optimizer": "the optimizer step",
        "data": "the DataLoader (outside any module)",
        "backward": "backward, outside any module's part of the graph",
    }.get(phase or "", "code outside any module (the training script or model set-up)")


def _first_module(modules_a: Sequence[ModuleRun], modules_b: Sequence[ModuleRun],
                  phase: str) -> tuple[ModuleRun, ModuleRun] | None:
    """The first module record of ``phase`` whose output differs (inputs agreeing if
    recorded), with the other side's record of the same call. A module's calls are paired by
    name and order (its k-th call with the other side's k-th), so that a compiled model,
    recorded as a whole, pairs with the same model recorded module by module on an eager
    side."""
    seen: dict[str | None, int] = {}
    calls_b: dict[tuple[str | None, int], ModuleRun] = {}
    for rb in modules_b:
        if rb.phase == phase:
            k = seen[rb.module] = seen.get(rb.module, -1) + 1
            calls_b[(rb.module, k)] = rb
    seen.clear()
    for ra in modules_a:
        if ra.phase != phase:
            continue
        k = seen[ra.module] = seen.get(ra.module, -1) + 1
        other = calls_b.get((ra.module, k))
        if other is not None and ra.out != other.out and ra.ins == other.ins:
            return ra, other
    return None


def _compiled_agrees(modules_a: Sequence[ModuleRun],
                     modules_b: Sequence[ModuleRun]) -> OutputDifference | None:
    """A compiled model whose output has the same bits on both sides (the first such call),
    as a difference of 0: said so, the difference is placed after its forward."""
    names = {r.module for r in (*modules_a, *modules_b) if r.compiled and r.phase == "forward"}
    for name in names:
        a = next((r for r in modules_a if r.module == name and r.phase == "forward"), None)
        b = next((r for r in modules_b if r.module == name and r.phase == "forward"), None)
        if a is not None and b is not None and a.out == b.out and a.ins == b.ins:
            return OutputDifference(name or "?", True, 0.0, None,
                                    len(a.values.data) if a.values else None,
                                    list(a.values.shape) if a.values else None)
    return None


def first_gradient(records_a: Sequence[ProbeOp],
                   records_b: Sequence[ProbeOp]) -> OutputDifference | None:
    """The first parameter (in the optimizer's order) whose gradient differs between the
    sides, and how far; None when all agree or none was recorded."""
    grads_b = {r.param: r for r in records_b if isinstance(r, GradRun)}
    for a in records_a:
        if isinstance(a, GradRun):
            b = grads_b.get(a.param)
            if b is not None and a.out != b.out:
                return largest_difference(a.param, False, a.values, b.values)
    return None


def output_difference(a: ModuleRun, b: ModuleRun) -> OutputDifference:
    """How far two records of a model's output are apart (see :func:`largest_difference`)."""
    return largest_difference(a.module or "?", a.compiled or b.compiled, a.values, b.values)


def largest_difference(name: str, compiled: bool, va: OutputValues | None,
                       vb: OutputValues | None) -> OutputDifference:
    """How far two sides' values of one tensor are apart, where both sides recorded them
    (same shape); else by fingerprint only. NaN and infinity count as a difference only where
    the two sides' values are not the same."""
    if va is None or vb is None or va.shape != vb.shape:
        return OutputDifference(name, compiled)
    largest, where = 0.0, 0
    for i, (x, y) in enumerate(zip(va.data, vb.data)):
        d = abs(x - y)
        if d != d:  # NaN on one side (or both, or inf - inf)
            same = (x != x and y != y) or x == y
            d = 0.0 if same else float("inf")
        if d > largest:
            largest, where = d, i
    return OutputDifference(name, compiled, largest, list(va.index(where)), len(va.data),
                            list(va.shape))


def _differing_inputs(a: OpRun, b: OpRun,
                      garbage: tuple[set[str], set[str]] = (set(), set())) -> list[int]:
    """The arguments that differ, less what only held uninitialized memory on both sides (the
    result of an allocating op) and the buffer an in-place random fill overwrites."""
    skip = {0} if base_name(a.op) in RANDOM_FILLS else set()
    found = [k for k, (x, y) in enumerate(zip(a.ins, b.ins))
             if x != y and k not in skip and not (x in garbage[0] and y in garbage[1])]
    if len(a.ins) != len(b.ins):
        found.append(min(len(a.ins), len(b.ins)))
    return found


def entered(records_a: Sequence[ProbeOp], records_b: Sequence[ProbeOp], culprit: OpRun,
            inputs: Sequence[int]) -> MadeTensor | None:
    """The tensor made from outside data (a ``{"k": "made"}`` record of run a) that differs
    from run b's at the same position and that the culprit's differing ``inputs`` were computed
    from (through the ops recorded before it); None when there is none."""
    made_a = [r for r in records_a if isinstance(r, MadeTensor)]
    made_b = [r for r in records_b if isinstance(r, MadeTensor)]
    if not made_a:
        return None
    reach: set[str | None] = {culprit.ins[k] for k in inputs if k < len(culprit.ins)}
    before = [r for r in records_a if isinstance(r, OpRun) and r.index < culprit.index]
    for rec in reversed(before):  # back through the ops that computed the differing inputs
        if reach & set(rec.outs):
            reach.update(rec.ins)
    for k, made in enumerate(made_a):
        other = made_b[k] if k < len(made_b) else None
        if made.out in reach and (other is None or other.out != made.out):
            return made
    return None


def env_call(records_a: Sequence[ProbeOp], records_b: Sequence[ProbeOp],
             made: MadeTensor) -> EnvObserved | None:
    """The environment call (an ``{"k": "env"}`` record of run a) that returned the differing
    value that became ``made``: the one whose observation is ``made``'s bytes, else the first,
    made before it, whose observation differs from run b's at the same position; None when
    there is none."""
    env_a = [r for r in records_a if isinstance(r, EnvObserved)]
    env_b = [r for r in records_b if isinstance(r, EnvObserved)]

    def differs(k: int) -> bool:
        return k >= len(env_b) or env_b[k].obs != env_a[k].obs

    for k, rec in enumerate(env_a):
        if rec.obs == made.out and differs(k):
            return rec
    for k, rec in enumerate(env_a):
        if rec.index < made.index and differs(k):
            return rec
    return None


def _allocated(ops: list[OpRun]) -> set[str]:
    """What the allocating ops returned: fingerprints of memory nothing has written yet."""
    return {fp for r in ops if base_name(r.op) in ALLOCATING for fp in r.outs}


@dataclass(frozen=True)
class _Sides:
    """The two runs' probe records, typed, and what the comparison of their ops is told."""

    records_a: list[ProbeOp]
    records_b: list[ProbeOp]
    #: what only held uninitialized memory in each run (see :func:`_allocated`)
    garbage: tuple[set[str], set[str]]
    code: CodeSides | None
    environments: EnvironmentSides | None = None

    @property
    def runs(self) -> str:
        """What the two sides are called in a detail: two runs, or two environments."""
        return "the runs" if self.environments is None else "the environments"


def compare(step: int, records_a: Iterable[ProbeInput], records_b: Iterable[ProbeInput],
            batch_agreed: bool = False, code: CodeSides | None = None,
            environments: EnvironmentSides | None = None) -> Localization:
    """Find the first op (and module) whose result differs between the two runs' records
    (typed, or as the runs wrote them); ``batch_agreed``: the step's batch was the same in both
    runs; ``code``: the two sides ran different code; ``environments``: they are two
    environments (see the module docstring)."""
    typed_a, typed_b = probe_ops(records_a), probe_ops(records_b)
    ops_a, mods_a = split(typed_a)
    ops_b, mods_b = split(typed_b)
    sides = _Sides(typed_a, typed_b, (_allocated(ops_a), _allocated(ops_b)), code,
                   environments if code is None else None)
    loc = Localization(step)
    forward = _first_module(mods_a, mods_b, "forward")
    if forward is not None:
        loc.first_module_forward = forward[0].module
        if forward[0].values is not None or forward[0].compiled or forward[1].compiled:
            loc.output_difference = output_difference(*forward)
    else:  # once forward differs, every gradient does
        backward = _first_module(mods_a, mods_b, "backward")
        loc.first_module_backward = backward[0].module if backward is not None else None
        loc.output_difference = _compiled_agrees(mods_a, mods_b)
        loc.gradient_difference = first_gradient(typed_a, typed_b)
    compiled = forward if forward is not None and (forward[0].compiled or forward[1].compiled) \
        else None
    loc.compiled_call = (
        compiled_call(_calls_before(typed_a, compiled[0]), _calls_before(typed_b, compiled[1]))
        if compiled is not None else
        compiled_call(_first_calls(typed_a), _first_calls(typed_b)) if forward is None else None)
    candidates_a = [r for r in ops_a if culprit_candidate(r, batch_agreed)]
    _first_parting(loc, candidates_a,
                   [r for r in ops_b if culprit_candidate(r, batch_agreed)], sides)
    if environments is not None:
        _said_of_environments(loc, environments)
    if compiled is not None and code is None and not (environments and environments.compiled):
        culprit = (candidates_a[loc.op_index] if loc.found and loc.op_index is not None
                   and loc.op_index < len(candidates_a) else None)
        if culprit is None or culprit.index > compiled[0].index:
            compiled_differs(loc, compiled[0], sides.runs)
    return loc


def _calls_before(records: Sequence[ProbeOp], rec: ModuleRun) -> CompiledCallsRun | None:
    """What DebugMode recorded inside the compiled model whose output ``rec`` is: the calls
    record of the same model just before it."""
    found = None
    for r in records:
        if r.index >= rec.index:
            break
        if isinstance(r, CompiledCallsRun) and r.module == rec.module:
            found = r
    return found


def _first_calls(records: Sequence[ProbeOp]) -> CompiledCallsRun | None:
    return next((r for r in records if isinstance(r, CompiledCallsRun)), None)


def compiled_call(calls_a: CompiledCallsRun | None,
                  calls_b: CompiledCallsRun | None) -> CompiledCall | None:
    """Inside a compiled model (what DebugMode recorded of it on each side): the first call
    whose output differs, on the sides that ran it compiled (one side's record alone, eager
    against compiled, says only how it was split)."""
    one = calls_a or calls_b
    if one is None:
        return None
    out = CompiledCall(one.module or "?", one.total, graphs=one.graphs,
                       breaks=list(one.breaks), missing=one.missing,
                       one_side=calls_a is None or calls_b is None)
    if calls_a is None or calls_b is None:  # one_side
        return out
    if calls_a.missing or calls_b.missing:
        out.missing = calls_a.missing or calls_b.missing
        return out
    for i, (x, y) in enumerate(zip(calls_a.calls, calls_b.calls), 1):
        if x[0] != y[0]:
            out.name, out.index, out.parted = f"{x[0]} against {y[0]}", i, True
            return out
        if x[2] != y[2]:
            out.name, out.index, out.inputs_agree = x[0], i, x[1] == y[1]
            return out
    if calls_a.total != calls_b.total:
        i = min(calls_a.total, calls_b.total) + 1
        out.name, out.index, out.parted = "one side ran more calls", i, True
    return out


def compiled_differs(loc: Localization, rec: ModuleRun, runs: str) -> None:
    """A compiled model returned other bits for the same inputs, before any recorded op
    parted: it is the culprit, as a whole. torch.compile's kernels run fused, with no op of
    their own for the recorder to see, so nothing inside the model can be named."""
    loc.found, loc.phase, loc.module, loc.op, loc.op_index = True, "forward", rec.module, None, None
    loc.inputs_agree, loc.differing_inputs, loc.cause = True, [], "compute"
    said = f": {loc.output_difference.said}" if loc.output_difference is not None else ""
    inside = loc.compiled_call
    if inside is not None and inside.inputs_agree:  # the call itself returns other bits
        loc.op = inside.name
    seen = (f"; {inside.said}" if inside is not None else
            "; its kernels, fused by torch.compile, have no ops of their own to record (the op "
            "recorder steps aside while a compiled model runs)")
    loc.detail = (f"the compiled {rec.module} (torch.compile) returns other bits in {runs} "
                  f"for the same inputs at step {loc.step}{said}{seen}; no module inside "
                  "it can be named (its modules are fused into its graphs): run it eager "
                  "(without torch.compile) for the op and module to be named, or compile it "
                  "with inductor's deterministic settings "
                  "(torch._inductor.config.deterministic = True)")


def _first_parting(loc: Localization, ops_a: Sequence[OpRun], ops_b: Sequence[OpRun],
                   sides: _Sides) -> None:
    """Where the candidate ops of both sides first part (other ops, other bits, one side
    ending), or that they never do."""
    step = loc.step
    for i, (a, b) in enumerate(zip(ops_a, ops_b)):
        loc.ops_compared = i + 1
        if (a.op, a.module, a.phase) != (b.op, b.module, b.phase):
            other_ops(loc, i, a, b, sides)
            return
        if a.outs != b.outs:
            differing_result(loc, i, a, b, sides)
            return
    if len(ops_a) != len(ops_b):
        one_runs_more(loc, ops_a, ops_b, sides)
        return
    loc.detail = (f"all {len(ops_a)} recorded ops of step {step} agree in both replays"
                  if ops_a else f"no op of step {step} was recorded")
    marks = [r for r in (*sides.records_a, *sides.records_b)
             if isinstance(r, ProbeMark) and r.compiled]
    if marks:
        loc.detail = compiled_unseen(loc, step, marks[0].compiled or "code", sides.runs,
                                     all(m.ran_compiled for m in marks))


def _said_of_environments(loc: Localization, sides: EnvironmentSides) -> None:
    """Where the environments differ in more than their values: an eager and a compiled side
    whose op sequences part name no op; a culprit of two argument lists is said of them."""
    if sides.compiled and unmatched(loc):
        loc.found = False
        loc.detail = compile_detail(loc, loc.step)
    elif sides.arguments and loc.found:
        loc.detail = args_detail(loc, loc.step, sides.reference, sides.other)


def unmatched(loc: Localization) -> bool:
    """The localization stopped where the two op sequences part (other ops, or one ended), not
    at an op whose results differ."""
    return loc.found and loc.inputs_agree is None and not loc.differing_inputs


def compile_detail(loc: Localization, step: int) -> str:
    """Why an eager and a compiled run have no culprit op: their op sequences part. The
    first module whose output differs is named, with how far, where the model's values were
    recorded."""
    module = loc.first_module_forward or loc.first_module_backward
    where = f"; the first module whose output differs is {module!r}" if module else ""
    diff = loc.output_difference
    if diff is not None and diff.module == module:
        what = "the compiled model" if diff.compiled else "the model"
        where += f" ({what} as a whole, with the same inputs: {diff.said})"
    elif diff is not None and diff.largest == 0.0:
        where = (f"; the compiled {diff.module}'s output has the same bits as the eager one, so "
                 "the sides part in its backward (the compiled backward's fused kernels) or "
                 f"after it{gradient_said(loc)}")
    split = loc.compiled_call.split if loc.compiled_call is not None else ""
    return (f"the eager and compiled op sequences of step {step} cannot be matched from op "
            f"{loc.op_index} on: a compiled graph runs fused kernels that have no one-to-one "
            f"eager op, so no single op can be named{where}{split}")


def args_detail(loc: Localization, step: int, a: str, b: str) -> str:
    """The culprit op of two argument lists, said of the arguments: they change what the
    script runs or passes, so what differs is their doing, not a value that is not
    reproducible."""
    where = f"module {loc.module!r}" if loc.module else "code outside any module"
    if unmatched(loc):
        return (f"with {b} the script runs other ops than with {a} from op {loc.op_index} of "
                f"step {step} on ({loc.op} in {where}): the arguments change the code that "
                "runs, so no op whose result differs can be told apart from that change")
    if loc.inputs_agree:
        return (f"{loc.op} in {where} ({loc.phase}) returns other bits with {b} than with {a} "
                "for the same tensor inputs: the arguments call it otherwise (an option that "
                "is not a tensor) or under other settings")
    args = ", ".join(map(str, loc.differing_inputs))
    return (f"{loc.op} in {where} ({loc.phase}) gets another argument ({args}) with {b} than "
            f"with {a}, which no earlier op produced: the arguments pass it another value (a "
            "number, a mode, an option)")


def gradient_said(loc: Localization) -> str:
    """``: the first parameter whose gradient differs is ...``, where one does."""
    grad = loc.gradient_difference
    if grad is None:
        return ""
    said = grad.said.replace(" output values", " values")
    return f"; the first parameter whose gradient differs is {grad.module!r} ({said})"


def compiled_unseen(loc: Localization, step: int, compiled: str, runs: str = "the runs",
                    ran_compiled: bool = False) -> str:
    """Why ops that agree say nothing of a compiled step. A compiled model runs compiled (the
    op recorder, a dispatch mode under which PyTorch runs compiled code eagerly, steps aside
    while it runs): its output is compared as a whole, and its fused kernels, forward and
    backward, are not seen op by op. Other compiled code runs eagerly under the recorder, so
    its recorded ops are the eager ones, and the compiled kernels, where the sides
    (``runs``) part, are never seen."""
    if ran_compiled:
        same = loc.output_difference
        agrees = (f"its output has the same bits in {runs}, so the difference is in its "
                  "compiled backward" if same is not None and same.largest == 0.0
                  else "its output was compared as a whole")
        return (f"step {step} calls the compiled {compiled} (torch.compile), which ran "
                f"compiled (the op recorder steps aside while it runs): {agrees}; the "
                f"{loc.ops_compared} ops recorded outside it agree, and its fused kernels, "
                f"where {runs} part, have no ops of their own to record: the difference is "
                f"inside the compiled {compiled} at step {step}, and no op inside it can be "
                f"named{gradient_said(loc)}")
    if compiled == "code":
        return (f"the run uses torch.compile, and PyTorch runs compiled code eagerly while the "
                f"op recorder watches: the {loc.ops_compared} ops recorded of step {step} are "
                "eager ops and agree; where the step calls compiled code, its kernels (where "
                f"{runs} can part) are not seen op by op, and no op inside them can be named")
    return (f"step {step} calls the compiled {compiled} (torch.compile), which PyTorch runs "
            f"eagerly while the op recorder watches: the {loc.ops_compared} ops recorded are "
            f"eager ops and agree, and the compiled kernels, where {runs} part, are not seen "
            f"op by op: the difference is inside the compiled {compiled} at step {step}, and "
            "no op or module inside it can be named")


def _culprit(loc: Localization, i: int, rec: OpRun) -> None:
    """Op ``i``, ``rec``, is where the runs part."""
    loc.found, loc.op_index = True, i
    loc.phase, loc.module, loc.op = rec.phase, rec.module, rec.op


def other_ops(loc: Localization, i: int, a: OpRun, b: OpRun, sides: _Sides) -> None:
    """The runs' op sequences part at op ``i``: control flow on a value, or other code."""
    _culprit(loc, i, a)
    loc.cause = "compute"
    code = sides.code
    if code is not None:  # the changed side's op is the one its change brought
        _culprit(loc, i, b)
        loc.cause = "code"
        loc.detail = (f"{code.changed}'s code runs other ops from op {i} on: "
                      f"{b.op} in {_where(b.module, b.phase)}, where "
                      f"{code.reference}'s code runs {a.op} in "
                      f"{_where(a.module, a.phase)}: the code changed, and it "
                      "runs other ops")
        return
    loc.detail = (f"{sides.runs} ran different code from op {i} on: {a.op} in "
                  f"{_where(a.module, a.phase)} vs {b.op} in "
                  f"{_where(b.module, b.phase)} (control flow on a value that is "
                  "not reproducible)")


def differing_result(loc: Localization, i: int, a: OpRun, b: OpRun, sides: _Sides) -> None:
    """Op ``i`` returned other bits in each run: a nondeterministic op, a generator in another
    state, or an argument from outside the recorded ops (or, between two codes, the change)."""
    _culprit(loc, i, a)
    loc.differing_inputs = _differing_inputs(a, b, sides.garbage)
    loc.inputs_agree = not loc.differing_inputs
    loc.cause = "compute"
    where = f"{_where(loc.module, loc.phase)}, {loc.phase}"
    if sides.code is not None:
        changed_result(loc, sides.code, where, entered(sides.records_a, sides.records_b, a,
                                                       loc.differing_inputs))
    elif loc.inputs_agree and sides.environments is not None:
        loc.cause = "rng" if base_name(loc.op) in RANDOM_OPS else "compute"
        loc.detail = (f"{loc.op} in {_said_where(loc)} gives other bits than in "
                      f"{sides.environments.reference} for the same inputs")
    elif loc.inputs_agree and base_name(loc.op) in RANDOM_OPS:
        loc.cause = "rng"
        loc.detail = (f"{loc.op} in {where} drew different numbers for the same inputs: "
                      "the random generator it draws from is in a different state in "
                      "each run (a generator of the script's own, such as a "
                      "torch.Generator seeded from entropy, or a global stream reseeded "
                      "during the step)")
    elif loc.inputs_agree:
        loc.detail = (f"{loc.op} in {where} returned different results for the same "
                      "inputs: the op is not deterministic")
    else:
        outside_value(loc, a, where, sides)


def _said_where(loc: Localization) -> str:
    """Where the culprit op ran, as a detail of two environments says it."""
    where = f"module {loc.module!r}" if loc.module else "code outside any module"
    return f"{where} ({loc.phase})"


def outside_value(loc: Localization, culprit: OpRun, where: str, sides: _Sides) -> None:
    """The culprit got an argument no earlier op produced: a value from outside torch, traced
    to the tensor it entered as and the environment call that returned it, where known."""
    args = ", ".join(str(k) for k in loc.differing_inputs)
    loc.cause = "rng"
    made = entered(sides.records_a, sides.records_b, culprit, loc.differing_inputs)
    if made is not None and made.location is not None:
        loc.entered, loc.entered_by = made.location, made.fn
    env = env_call(sides.records_a, sides.records_b, made) if made is not None else None
    if env is not None and env.location is not None:
        loc.env_call = EnvCall(env.call, env.location)
    if sides.environments is not None:
        loc.detail = (f"{loc.op} in {_said_where(loc)} gets another argument ({args}) than in "
                      f"{sides.environments.reference}, which no earlier op produced: a value "
                      "from outside the recorded ops (an environment variable, a Python number, "
                      "...)")
        return
    loc.detail = (f"{loc.op} in {where} got a different argument ({args}) that no "
                  "earlier op produced: a value from outside the recorded ops (Python "
                  "or numpy numbers, OS entropy, an environment's observation, a "
                  "tensor built from them), not a nondeterministic op")
    if made is not None and made.location is not None:
        loc.detail += (f"; it entered at {made.location.site} ({made.fn} "
                       "of data from outside torch), and differs between the runs")
    if env is not None and env.location is not None:
        loc.detail += (f"; the observation returned by env.{env.call}() at "
                       f"{env.location.site} differs between the runs: the "
                       "environment seeds itself from OS entropy when reset() gets "
                       "no seed; pass env.reset(seed=...) and seed env.action_space "
                       "(env.action_space.seed(...))")
        return
    loc.detail += SEED_ADVICE


def one_runs_more(loc: Localization, ops_a: Sequence[OpRun], ops_b: Sequence[OpRun],
                  sides: _Sides) -> None:
    """Every op both runs ran agrees, and one run ran more: the first op the other lacks."""
    i = min(len(ops_a), len(ops_b))
    longer = ops_a if len(ops_a) > len(ops_b) else ops_b
    rec = longer[i]
    _culprit(loc, i, rec)
    loc.cause = "compute"
    one = "one run" if sides.environments is None else "one side"
    loc.detail = (f"{one} stopped after {i} ops, the other went on with {rec.op} "
                  f"in {_where(rec.module, rec.phase)}")
    code = sides.code
    if code is not None:
        shorter, longer_side = ((code.changed, code.reference) if longer is ops_a
                                else (code.reference, code.changed))
        loc.cause = "code"
        loc.detail = (f"{longer_side}'s code runs more ops in step {loc.step}: {shorter}'s "
                      f"stops after {i}, {longer_side}'s goes on with {rec.op} in "
                      f"{_where(rec.module, rec.phase)} (the code changed)")


def changed_result(loc: Localization, code: CodeSides, where: str,
                   made: MadeTensor | None) -> None:
    """The detail of an op whose result differs between two sides that run different code."""
    loc.cause = "code"
    versus = f"in {code.changed}'s code than in {code.reference}'s"
    if loc.inputs_agree and base_name(loc.op) in RANDOM_OPS:
        loc.detail = (f"{loc.op} in {where} draws other numbers {versus} from the same inputs: "
                      f"its generator is in another state there ({code.changed}'s code draws "
                      "other random numbers before it, or seeds otherwise)")
    elif loc.inputs_agree:
        loc.detail = (f"{loc.op} in {where} returns other bits {versus} for the same tensor "
                      f"inputs: {code.changed}'s code calls it otherwise (an argument that is "
                      "not a tensor, such as a number, a dtype or an option) or under other "
                      "settings")
    else:
        args = ", ".join(str(k) for k in loc.differing_inputs)
        loc.detail = (f"{loc.op} in {where} gets another argument ({args}) {versus}, which no "
                      f"earlier op produced: {code.changed}'s code passes another value (a "
                      "constant, a Python or numpy number, data built outside torch)")
        if made is not None and made.location is not None:
            loc.entered, loc.entered_by = made.location, made.fn
            loc.detail += f"; it entered at {made.location.site} ({made.fn})"
