"""What the child sees of a checkpoint: its description from the object saved, the lr and
optimizer-state signals, a save inside another, a copy that cannot be made (in process)."""

from __future__ import annotations

import os
import random
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from repro_check.child import checkpoint, patches
from repro_check.trace.protocol import ResumeSettings


def model_and_opt() -> tuple[torch.nn.Module, torch.optim.Optimizer, Any]:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2)
    return model, opt, sched


def test_describe_names_model_optimizer_scheduler_and_rng_streams() -> None:
    model, opt, sched = model_and_opt()
    d = checkpoint.describe({"net": model.state_dict(), "opt": opt.state_dict(),
                             "sched": sched.state_dict(), "epoch": 3,
                             "rng": {"python": random.getstate(), "numpy": np.random.get_state(),
                                     "torch": torch.get_rng_state()},
                             "scaler": torch.amp.GradScaler("cpu").state_dict()})
    assert d["keys"] == ["net", "opt", "sched", "epoch", "rng", "scaler"]
    assert d["kinds"] == {"net": "model", "opt": "optimizer", "sched": "scheduler",
                          "epoch": "other", "rng": "rng", "scaler": "grad_scaler"}
    assert d["rng"] == ["python", "numpy", "torch"]
    # the ranks' CPU states gathered in a list (torchrun, rank 0 saves) are torch's, not CUDA's
    ranks = checkpoint.describe({"rng": [torch.get_rng_state(), torch.get_rng_state()]})
    assert ranks["kinds"] == {"rng": "rng"} and ranks["rng"] == ["torch"]
    assert checkpoint.rng_streams([torch.zeros(16, dtype=torch.uint8)] * 2) == ["cuda"]
    # Lightning's lists of optimizer and scheduler states; a bare state dict is one model
    assert checkpoint.kind_of([opt.state_dict()]) == "optimizer"
    assert checkpoint.describe(model.state_dict())["kinds"] == {"(whole)": "model"}


def test_lr_and_optimizer_state_signals_follow_the_state() -> None:
    model, opt, sched = model_and_opt()
    empty = checkpoint.optimizer_state(opt, defer=False)
    assert checkpoint.learning_rates(opt) == "0.01"
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    sched.step()
    sched.step()
    stepped = checkpoint.optimizer_state(opt, defer=False)
    assert stepped != empty and checkpoint.learning_rates(opt) == "0.001"
    exp_avg = opt.state[model.weight]["exp_avg"]
    exp_avg.view(-1)[0] = torch.nextafter(exp_avg.view(-1)[0], torch.tensor(1.0))
    assert checkpoint.optimizer_state(opt, defer=False) != stepped  # one ulp of one moment


class FakeRecorder:
    step = 5

    def flush(self) -> None:
        pass


def test_a_save_inside_another_is_part_of_it_and_a_failed_copy_is_reported(
        tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    exits: list[int] = []
    saves = checkpoint.Saves(FakeRecorder(), events.append,
                             ResumeSettings("interrupted", stop_at=5,
                                            copy_dir=str(tmp_path / "copy")))
    saves.exit = exits.append
    inner = saves.wrap("torch.save", torch.save,
                       lambda a, k: (a[0], checkpoint._path_of(a[1])))  # noqa: SLF001

    def outer_save(folder: str) -> None:  # like the HF Trainer: several files in one folder
        os.makedirs(folder)
        inner({"w": torch.ones(2)}, os.path.join(folder, "model.pt"))
        inner({"state": {}, "param_groups": []}, os.path.join(folder, "optimizer.pt"))
        inner({"python": random.getstate(), "cpu": torch.get_rng_state()},
              os.path.join(folder, "rng_state.pth"))

    outer = saves.wrap("trainer", outer_save, lambda a, k: (None, a[0]))
    outer(str(tmp_path / "checkpoint-5"))
    (record,) = [e["info"]["checkpoint"] for e in events if "checkpoint" in e.get("info", {})]
    assert record["step"] == 5 and record["kind"] == "trainer"
    assert record["contents"]["kinds"] == {"model.pt": "model", "optimizer.pt": "optimizer",
                                           "rng_state.pth": "rng"}
    assert record["contents"]["rng"] == ["python", "torch"]
    assert Path(record["copy"], "model.pt").is_file() and exits == [0]

    events.clear()
    gone = checkpoint.Saves(FakeRecorder(), events.append,
                            ResumeSettings("interrupted", stop_at=1,
                                           copy_dir=str(tmp_path / "copy2")))
    gone.exit = exits.append
    gone.taken("torch.save", str(tmp_path / "vanished.pt"), None)
    (record,) = [e["info"]["checkpoint"] for e in events if "checkpoint" in e.get("info", {})]
    assert record["copy"] is None and "could not be copied" in record["error"]


def test_safetensors_and_distributed_checkpoint_saves_are_seen(tmp_path: Path) -> None:
    """safetensors' save_file and save_model (which calls save_file on the same file: one
    save), torch.distributed.checkpoint's save (a folder named by checkpoint_id) and its older
    save_state_dict (the storage writer given by position), each seen with what it holds."""
    st = pytest.importorskip("safetensors.torch", reason="safetensors is not installed")
    import torch.distributed.checkpoint as dcp

    events: list[dict[str, Any]] = []
    watch = checkpoint.Checkpoints(FakeRecorder(), events.append, ResumeSettings("reference"))
    assert watch.saves is not None
    frameworks = checkpoint.FrameworkSaves(FakeRecorder(), watch.saves)
    model = torch.nn.Linear(2, 1)
    try:
        watch._torch_saves(watch.saves)  # noqa: SLF001 - the save wrappers alone
        frameworks.dcp(dcp)
        st.save_file(model.state_dict(), str(tmp_path / "w.safetensors"))
        st.save_model(model, str(tmp_path / "m.safetensors"))
        with warnings.catch_warnings():  # one process, no process group: it says so
            warnings.simplefilter("ignore")
            dcp.save({"model": model.state_dict(), "step": 3}, checkpoint_id=tmp_path / "dcp")
            if hasattr(dcp, "save_state_dict"):
                dcp.save_state_dict({"model": model.state_dict()},
                                    dcp.FileSystemWriter(str(tmp_path / "old")), no_dist=True)
    finally:
        patches.PATCHES.release(watch)
        patches.PATCHES.release(frameworks)
    saves = [e["info"]["save"] for e in events if "save" in e.get("info", {})]
    seen = [(s["kind"], os.path.basename(s["path"]), s["contents"]["kinds"]) for s in saves]
    model_kinds = {"model": "model", "step": "other"}
    assert seen[:3] == [("safetensors", "w.safetensors", {"(whole)": "model"}),
                        ("safetensors", "m.safetensors", {"(whole)": "model"}),
                        ("torch.distributed.checkpoint", "dcp", model_kinds)]
    if hasattr(dcp, "save_state_dict"):
        assert seen[3] == ("torch.distributed.checkpoint", "old", {"model": "model"})
    assert len(seen) == 3 + hasattr(dcp, "save_state_dict")
    assert st.save_file is not None and not hasattr(st.save_file, "__wrapped__")  # released
