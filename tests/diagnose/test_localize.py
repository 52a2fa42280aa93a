"""Comparing two runs' probe records: which op, in which module, first differs."""

from __future__ import annotations

from typing import Any

import pytest

from repro_check.diagnose.localize import CodeSides, compare
from repro_check.report.contents import EnvCall
from repro_check.trace.results import Location


def op(name: str, ins: list[str], outs: list[str], module: str | None = "enc.0",
       phase: str = "forward") -> dict[str, Any]:
    return {"k": "op", "op": name, "m": module, "ph": phase, "in": ins, "out": outs}


def test_same_inputs_different_outputs_is_a_nondeterministic_op() -> None:
    a = [op("aten::t", ["w"], ["wt"]), op("aten::index_add", ["x", "i", "s"], ["r1"], "enc.2")]
    b = [op("aten::t", ["w"], ["wt"]), op("aten::index_add", ["x", "i", "s"], ["r2"], "enc.2")]
    loc = compare(5, a, b)
    assert loc.found and loc.inputs_agree and loc.op_index == 1
    assert (loc.module, loc.op, loc.phase) == ("enc.2", "aten::index_add", "forward")
    assert "not deterministic" in loc.detail


def test_a_value_from_outside_shows_as_a_differing_argument() -> None:
    a = [op("aten::add", ["x", "0.5"], ["y1"], None)]
    b = [op("aten::add", ["x", "0.7"], ["y2"], None)]
    loc = compare(1, a, b)
    assert loc.found and loc.inputs_agree is False and loc.differing_inputs == [1]
    assert loc.module is None and "outside the recorded ops" in loc.detail


def test_a_value_from_outside_is_traced_to_the_line_that_made_it_a_tensor() -> None:
    """An observation made a tensor (torch.as_tensor), moved (``_to_copy``, never a culprit
    outside a module), then the first Linear: the cause is rng at the as_tensor line, not the
    Linear's op."""
    def made(fp: str, line: int) -> dict[str, Any]:
        return {"k": "made", "fn": "torch.as_tensor", "out": fp,
                "loc": {"file": "rl.py", "line": line, "function": "main"}}

    def run(obs: str) -> list[dict[str, Any]]:
        recs = [made("w", 3), made(obs, 9), op("aten::_to_copy", [obs], [obs + "f"], None),
                op("aten::addmm", ["b", obs + "f", "w"], [obs + "q"], "Q.0")]
        for i, rec in enumerate(recs, 1):
            rec["i"] = i
        return recs

    loc = compare(1, run("o1"), run("o2"), batch_agreed=True)
    assert loc.found and loc.op == "aten::addmm" and loc.differing_inputs == [1]
    assert loc.cause == "rng" and "not a nondeterministic op" in loc.detail
    assert loc.entered == Location("rl.py", 9, "main")
    assert loc.entered_by == "torch.as_tensor" and "env.reset(seed=" in loc.detail
    # a value whose making was not seen: still rng, without a line
    loc = compare(1, run("o1")[2:], run("o2")[2:], batch_agreed=True)
    assert loc.cause == "rng" and loc.entered is None


def test_the_environment_call_that_returned_the_observation_is_named() -> None:
    """An RL environment's reset/step records (``{"k": "env"}``): the call whose observation is
    the entered tensor's bytes is named and becomes the location; without one whose bytes match
    (an observation converted to another dtype), the first call before the tensor was made
    whose observation differs between the runs."""
    def env(call: str, obs: str, line: int) -> dict[str, Any]:
        return {"k": "env", "call": call, "obs": obs,
                "loc": {"file": "rl.py", "line": line, "function": "main"}}

    def run(reset: str, stepped: str, made_fp: str) -> list[dict[str, Any]]:
        recs = [env("reset", "r0", 4), env("step", stepped, 7), env("reset", reset, 8),
                {"k": "made", "fn": "torch.as_tensor", "out": made_fp,
                 "loc": {"file": "rl.py", "line": 9, "function": "main"}},
                op("aten::addmm", ["b", made_fp, "w"], [made_fp + "q"], "Q.0"),
                env("step", "late" + made_fp, 11)]
        for i, rec in enumerate(recs, 1):
            rec["i"] = i
        return recs

    loc = compare(1, run("o1", "s", "o1"), run("o2", "s", "o2"), batch_agreed=True)
    assert loc.cause == "rng" and loc.entered == Location("rl.py", 9, "main")
    assert loc.env_call == EnvCall("reset", Location("rl.py", 8, "main"))
    assert loc.location == Location("rl.py", 8, "main")
    assert "env.reset() at rl.py:8 differs between the runs" in loc.detail
    assert "env.reset(seed=...)" in loc.detail and "env.action_space" in loc.detail
    assert loc.to_dict()["env_call"] == {"call": "reset", "file": "rl.py", "line": 8,
                                        "function": "main"}
    # no observation with the tensor's bytes: the first that differs, made before the tensor
    loc = compare(1, run("o1", "s1", "t1"), run("o2", "s2", "t2"), batch_agreed=True)
    assert loc.env_call is not None and (loc.env_call.call, loc.env_call.location.line) == ("step", 7)
    # every observation agrees: the value came from elsewhere, no environment call is named
    loc = compare(1, run("o", "s", "t1"), run("o", "s", "t2"), batch_agreed=True)
    assert loc.env_call is None and loc.location == loc.entered


