"""The typed payloads of a run's records: each read once where its line becomes a record, a
malformed one left as a plain record (or None) that no reader uses."""

from __future__ import annotations

from typing import Any

import pytest

from repro_check.trace.payloads import (CheckpointFile, CheckpointNote, ControlNote, Location,
                                        SaveNote)
from repro_check.trace.probes import (VALUES_LIMIT, EnvObserved, GradRun, MadeTensor,
                                      ModuleRun, OpRun, OutputValues, ProbeMark, ProbeOp,
                                      probe_ops)
from repro_check.trace.protocol import (CheckpointedInfo, ControlInfo, InfoRecord, ModelsInfo,
                                        ProbeRecord, SaveInfo, record_of, typed_info)

LOC = {"file": "rl.py", "line": 9, "function": "main"}


# ---- probe records -----------------------------------------------------------------------------
def test_each_kind_of_probe_record_is_read_into_its_type() -> None:
    op = ProbeOp.parse({"k": "op", "i": 3, "ph": "forward", "m": "Net.fc", "op": "aten::addmm",
                        "in": ["b", "x", "w"], "out": ["y"]})
    assert op == OpRun(3, "aten::addmm", "forward", "Net.fc", ("b", "x", "w"), ("y",))
    module = ProbeOp.parse({"k": "module", "i": 4, "ph": "backward", "m": "Net", "n": 0,
                            "out": "g"})
    assert module == ModuleRun(4, "backward", "Net", None, "g", 0)
    made = ProbeOp.parse({"k": "made", "i": 1, "fn": "torch.as_tensor", "loc": LOC, "out": "o"})
    assert made == MadeTensor(1, "torch.as_tensor", Location("rl.py", 9, "main"), "o")
    env = ProbeOp.parse({"k": "env", "i": 2, "call": "reset", "loc": LOC, "obs": "r0"})
    assert env == EnvObserved(2, "reset", Location("rl.py", 9, "main"), "r0")
    assert ProbeOp.parse({"k": "armed", "step": 5}) == ProbeMark(0, True, 5)
    assert ProbeOp.parse({"k": "disarmed", "step": 5, "records": 9}) == ProbeMark(0, False, 5, 9)
    assert ProbeOp.parse(op) is op  # a typed record as it is


@pytest.mark.parametrize("body", [
    None, "op", [1], {"op": "mm"}, {"k": "nothing we know"},
    {"k": "op", "op": 3, "in": [], "out": []},
    {"k": "op", "op": "aten::mm", "in": "x", "out": []},
    {"k": "op", "op": "aten::mm", "in": ["x"], "out": [1]},
], ids=["null", "text", "list", "no-kind", "unknown-kind", "op-not-text", "ins-not-list",
        "outs-not-texts"])
def test_a_malformed_probe_record_is_none(body: Any) -> None:
    assert ProbeOp.parse(body) is None
    record = record_of({"probe": body}) if isinstance(body, dict) else None
    assert record is None or isinstance(record, ProbeRecord) and record.probe is None


def _values(shape: list[int], data: list[float]) -> dict[str, Any]:
    import base64
    from array import array

    return {"shape": shape, "b64": base64.b64encode(array("d", data).tobytes()).decode()}


def test_a_model_output_and_a_gradient_carry_their_values() -> None:
    module = ProbeOp.parse({"k": "module", "i": 4, "ph": "forward", "m": "Net", "in": "a",
                            "out": "b", "c": True, "v": _values([2, 3], [0, 1, 2, 3, 4, 5.5])})
    assert isinstance(module, ModuleRun) and module.compiled
    assert module.values == OutputValues((2, 3), (0.0, 1.0, 2.0, 3.0, 4.0, 5.5))
    assert module.values.index(4) == (1, 1) and module.values.index(0) == (0, 0)
    grad = ProbeOp.parse({"k": "grad", "i": 5, "p": "Net.fc.weight", "out": "g",
                          "v": _values([1], [2.0])})
    assert grad == GradRun(5, "Net.fc.weight", "g", OutputValues((1,), (2.0,)))
    assert ProbeOp.parse({"k": "grad", "p": 3}) is None  # no name: no record
    disarmed = ProbeOp.parse({"k": "disarmed", "step": 2, "compiled": "Net",
                              "ran_compiled": True})
    assert isinstance(disarmed, ProbeMark) and disarmed.ran_compiled


@pytest.mark.parametrize("values", [
    "x", {"shape": [2], "b64": "%%%"}, _values([3], [1.0, 2.0]), {"shape": [-1], "b64": ""},
    {"shape": "2", "b64": ""}, {"shape": [1], "b64": "AAAA"},
    {"shape": [VALUES_LIMIT * 2], "b64": "A" * (VALUES_LIMIT * 24)},
])
def test_malformed_values_are_left_out_and_the_record_kept(values: Any) -> None:
    module = ProbeOp.parse({"k": "module", "ph": "forward", "m": "Net", "out": "b", "v": values})
    assert isinstance(module, ModuleRun) and module.values is None and module.out == "b"


def test_a_probe_line_is_read_once_and_malformed_records_are_left_out() -> None:
    record = record_of({"probe": {"k": "made", "fn": "torch.tensor", "loc": "here", "out": 1}})
    assert isinstance(record, ProbeRecord)
    assert record.probe == MadeTensor(0, "torch.tensor", None, None)  # no place, no fingerprint
    good = {"k": "op", "op": "aten::t", "in": ["w"], "out": ["wt"]}
    assert probe_ops([good, {"k": "?"}, OpRun(op="aten::mm")]) == [
        OpRun(0, "aten::t", None, None, ("w",), ("wt",)), OpRun(op="aten::mm")]


