"""Checkpoints of two finished runs through ``repro-check diff``: torch.save files and folders of
them compared key by key (a tensor one ulp apart is named with its key, a missing key and a
dtype change too, plain values compared for equality), and a file that is no checkpoint or that
weights_only refuses named in one line (exit 2) without its pickled code ever running."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from .test_logs import diff, one_line_error

torch = pytest.importorskip("torch")


def state() -> dict[str, Any]:
    """A training checkpoint as scripts save it: model and optimizer state and bookkeeping."""
    g = torch.Generator().manual_seed(0)
    model = {"0.weight": torch.randn(4, 3, generator=g), "0.bias": torch.zeros(4),
             "bn.num_batches_tracked": torch.tensor(7)}
    opt = {"state": {0: {"step": torch.tensor(5.0), "exp_avg": torch.randn(4, 3, generator=g)}},
           "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "params": [0, 1]}]}
    return {"model": model, "optimizer": opt, "epoch": 3, "tag": "run"}


def save(path: Path, obj: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(obj, path)
    return path


def test_identical_checkpoints_are_the_same(tmp_path: Path) -> None:
    a = save(tmp_path / "a.pt", state())
    b = save(tmp_path / "b.pt", state())
    code, out, err, report = diff(tmp_path, str(a), str(b))
    assert code == 0, out + err
    assert report is not None and report["verdict"] == "same"
    ck = report["finished"]["checkpoints"]
    assert ck["same"] and ck["tensors_compared"] == 5 and ck["tensors_identical"] == 5
    keys = [e["key"] for e in ck["entries"]]
    assert keys[:3] == ["model.0.weight", "model.0.bias", "model.bn.num_batches_tracked"]
    assert "optimizer.state.0.exp_avg" in keys and "optimizer.param_groups.0.betas.1" in keys
    assert "epoch" in keys and "tag" in keys
    assert "SAME" in out


def test_one_ulp_names_the_key(tmp_path: Path) -> None:
    a = save(tmp_path / "a.pt", state())
    changed = state()
    w = changed["optimizer"]["state"][0]["exp_avg"]
    w[2, 1] = torch.nextafter(w[2, 1], torch.tensor(float("inf")))
    b = save(tmp_path / "b.pt", changed)
    code, out, err, report = diff(tmp_path, str(a), str(b))
    assert code == 1, out + err
    assert report is not None and report["divergent_signal"] == "optimizer.state.0.exp_avg"
    assert report["first_divergent_step"] is None
    ck = report["finished"]["checkpoints"]
    assert ck["first_differing_key"] == "optimizer.state.0.exp_avg"
    entry = next(e for e in ck["entries"] if e["key"] == "optimizer.state.0.exp_avg")
    assert entry["status"] == "differs" and entry["differing_elements"] == 1
    assert 0 < entry["max_abs_diff"] < 1e-6 and 0 < entry["max_rel_diff"] < 1e-6
    assert "First difference: key optimizer.state.0.exp_avg" in out
    code, out, err, report = diff(tmp_path, str(a), str(b), "--atol", "1e-6")
    assert code == 0, out + err
    assert report is not None
    assert report["finished"]["checkpoints"]["tensors_identical"] == 4


@pytest.mark.slow  # a repro-check process that loads torch, ~3 s
def test_a_missing_key_and_a_dtype_change_differ(tmp_path: Path) -> None:
    a = save(tmp_path / "a.pt", state())
    missing = state()
    del missing["model"]["0.bias"]
    b = save(tmp_path / "b.pt", missing)
    code, out, err, report = diff(tmp_path, str(a), str(b))
    assert code == 1, out + err
    assert report is not None
    ck = report["finished"]["checkpoints"]
    assert ck["keys_only_in_a"] == ["model.0.bias"] and ck["first_differing_key"] == "model.0.bias"
    assert "held by a.pt only" in out
    half = state()
    half["model"]["0.weight"] = half["model"]["0.weight"].half()
    c = save(tmp_path / "c.pt", half)
    code, out, err, report = diff(tmp_path, str(a), str(c))
    assert code == 1, out + err
    assert report is not None
    entry = report["finished"]["checkpoints"]["entries"][0]
    assert entry["status"] == "dtype" and (entry["dtype_a"], entry["dtype_b"]) == (
        "float32", "float16")
    assert "dtype float32 vs float16" in out


@pytest.mark.slow  # a repro-check process that loads torch, ~3 s
def test_plain_values_are_compared_for_equality(tmp_path: Path) -> None:
    a = save(tmp_path / "a.pt", state())
    later = state()
    later["epoch"] = 4
    b = save(tmp_path / "b.pt", later)
    code, out, err, report = diff(tmp_path, str(a), str(b))
    assert code == 1, out + err
    assert report is not None and report["divergent_signal"] == "epoch"
    entry = next(e for e in report["finished"]["checkpoints"]["entries"] if e["key"] == "epoch")
    assert entry["kind"] == "value" and entry["compared_values"] == [3, 4]


@pytest.mark.slow  # a repro-check process that loads torch, ~3 s
def test_folders_are_matched_file_by_file(tmp_path: Path) -> None:
    for side in ("a", "b"):
        save(tmp_path / side / "model-00001-of-00002.bin", state()["model"])
        save(tmp_path / side / "model-00002-of-00002.bin", {"head.weight": torch.ones(2)})
    save(tmp_path / "a" / "optimizer.pt", state()["optimizer"])
    (tmp_path / "a" / "config.json").write_text("{}")
    code, out, err, report = diff(tmp_path, str(tmp_path / "a"), str(tmp_path / "b"))
    assert code == 1, out + err
    assert report is not None
    ck = report["finished"]["checkpoints"]
    assert ck["format"] == "checkpoint-folder" and ck["files_only_in_a"] == ["optimizer.pt"]
    assert ck["files"] == ["model-00001-of-00002.bin", "model-00002-of-00002.bin"]
    assert "model-00002-of-00002.bin:head.weight" in [e["key"] for e in ck["entries"]]
    (tmp_path / "a" / "optimizer.pt").unlink()
    code, out, err, report = diff(tmp_path, str(tmp_path / "a"), str(tmp_path / "b"))
    assert code == 0, out + err


def test_a_checkpoint_weights_only_refuses_is_never_unpickled(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    a = save(tmp_path / "a.pt", state())
    b = save(tmp_path / "b.pt", {"model": state()["model"], "hook": Planted(str(marker))})
    line = one_line_error(*diff(tmp_path, str(a), str(b))[:3])
    assert str(b) in line and "weights_only=True" in line and "refuses" in line, line
    assert not marker.exists(), "the checkpoint's pickled code ran"


class Planted:
    """An object whose unpickling writes a file: what weights_only must never run."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