def test_different_ops_mean_different_control_flow() -> None:
    a = [op("aten::mul", ["x"], ["y"]), op("aten::relu", ["y"], ["z"])]
    b = [op("aten::mul", ["x"], ["y"]), op("aten::tanh", ["y"], ["z"])]
    loc = compare(2, a, b)
    assert loc.found and loc.op_index == 1 and "different code" in loc.detail


def test_a_shorter_record_and_agreeing_records() -> None:
    a = [op("aten::mul", ["x"], ["y"]), op("aten::sum", ["y"], ["s"], None, "optimizer")]
    loc = compare(2, a, a[:1])
    assert loc.found and loc.op == "aten::sum" and loc.phase == "optimizer"
    assert not compare(2, a, list(a)).found


def test_module_records_name_the_first_module_whose_output_differs() -> None:
    mods_a = [{"k": "module", "ph": "forward", "m": "enc.0", "in": "x", "out": "h"},
              {"k": "module", "ph": "forward", "m": "enc.1", "in": "h", "out": "o1"}]
    mods_b = [{"k": "module", "ph": "forward", "m": "enc.0", "in": "x", "out": "h"},
              {"k": "module", "ph": "forward", "m": "enc.1", "in": "h", "out": "o2"}]
    assert compare(1, mods_a, mods_b).first_module_forward == "enc.1"


def test_a_random_op_with_the_same_inputs_means_its_generator_differs() -> None:
    draw = ["[8, 4]", "<Generator>"]
    a = [op("aten::linear", ["x", "w"], ["h"]), op("aten::randn", draw, ["n1"])]
    b = [op("aten::linear", ["x", "w"], ["h"]), op("aten::randn", draw, ["n2"])]
    loc = compare(1, a, b)
    assert loc.found and loc.inputs_agree and loc.cause == "rng"
    assert "not deterministic" not in loc.detail and "generator" in loc.detail
    assert loc.to_dict()["cause"] == "rng"


def test_a_random_fill_ignores_what_its_buffer_held() -> None:
    # dropout on the CPU: empty_like (whatever the memory held), then bernoulli_ over it
    a = [op("aten::empty_like", ["x"], ["junk1"]), op("aten::bernoulli_", ["junk1", "0.9"], ["m1"])]
    b = [op("aten::empty_like", ["x"], ["junk2"]), op("aten::bernoulli_", ["junk2", "0.9"], ["m2"])]
    loc = compare(1, a, b)
    assert loc.op == "aten::bernoulli_" and loc.inputs_agree and loc.cause == "rng"


def test_a_nondeterministic_op_stays_compute() -> None:
    a = [op("aten::index_add", ["x", "i", "s"], ["r1"])]
    b = [op("aten::index_add", ["x", "i", "s"], ["r2"])]
    assert compare(1, a, b).cause == "compute"