# ---- a resume's saves and checkpoint ----------------------------------------------------------
CHECKPOINT = {"step": 3, "path": "/w/ckpt.pt", "kind": "torch.save", "due": True,
              "copy": "/t/ckpt.pt", "stopped_after": 0.25,
              "contents": {"keys": ["model", "optim", 7], "kinds": {"model": "model",
                                                                     "optim": "optimizer"},
                           "rng": ["torch"]},
              "files": [{"path": "/w/ckpt.pt", "copy": "/t/ckpt.pt"}, {"path": "/w/b.pt"}, 3]}


def test_a_checkpoint_is_read_into_its_note() -> None:
    record = record_of({"info": {"checkpoint": CHECKPOINT}})
    assert isinstance(record, CheckpointedInfo)
    assert record.checkpoint == CheckpointNote(
        3, "/w/ckpt.pt", "/t/ckpt.pt", "torch.save", ("model", "optim"),
        (("model", "model"), ("optim", "optimizer")), ("torch",), 0.25,
        (CheckpointFile("/w/ckpt.pt", "/t/ckpt.pt"), CheckpointFile("/w/b.pt")))
    failed = CheckpointNote.parse({"step": 2, "path": "p", "error": "could not be copied"})
    assert failed is not None and failed.copy is None and failed.error == "could not be copied"
    assert failed.files is None and failed.kind == "?"


@pytest.mark.parametrize("body", [None, "ckpt", [3], {"step": "3", "path": "p"},
                                  {"step": True, "path": "p"}])
def test_a_malformed_checkpoint_is_left_a_plain_record(body: Any) -> None:
    assert CheckpointNote.parse(body) is None
    record = record_of({"info": {"checkpoint": body}})
    assert type(record) is InfoRecord


def test_a_save_is_read_into_its_note() -> None:
    record = record_of({"info": {"save": {"step": 2, "path": "/w/a.pt", "kind": "torch.save",
                                          "contents": {}, "due": False}}})
    assert isinstance(record, SaveInfo) and record.save == SaveNote(2, "/w/a.pt")
    assert SaveNote.parse({"step": "2", "path": 5}) == SaveNote()  # kept, saying nothing
    assert SaveNote.parse("a.pt") is None
    assert type(record_of({"info": {"save": "a.pt"}})) is InfoRecord


# ---- the negative control's plant -------------------------------------------------------------
def test_a_plant_is_read_into_its_note() -> None:
    body = {"planted": True, "tensor": "Net.fc.weight", "dtype": "float32", "shape": [8, 4],
            "index": [3, 0], "step": 1, "where": "step", "before": "0.5", "after": 0.50000006,
            "gradient": False}
    record = record_of({"info": {"control": body}})
    assert isinstance(record, ControlInfo)
    assert record.control == ControlNote(True, None, "Net.fc.weight", "float32", (8, 4), (3, 0),
                                         1, "step", "0.5", 0.50000006)
    unplanted = ControlNote.parse({"planted": False, "step": 0, "why": "nothing to change"})
    assert unplanted is not None and not unplanted.planted and unplanted.why == "nothing to change"
    left_out = ControlNote.parse({"left_out": "rng"})
    assert left_out is not None and left_out.left_out == "rng" and not left_out.planted


def test_a_malformed_plant_is_left_a_plain_record() -> None:
    assert ControlNote.parse(["planted"]) is None
    assert type(record_of({"info": {"control": "planted"}})) is InfoRecord


@pytest.mark.parametrize("shared, count", [(3, 3), (0, 0), (-1, 0), ("3", 0), (None, 0),
                                           (True, 0)])
def test_the_models_of_step_1_and_their_shared_parameters_are_read(shared: Any,
                                                                    count: int) -> None:
    body = {"models": [{"class": "Net", "name": "model", "where": "t.py:4", "order": 2,
                        "shared": True}, {"class": "Head", "shared": "yes"}, 7],
            "shared_params": shared}
    rec = record_of({"info": body})
    assert isinstance(rec, ModelsInfo) and rec.shared_params == count
    assert [(m.cls, m.shared) for m in rec.models] == [("Net", True), ("Head", False)]


def test_a_plain_info_record_built_by_hand_is_typed_on_demand() -> None:
    body = {"planted": False, "why": "no tensor"}
    typed = typed_info(InfoRecord({"info": {"control": body}}, {"control": body}))
    assert isinstance(typed, ControlInfo) and typed.control.why == "no tensor"
    assert typed_info(typed) is typed
    plain = InfoRecord({"info": {"unknown": 1}}, {"unknown": 1})
    assert type(typed_info(plain)) is InfoRecord


def test_a_probe_mark_says_what_compiled_code_the_step_called() -> None:
    from repro_check.trace.probes import ProbeMark, ProbeOp

    mark = ProbeOp.parse({"k": "disarmed", "step": 2, "records": 9, "compiled": "Net"})
    assert isinstance(mark, ProbeMark) and (mark.step, mark.compiled) == (2, "Net")
    plain = ProbeOp.parse({"k": "disarmed", "step": 2, "records": 9})
    assert isinstance(plain, ProbeMark) and plain.compiled is None