@pytest.mark.slow  # a repro-check process that loads torch, ~3 s
@pytest.mark.parametrize("content", [b"", b"not a checkpoint", b"PK\x03\x04broken zip"])
def test_a_file_that_is_no_checkpoint_is_refused_in_one_line(tmp_path: Path,
                                                             content: bytes) -> None:
    a = save(tmp_path / "a.pt", state())
    b = tmp_path / "b.pt"
    b.write_bytes(content)
    line = one_line_error(*diff(tmp_path, str(a), str(b))[:3])
    assert str(b) in line and "cannot read it as a torch.save checkpoint" in line, line


def test_a_checkpoint_and_a_folder_are_different_formats(tmp_path: Path) -> None:
    a = save(tmp_path / "a.pt", state())
    save(tmp_path / "b" / "a.pt", state())
    line = one_line_error(*diff(tmp_path, str(a), str(tmp_path / "b"))[:3])
    assert "different formats" in line and "checkpoint folder" in line


@pytest.mark.slow  # a repro-check process that loads torch, ~3 s
def test_the_other_outputs_show_the_verdict(tmp_path: Path) -> None:
    """JUnit, the GitHub step summary and annotation carry the first difference."""
    from ..conftest import cli_env, repro_check_cli

    a = save(tmp_path / "a.pt", state())
    changed = copy.deepcopy(state())
    changed["model"]["0.bias"][0] = 1.0
    b = save(tmp_path / "b.pt", changed)
    summary = tmp_path / "summary.md"
    env = cli_env(GITHUB_ACTIONS="true", GITHUB_STEP_SUMMARY=str(summary))
    proc = repro_check_cli(["diff", str(a), str(b), "--junit", str(tmp_path / "j.xml")],
                           cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    junit = (tmp_path / "j.xml").read_text()
    assert 'failures="1"' in junit and "key model.0.bias" in junit
    assert '<property name="saved_tensors_compared" value="5" />' in junit
    assert "::error" in proc.stdout and "key model.0.bias" in proc.stdout
    text = summary.read_text()  # Markdown: the key's dots escaped
    assert "❌ differs" in text and "model\\.0\\.bias" in text, text


def test_large_tensors_are_compared_a_chunk_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    import math

    from repro_check.finished import checkpoints as ck
    from repro_check.trace.values import Tolerance

    monkeypatch.setattr(ck, "CHUNK", 3)
    a = torch.arange(10, dtype=torch.float32)
    b = a.clone()
    b[2] += 0.5
    b[7] = float("nan")  # one side NaN: the largest difference, whatever the others
    e = ck.compare_tensors("w", a, b, Tolerance())
    assert e.status == "differs" and e.differing_elements == 2
    assert e.max_abs_diff is not None and math.isnan(e.max_abs_diff)
    c = a.clone()
    c[8] += 1e-3
    e = ck.compare_tensors("w", a, c, Tolerance(atol=1e-2))
    assert e.status == "within_tolerance" and e.max_abs_diff == pytest.approx(1e-3, rel=1e-2)
    assert ck.compare_tensors("w", a, c, Tolerance(atol=1e-4)).status == "differs"