def test_ops_that_deliver_an_agreeing_batch_are_never_the_culprit() -> None:
    """With DataLoader workers the main process receives batches (set_ on shared memory) at a
    point of the step that depends on timing: in one run a prefetched batch arrives mid-step."""
    model = [op("aten::linear", ["x", "w"], ["h"], "Net.fc"),
             op("aten::add", ["h", "noise1"], ["o1"], "Net.noise")]
    other = [op("aten::linear", ["x", "w"], ["h"], "Net.fc"),
             op("aten::add", ["h", "noise2"], ["o2"], "Net.noise")]
    def receive(batch: str) -> list[dict[str, Any]]:
        return [op("aten::empty", ["[0]"], ["e"], None, "data"),
                op("aten::set_", ["e", "<S>"], [batch], None, "data")]

    a = [*receive("b1"), op("aten::_to_copy", ["b1"], ["b1"], None), *model]
    b = [*receive("b2"), op("aten::_to_copy", ["b2"], ["b2"], None), *receive("b3"), *other]
    loc = compare(3, a, b, batch_agreed=True)
    assert loc.found and loc.module == "Net.noise" and loc.op == "aten::add"
    assert loc.inputs_agree is False
    # without knowing the batch agreed, the transfer is what differs first
    assert compare(3, a, b).op == "aten::set_"


# ---- two sides that run different code (bisect's GOOD and its first commit that differs) ----

CODE = CodeSides("GOOD 1111aaaa2222", "commit 3333bbbb4444")


def test_other_ops_at_the_commit_are_its_code_not_a_value_that_is_not_reproducible() -> None:
    """The commit inserts a relu: the op sequences part at op 1, which is what the commit's code
    does; the op named is the commit's."""
    good = [op("aten::addmm", ["b", "x", "w"], ["h"], "Net.fc"),
            op("aten::mul", ["h", "2"], ["y"], "Net")]
    bad = [op("aten::addmm", ["b", "x", "w"], ["h"], "Net.fc"),
           op("aten::relu", ["h"], ["r"], "Net"), op("aten::mul", ["r", "2"], ["y2"], "Net")]
    loc = compare(1, good, bad, code=CODE)
    assert loc.found and loc.cause == "code" and loc.op_index == 1
    assert (loc.op, loc.module) == ("aten::relu", "Net")
    assert loc.detail.startswith("commit 3333bbbb4444's code runs other ops from op 1 on: "
                                 "aten::relu in module 'Net', where GOOD 1111aaaa2222's code "
                                 "runs aten::mul")
    assert "control flow" not in loc.detail
    # the same records from two runs of one code: still control flow on a value
    same = compare(1, good, bad)
    assert same.cause == "compute"
    assert "control flow on a value that is not reproducible" in same.detail


def test_a_commit_that_runs_fewer_ops_is_named_as_the_code_that_changed() -> None:
    good = [op("aten::addmm", ["b", "x", "w"], ["h"]), op("aten::relu", ["h"], ["r"])]
    loc = compare(2, good, good[:1], code=CODE)
    assert loc.cause == "code" and loc.op == "aten::relu" and loc.op_index == 1
    assert "GOOD 1111aaaa2222's code runs more ops in step 2: commit 3333bbbb4444's stops " \
        "after 1" in loc.detail


@pytest.mark.parametrize(("name", "good_in", "bad_in", "said"), [
    ("aten::mul", ["h", "1.0"], ["h", "1.001"], "gets another argument (1)"),
    ("aten::index_add", ["x", "i", "s"], ["x", "i", "s"], "returns other bits"),
    ("aten::bernoulli_", ["x", "0.5"], ["x", "0.5"], "draws other numbers"),
], ids=["argument", "same-inputs", "random"])
def test_an_op_that_differs_at_the_commit_is_its_code_with_no_seeding_advice(
        name: str, good_in: list[str], bad_in: list[str], said: str) -> None:
    """bisect's scale 1.0 -> 1.001: not 'a value from outside ... seed what produced it', nor
    'the op is not deterministic'."""
    loc = compare(1, [op(name, good_in, ["y1"], "Net")], [op(name, bad_in, ["y2"], "Net")],
                  code=CODE)
    assert loc.found and loc.cause == "code" and loc.op == name
    assert said in loc.detail and "commit 3333bbbb4444's code" in loc.detail, loc.detail
    for wrong in ("seed what", "reset(seed", "not deterministic", "not reproducible", "entropy"):
        assert wrong not in loc.detail, loc.detail


# ---- how far a model's output is apart ----------------------------------------------------------
def test_the_largest_difference_is_where_the_values_are_furthest_apart() -> None:
    from repro_check.diagnose.localize import largest_difference
    from repro_check.trace.probes import OutputValues

    nan, inf = float("nan"), float("inf")
    a = OutputValues((2, 2), (1.0, nan, inf, 4.0))
    b = OutputValues((2, 2), (1.5, nan, inf, 4.25))
    diff = largest_difference("Net", True, a, b)
    assert (diff.largest, diff.at, diff.values, diff.shape) == (0.5, [0, 0], 4, [2, 2])
    assert "largest |Δ| 0.5 at [0, 0] of its 2 x 2 output values" in diff.said
    one_nan = largest_difference("Net", False, a, OutputValues((2, 2), (1.0, 2.0, inf, 4.0)))
    assert one_nan.largest == inf and one_nan.at == [0, 1]  # NaN on one side only
    other_shape = largest_difference("Net", False, a, OutputValues((4,), a.data))
    assert other_shape.largest is None and "fingerprint only" in other_shape.said


