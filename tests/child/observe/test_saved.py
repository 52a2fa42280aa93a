"""What the child sees of what a run leaves: every save described tensor by tensor from the
object handed to it (key paths, dtype, shape, exact bits; numbers and strings left out), the
savers watched and those not, and the modules' state at the end (in process)."""

from __future__ import annotations

import copy
import io
import json
import os
import pickle
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from repro_check.child.observe import origin, saved
from repro_check.child import patches
from repro_check.trace.format import parse_event
from repro_check.trace.protocol import SAVED_FILE, SAVED_STATE, SavedRecord, record_of


@dataclass
class Snapshot:
    weights: dict[str, Any]
    note: str


class Holder:
    def __init__(self) -> None:
        self.shadow = [torch.ones(2)]
        self.count = 3


def test_the_walk_names_every_tensor_and_array_by_its_key_path_and_skips_the_rest() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3))
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(4, 2)).sum().backward()
    opt.step()
    obj = {"model": model.state_dict(), "opt": opt, "epoch": 3, "when": time.time(),
           "note": "x", "pair": (torch.zeros(1), [np.ones(2), np.float64(1.5)]),
           "snap": Snapshot({"w": torch.ones(1)}, "n"), "holder": Holder(),
           "objects": np.array([{"t": torch.ones(1)}, 7], dtype=object), "whole": model}
    keys = [k for k, _ in saved.walk(obj)]
    assert keys[:5] == ["model.0.weight", "model.0.bias", "model.1.weight", "model.1.bias",
                        "model.1.running_mean"]
    assert "opt.state.0.exp_avg" in keys and "opt.state.0.step" in keys
    assert {"pair.0", "pair.1.0", "snap.weights.w", "holder.shadow.0", "objects.0.t",
            "whole.0.weight", "whole.1.running_var"} <= set(keys)
    # numbers, strings, the time and a numpy scalar are not compared
    assert not any(k.startswith(("epoch", "when", "note", "pair.1.1", "holder.count"))
                   for k in keys)
    assert [k for k, _ in saved.walk(torch.ones(2))] == [""]  # a tensor saved alone
    cyclic: dict[str, Any] = {"t": torch.ones(1)}
    cyclic["self"] = cyclic
    assert [k for k, _ in saved.walk(cyclic)] == ["t"]


def test_a_description_holds_dtype_shape_and_exact_bits_and_folds_past_the_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    t = torch.linspace(0, 1, 6, dtype=torch.float64).reshape(2, 3)
    rows, count = saved.describe(iter([("w", t), ("a", np.arange(4, dtype=np.int32))]))
    assert count == 2
    assert rows[0][:3] == ["w", "float64", [2, 3]] and rows[1][:3] == ["a", "int32", [4]]
    again, _ = saved.describe(iter([("w", t.clone())]))
    assert again[0] == rows[0]
    nudged = t.clone()
    nudged[1, 2] = torch.nextafter(nudged[1, 2], torch.tensor(2.0, dtype=torch.float64))
    one_ulp, _ = saved.describe(iter([("w", nudged)]))
    assert one_ulp[0][3] != rows[0][3]  # one ulp of one element
    monkeypatch.setattr(saved, "MAX_TENSORS", 2)
    folded, count = saved.describe(iter((f"t{i}", torch.full((1,), float(i))) for i in range(5)))
    assert count == 5 and [r[0] for r in folded] == ["t0", "t1", saved.MORE]


class FakeRecorder:
    step = 4

    def __init__(self) -> None:
        self.step_starting: list[Any] = []

    def quiet(self) -> Any:
        return open(os.devnull)  # any context manager


