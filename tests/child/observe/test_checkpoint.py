"""What the child sees of a checkpoint: its description from the object saved, the lr and
optimizer-state signals, a save inside another, a copy that cannot be made (in process)."""

from __future__ import annotations

import os
import random
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from repro_check.child.observe import checkpoint
from repro_check.child import patches
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


def interrupted(copy_dir: Path, events: list[dict[str, Any]], exit: Any,
                stop_at: int = 5) -> checkpoint.Saves:
    """The watch on saves of an interrupted run told to stop at ``stop_at``, its records going
    to ``events`` and its end to ``exit`` (instead of ending this process)."""
    saves = checkpoint.Saves(FakeRecorder(), events.append,
                             ResumeSettings("interrupted", stop_at=stop_at,
                                            copy_dir=str(copy_dir)))
    saves.exit = exit
    return saves


def test_a_save_inside_another_is_part_of_it_and_a_failed_copy_is_reported(
        tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    exits: list[int] = []
    saves = interrupted(tmp_path / "copy", events, exits.append)
    inner = saves.wrap("torch.save", torch.save,
                       lambda a, k: (a[0], checkpoint.path_of(a[1])))

    def outer_save(folder: str) -> None:  # like the HF Trainer: several files in one folder
        os.makedirs(folder)
        inner({"w": torch.ones(2)}, os.path.join(folder, "model.pt"))
        inner({"state": {}, "param_groups": []}, os.path.join(folder, "optimizer.pt"))
        inner({"python": random.getstate(), "cpu": torch.get_rng_state()},
              os.path.join(folder, "rng_state.pth"))

    outer = saves.wrap("trainer", outer_save, lambda a, k: (None, a[0]))
    outer(str(tmp_path / "checkpoint-5"))
    saves.poll()  # the next step starts: the checkpoint is complete
    (record,) = [e["info"]["checkpoint"] for e in events if "checkpoint" in e.get("info", {})]
    assert record["step"] == 5 and record["kind"] == "trainer"
    assert record["contents"]["kinds"] == {"model.pt": "model", "optimizer.pt": "optimizer",
                                           "rng_state.pth": "rng"}
    assert record["contents"]["rng"] == ["python", "torch"]
    assert Path(record["copy"], "model.pt").is_file() and exits == [0]

    events.clear()
    gone = interrupted(tmp_path / "copy2", events, exits.append, stop_at=1)
    gone.taken("torch.save", str(tmp_path / "vanished.pt"), None)
    gone.finish()
    (record,) = [e["info"]["checkpoint"] for e in events if "checkpoint" in e.get("info", {})]
    assert record["copy"] is None and "could not be copied" in record["error"]


def test_a_checkpoint_of_several_saves_in_a_row_is_one_and_ends_at_the_next_step(
        tmp_path: Path, monkeypatch: Any) -> None:
    """A script that writes the model, then the optimizer, then its counters, each with a save
    of its own: the three are one checkpoint (copied side by side, described together), and the
    run stops only when the next step starts, not after the first file."""
    monkeypatch.setattr(checkpoint, "GROUP_QUIET", 600.0)  # only the next step ends it here
    events: list[dict[str, Any]] = []
    exits: list[int] = []
    saves = interrupted(tmp_path / "copy", events, exits.append)
    save = saves.wrap("torch.save", torch.save,
                      lambda a, k: (a[0], checkpoint.path_of(a[1])))
    model, opt, _ = model_and_opt()
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    save(model.state_dict(), str(out / "model.pt"))
    save(opt.state_dict(), str(out / "opt.pt"))
    save({"step": 5, "torch": torch.get_rng_state()}, str(out / "sub" / "meta.pt"))
    save({"other": 1}, str(tmp_path / "elsewhere.pt"))
    assert exits == [] and not [e for e in events if "checkpoint" in e.get("info", {})]
    saves.poll()  # the optimizer's next step
    (record,) = [e["info"]["checkpoint"] for e in events if "checkpoint" in e.get("info", {})]
    assert exits == [0] and record["step"] == 5 and record["path"] == str(out / "model.pt")
    assert [f["path"] for f in record["files"]] == [
        str(out / "model.pt"), str(out / "opt.pt"), str(out / "sub" / "meta.pt"),
        str(tmp_path / "elsewhere.pt")]
    copies = [Path(f["copy"]) for f in record["files"]]
    top = tmp_path / "copy"
    assert copies[:3] == [top / "model.pt", top / "opt.pt", top / "sub" / "meta.pt"]
    assert copies[3].parent.parent == top and copies[3].name == "elsewhere.pt"
    assert all(c.is_file() for c in copies)
    kinds = record["contents"]["kinds"]
    assert kinds["model.pt"] == "model" and kinds["opt.pt"] == "optimizer"
    assert kinds["torch"] == "rng" and record["contents"]["rng"] == ["torch"]
    saves.poll()
    assert exits == [0]  # once


def test_a_checkpoint_with_no_step_after_it_ends_when_no_save_follows(
        tmp_path: Path, monkeypatch: Any) -> None:
    """After its last file the script evaluates (no step for a while) or returns: the run stops
    :data:`GROUP_QUIET` after the last save returned, and never while a save is running."""
    monkeypatch.setattr(checkpoint, "GROUP_QUIET", 0.05)
    events: list[dict[str, Any]] = []
    ended = threading.Event()
    saves = interrupted(tmp_path / "copy", events, lambda code: ended.set())
    running: list[Any] = []

    def slow_save(obj: Any, path: str) -> None:
        running.append(saves.timer)  # no stop can come while this save runs
        torch.save(obj, path)

    save = saves.wrap("torch.save", slow_save, lambda a, k: (a[0], str(a[1])))
    save({"a": 1}, str(tmp_path / "a.pt"))
    save({"b": 2}, str(tmp_path / "b.pt"))
    assert ended.wait(30), "the run did not stop after its checkpoint"
    (record,) = [e["info"]["checkpoint"] for e in events if "checkpoint" in e.get("info", {})]
    assert running == [None, None] and len(record["files"]) == 2
    assert record["stopped_after"] >= 0.05
    assert {"info": {"status": "stopped", "steps": 5, "checkpointed": True}} in events

    events.clear()
    exits: list[int] = []
    returned = interrupted(tmp_path / "copy2", events, exits.append)
    monkeypatch.setattr(checkpoint, "GROUP_QUIET", 600.0)
    returned.taken("torch.save", str(tmp_path / "a.pt"), None)
    assert exits == []
    returned.finish()  # what the target's return does (Checkpoints.target_returned)
    assert exits == [0] and "files" not in events[0]["info"]["checkpoint"]


def test_a_checkpoint_file_moved_into_place_is_known_by_where_it_went(tmp_path: Path,
                                                                       monkeypatch: Any) -> None:
    """An atomic save (``torch.save`` to ``ckpt.pt.tmp``, then ``os.replace`` to ``ckpt.pt``):
    the checkpoint is where the file went, which is where the resumed run's script reads it."""
    monkeypatch.setattr(checkpoint, "GROUP_QUIET", 600.0)
    events: list[dict[str, Any]] = []
    saves = interrupted(tmp_path / "copy", events, lambda code: None)
    save = saves.wrap("torch.save", torch.save, lambda a, k: (a[0], str(a[1])))
    replace = saves.renaming(os.replace)
    replace_before = tmp_path / "unrelated"  # a move before any checkpoint: nothing to follow
    replace_before.write_text("x")
    replace(str(replace_before), str(tmp_path / "moved"))
    save({"w": torch.ones(1)}, str(tmp_path / "ckpt.pt.tmp"))
    replace(str(tmp_path / "ckpt.pt.tmp"), tmp_path / "ckpt.pt")
    saves.finish()
    (record,) = [e["info"]["checkpoint"] for e in events if "checkpoint" in e.get("info", {})]
    assert record["path"] == str(tmp_path / "ckpt.pt") and (tmp_path / "ckpt.pt").is_file()
    assert Path(record["copy"]).name == "ckpt.pt.tmp" and Path(record["copy"]).is_file()


def seen_saves(tmp_path: Path, save: Any) -> list[tuple[str, str, dict[str, str]]]:
    """(kind, file name, what it holds) of each save ``save(dcp_module)`` makes while a
    reference run's watch (torch's and the frameworks' saves) is installed, then released."""
    import torch.distributed.checkpoint as dcp

    events: list[dict[str, Any]] = []
    watch = checkpoint.Checkpoints(FakeRecorder(), events.append, ResumeSettings("reference"))
    assert watch.saves is not None
    frameworks = checkpoint.FrameworkSaves(FakeRecorder(), watch.saves)
    try:
        watch._torch_saves(watch.saves)  # noqa: SLF001 - the save wrappers alone
        frameworks.dcp(dcp)
        save(dcp)
    finally:
        patches.PATCHES.release(watch)
        patches.PATCHES.release(frameworks)
    saves = [e["info"]["save"] for e in events if "save" in e.get("info", {})]
    return [(s["kind"], os.path.basename(s["path"]), s["contents"]["kinds"]) for s in saves]


def test_distributed_checkpoint_saves_are_seen(tmp_path: Path) -> None:
    """torch.distributed.checkpoint's save (a folder named by checkpoint_id) and its older
    save_state_dict (the storage writer given by position), each seen with what it holds (the
    torch.saves of its pieces to buffers are its own workings, not parts)."""
    model = torch.nn.Linear(2, 1)

    def save(dcp: Any) -> None:
        with warnings.catch_warnings():  # one process, no process group: it says so
            warnings.simplefilter("ignore")
            dcp.save({"model": model.state_dict(), "step": 3}, checkpoint_id=tmp_path / "dcp")
            if hasattr(dcp, "save_state_dict"):
                dcp.save_state_dict({"model": model.state_dict()},
                                    dcp.FileSystemWriter(str(tmp_path / "old")), no_dist=True)

    seen = seen_saves(tmp_path, save)
    old = [("torch.distributed.checkpoint", "old", {"model": "model"})]
    import torch.distributed.checkpoint as dcp

    assert seen == [("torch.distributed.checkpoint", "dcp", {"model": "model", "step": "other"})] \
        + (old if hasattr(dcp, "save_state_dict") else [])


@pytest.mark.frameworks
def test_safetensors_saves_are_seen(tmp_path: Path) -> None:
    """safetensors' save_file and save_model (which calls save_file on the same file: one
    save), each seen as one model; the wrappers are gone once released."""
    st = pytest.importorskip("safetensors.torch", reason="safetensors is not installed (make "
                             "test-frameworks installs it and runs this test)")
    model = torch.nn.Linear(2, 1)

    def save(dcp: Any) -> None:
        st.save_file(model.state_dict(), str(tmp_path / "w.safetensors"))
        st.save_model(model, str(tmp_path / "m.safetensors"))

    assert seen_saves(tmp_path, save) == [("safetensors", "w.safetensors", {"(whole)": "model"}),
                                          ("safetensors", "m.safetensors", {"(whole)": "model"})]
    assert st.save_file is not None and not hasattr(st.save_file, "__wrapped__")  # released