def test_a_module_call_is_paired_by_name_and_order_not_by_position() -> None:
    """A compiled side records its model as a whole; the eager side its modules one by one:
    the model's call pairs with the model's call."""
    def mod(i: int, name: str, out: str, **kw: Any) -> dict[str, Any]:
        return {"k": "module", "i": i, "ph": "forward", "m": name, "in": "x", "out": out, **kw}

    eager = [mod(1, "Net.fc", "h"), mod(2, "Net", "y")]
    compiled = [mod(1, "Net", "y2", c=True)]
    loc = compare(1, eager, compiled)
    assert loc.first_module_forward == "Net"
    assert loc.output_difference is not None and loc.output_difference.compiled
    assert loc.output_difference.largest is None  # no values recorded: fingerprints only
    assert compare(1, eager, [mod(1, "Net", "y", c=True)]).first_module_forward is None


def test_inside_a_compiled_model_the_first_call_debugmode_saw_differ_is_named() -> None:
    """What PyTorch's DebugMode recorded inside a compiled model that differs run to run: the
    first call whose output differs, whether its inputs agreed (then it is the culprit op),
    where the two sides ran other calls, and nothing to compare when one side ran eager."""
    def side(calls: list[list[str]], out: str) -> list[dict[str, Any]]:
        return [{"k": "calls", "i": 1, "m": "Net", "calls": calls, "n": len(calls),
                 "graphs": 2, "breaks": ["Call to `torch._dynamo.graph_break()`"]},
                {"k": "module", "i": 2, "ph": "forward", "m": "Net", "in": "x", "out": out,
                 "c": True}]

    base = [["aten.t.default", "w", "wt"], ["aten.addmm.default", "x;wt", "h"]]
    itself = compare(1, side([*base, ["aten.add.Tensor", "h", "y"]], "y"),
                     side([*base, ["aten.add.Tensor", "h", "y2"]], "y2"))
    call = itself.compiled_call
    assert call is not None and (call.name, call.index, call.inputs_agree) == (
        "aten.add.Tensor", 3, True)
    assert itself.op == "aten.add.Tensor" and itself.module == "Net"
    assert "it returns other bits for the same inputs" in itself.detail
    assert "dynamo made 2 graphs in the run" in itself.detail
    before = compare(1, side([["aten.addmm.default", "x", "h"]], "y"),
                     side([["aten.addmm.default", "x2", "h2"]], "y2"))
    assert before.compiled_call is not None and before.compiled_call.inputs_agree is False
    assert before.op is None and "its inputs already differ" in before.detail
    parted = compare(1, side(base, "y"), side([base[0], ["aten.mm.default", "x", "h"]], "y2"))
    assert parted.compiled_call is not None and parted.compiled_call.parted
    assert parted.compiled_call.index == 2
    missing = compare(1, [{"k": "calls", "i": 1, "m": "Net", "missing": "no DebugMode"},
                          *side([], "y")[1:]], side([], "y2"))
    assert missing.compiled_call is not None and missing.compiled_call.missing == "no DebugMode"
    eager = [{"k": "module", "i": 1, "ph": "forward", "m": "Net", "in": "x", "out": "y2"}]
    one = compare(1, eager, side(base, "y"))
    assert one.compiled_call is not None and one.compiled_call.one_side


def test_a_malformed_calls_record_is_no_record() -> None:
    from repro_check.trace.probes import CompiledCallsRun, ProbeOp

    good = ProbeOp.parse({"k": "calls", "m": "Net", "calls": [["a", "b", "c"]], "n": 1})
    assert isinstance(good, CompiledCallsRun) and good.calls == (("a", "b", "c"),)
    for bad in ({"calls": [["a", "b"]]}, {"calls": "x"}, {"calls": [[1, 2, 3]]},
                {"breaks": [3]}):
        assert ProbeOp.parse({"k": "calls", "m": "Net", **bad}) is None