@pytest.fixture()
def watched(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[Any, list[Any]]]:
    """The watch on saves installed in this process (its records in the list), the working folder
    ``tmp_path``; everything undone after."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(origin, "SITES", origin.ModelSites())
    origin.SITES.install()
    events: list[dict[str, Any]] = []
    watch = saved.install(FakeRecorder(), events.append)
    try:
        yield watch, events
    finally:
        watch.uninstall()
        origin.SITES.uninstall()


def records(events: list[dict[str, Any]]) -> list[SavedRecord]:
    """The events as the parent reads them: each validated as a trace line, then typed."""
    out = []
    for ev in events:
        assert "warning" not in ev, ev
        rec = record_of(parse_event(json.loads(json.dumps(ev))))
        assert isinstance(rec, SavedRecord)
        out.append(rec)
    return out


def test_every_watched_saver_is_described_where_it_is_called(
        watched: tuple[Any, list[Any]], tmp_path: Path) -> None:
    watch, events = watched
    model = torch.nn.Linear(2, 2)
    torch.save({"model": model.state_dict(), "time": time.time()}, "ckpt.pt")
    line = torch.save.__code__.co_firstlineno  # noqa: F841 - the line below is the save's
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    np.save("preds", np.ones(3))
    np.savez(str(tmp_path / "many"), np.zeros(2), idx=np.arange(2))
    with open("weights.pkl", "wb") as f:
        pickle.dump(model.state_dict(), f)
    pickle.dump(model.state_dict(), io.BytesIO())  # into memory, by dump: not a saved file
    pickle.dumps({"lr": 0.1, "name": "run"})  # no tensor: a config, no saved result
    with open("other.pkl", "wb") as f:
        f.write(pickle.dumps({"w": torch.ones(1)}))  # bytes the script writes itself: seen
    torch.jit.save(torch.jit.script(model), "model.jit")
    recs = records(events)
    assert [(r.order, r.saver, r.path) for r in recs] == [
        (1, "torch.save", "ckpt.pt"), (2, "torch.save", None), (3, "numpy.save", "preds.npy"),
        (4, "numpy.savez", "many.npz"), (5, "pickle.dump", "weights.pkl"),
        (6, "pickle.dumps", None), (7, "torch.jit.save", "model.jit")]
    assert all(r.kind == SAVED_FILE and r.step == 4 for r in recs)
    assert [t.key for t in recs[0].tensors] == ["model.weight", "model.bias"]
    assert recs[0].count == 2 and recs[0].tensors[0].shape == (2, 2)
    assert [t.key for t in recs[3].tensors] == ["arr_0", "idx"]
    assert [t.key for t in recs[5].tensors] == ["w"]
    assert [t.key for t in recs[6].tensors] == ["weight", "bias"]
    here = recs[0].location
    assert here is not None and here.file == __file__ and here.function == \
        "test_every_watched_saver_is_described_where_it_is_called"
    # the same weights give the same fingerprints, whatever saved them
    assert recs[4].tensors[0].digest == recs[1].tensors[0].digest == recs[0].tensors[0].digest


def test_a_save_inside_another_is_part_of_it_and_a_framework_names_its_buffers(
        watched: tuple[Any, list[Any]]) -> None:
    watch, events = watched

    def framework_save(checkpoint: dict[str, Any], filepath: str) -> None:
        buffer = io.BytesIO()  # as Lightning's _atomic_save does
        torch.save(checkpoint, buffer)
        with open(filepath, "wb") as f:
            f.write(buffer.getvalue())

    wrapped = watch.wrap("lightning", framework_save, lambda a, k: (None, os.path.abspath(a[1])))
    wrapped({"state_dict": {"w": torch.ones(2)}, "epoch": 1}, "last.ckpt")
    outer = watch.wrap("outer", lambda obj, path: torch.save(obj, path),
                       lambda a, k: (a[0], os.path.abspath(a[1])))
    outer({"w": torch.zeros(1)}, "outer.pt")
    recs = records(events)
    assert [(r.saver, r.path, [t.key for t in r.tensors]) for r in recs] == [
        ("torch.save (lightning)", "last.ckpt", ["state_dict.w"]),
        ("outer", "outer.pt", ["w"])]


def test_the_modules_state_at_the_end_holds_buffers_copies_and_attributes(
        watched: tuple[Any, list[Any]]) -> None:
    watch, events = watched

    def train() -> None:
        model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
        ema = copy.deepcopy(model)  # no __init__: seen through __setstate__
        ema.shadow = [torch.full((2,), 3.0)]  # a tensor held as an attribute
        model(torch.ones(3, 2))
        watch.modules.hold()  # a step starts: the modules are held from here on

    train()  # its locals are gone
    watch.target_returned()
    watch.target_returned()  # once only
    (state,) = records(events)
    assert state.kind == SAVED_STATE and state.order == 0 and state.path is None
    keys = [t.key for t in state.tensors]
    assert keys[:2] == ["model.0.weight", "model.0.bias"]
    assert "model.1.running_mean" in keys and "model.1.num_batches_tracked" in keys
    assert "ema.0.weight" in keys and "ema.1.running_var" in keys and "ema.shadow.0" in keys


def test_uninstall_puts_every_saver_back(monkeypatch: pytest.MonkeyPatch) -> None:
    originals = (torch.save, np.save, np.savez, pickle.dump, torch.jit.save,
                 torch.nn.Module.__setstate__)
    monkeypatch.setattr(origin, "SITES", origin.ModelSites())
    watch = saved.install(FakeRecorder(), lambda event: None)
    assert torch.save is not originals[0] and pickle.dump is not originals[3]
    watch.uninstall()
    assert (torch.save, np.save, np.savez, pickle.dump, torch.jit.save,
            torch.nn.Module.__setstate__) == originals
    assert not any(row.features == ("saved.files",) for row in patches.PATCHES.listing())


def test_the_attacker_round_other_ways_of_saving(
        watched: tuple[Any, list[Any]], tmp_path: Path) -> None:
    """Saves found trying to slip past: numpy.savetxt, torch.serialization.save called directly,
    a pathlib path, a gzip file, safetensors' in-memory save whose bytes the script writes."""
    import gzip

    watch, events = watched
    np.savetxt("preds.txt", np.ones((2, 2)))
    torch.serialization.save({"w": torch.ones(1)}, tmp_path / "direct.pt")
    with gzip.open("packed.pt.gz", "wb") as f:
        torch.save({"w": torch.ones(1)}, f)
    savers = [(r.saver, r.path) for r in records(events)]
    assert savers == [("numpy.savetxt", "preds.txt"), ("torch.save", "direct.pt"),
                      ("torch.save", "packed.pt.gz")]


@pytest.mark.frameworks
def test_safetensors_in_memory_save_written_by_the_script(watched: tuple[Any, list[Any]]) -> None:
    """safetensors' in-memory save whose bytes the script writes (``make test-frameworks``
    installs safetensors)."""
    st = pytest.importorskip("safetensors.torch")

    watch, events = watched
    events.clear()
    Path("bytes.safetensors").write_bytes(st.save({"w": torch.ones(2)}))
    assert [(r.saver, r.path, [t.key for t in r.tensors]) for r in records(events)] == [
        ("safetensors.torch.save", None, ["w"])]
