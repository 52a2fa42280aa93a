"""What TensorBoard, Lightning and the Hugging Face Trainer log, recorded and compared as metrics
of unmodified scripts (fixtures/metrics/). None of these is a dependency of repro-check: each
test is skipped when its package is missing (``make test-frameworks`` installs them)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ...conftest import FIXTURES, run_cli

METRICS = FIXTURES / "metrics"

pytestmark = pytest.mark.frameworks

#: why a test here skips: make test-frameworks (and so .ci/run) installs what they need
FRAMEWORK_MISSING = "{} is not installed (make test-frameworks installs it and runs these tests)"


def test_tensorboard_scalars_are_metrics(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard", reason=FRAMEWORK_MISSING.format("tensorboard"))
    res = run_cli(str(METRICS / "tensorboard_log.py"), tmp=tmp_path / "same")
    r = res.report
    assert res.code == 0 and r is not None, res.stdout + res.stderr
    # the last value of each tag; text is no metric; the timing tags (steps per second, a
    # time) are recorded and shown, listed as not compared
    assert set(r["metrics"][0]) == {"tb:train/loss", "tb:eval/accuracy", "tb:eval/error",
                                    "tb:charts/SPS", "tb:eval/runtime"}
    assert r["metrics"][0]["tb:charts/SPS"] != r["metrics"][1]["tb:charts/SPS"]
    assert r["metrics_compared"] == 3 and r["metrics_skipped"] == ["tb:charts/SPS",
                                                                    "tb:eval/runtime"]
    assert "Not compared, as timing or memory figures: tb:charts/SPS" in " ".join(res.stdout.split())
    assert r["metrics"][0]["tb:eval/accuracy"] + r["metrics"][0]["tb:eval/error"] == \
        pytest.approx(1.0)
    # asked for by name, the steps per second are compared (and differ)
    clock = run_cli(str(METRICS / "tensorboard_log.py"), "--atol", "metric:tb:charts/SPS=0", "--",
                    "--clock-eval", tmp=tmp_path / "clock")
    c = clock.report
    assert clock.code == 1 and c is not None, clock.stdout + clock.stderr
    assert c["first_divergent_step"] is None and c["cause"] == "metrics"
    assert {d["signal"] for d in c["metric_divergences"]} == {
        "metric:tb:eval/accuracy", "metric:tb:eval/error", "metric:tb:charts/SPS"}
    assert "the training is reproducible. Only final metrics differ" in " ".join(
        clock.stdout.split())


def test_lightning_self_log_is_compared(tmp_path: Path) -> None:
    if importlib.util.find_spec("lightning") is None:
        pytest.importorskip("pytorch_lightning", reason=FRAMEWORK_MISSING.format("pytorch_lightning"))
    res = run_cli(str(METRICS / "lightning_fit.py"), tmp=tmp_path, timeout=600)
    r = res.report
    assert res.code == 0 and r is not None, res.stdout + res.stderr
    lightning = {n for n in r["metrics"][0] if n.startswith("lightning:")}
    assert lightning == {"lightning:train_loss", "lightning:val_loss", "lightning:val_acc",
                         "lightning:test_loss", "lightning:test_acc"}
    assert r["metrics"][0] == r["metrics"][1] and r["steps"] == [4, 4]
    assert r["metrics_compared"] == len(r["metrics"][0])


def test_hf_trainer_logs_and_evaluation_are_compared(tmp_path: Path) -> None:
    pytest.importorskip("transformers", reason=FRAMEWORK_MISSING.format("transformers"))
    pytest.importorskip("accelerate", reason=FRAMEWORK_MISSING.format("accelerate"))
    res = run_cli(str(METRICS / "hf_trainer.py"), tmp=tmp_path, timeout=600)
    r = res.report
    assert res.code == 0 and r is not None, res.stdout + res.stderr
    names = set(r["metrics"][0])
    assert {"hf:loss", "hf:grad_norm", "hf:learning_rate", "hf:epoch", "hf:train_loss",
            "hf:eval_loss"} <= names
    # the Trainer's timing figures are recorded and shown, never compared
    timing = {n for n in names if "runtime" in n or "per_second" in n}
    assert {"hf:train_runtime", "hf:eval_runtime"} <= timing
    assert timing <= set(r["metrics_skipped"])
    assert r["metrics_compared"] == len(names) - len(set(r["metrics_skipped"]))
    # the Trainer also prints its logs: {'loss': '0.9445', ...}
    assert {"printed:loss", "printed:train_loss", "printed:eval_loss"} <= names

    def compared(metrics: dict[str, object]) -> dict[str, object]:
        return {n: v for n, v in metrics.items() if n not in timing}

    assert compared(r["metrics"][0]) == compared(r["metrics"][1]) and r["steps"] == [4, 4]


def test_safetensors_saves_are_compared_tensor_by_tensor(tmp_path: Path) -> None:
    """fixtures/saved/safetensors_save.py: save_file, safetensors.numpy's save_file and
    save_model (which calls save_file: one save), each compared; its twin agrees."""
    pytest.importorskip("safetensors.torch", reason=FRAMEWORK_MISSING.format("safetensors"))
    script = f"{FIXTURES / 'saved' / 'safetensors_save.py'}:main"
    res = run_cli(script, "--", "--differ", tmp=tmp_path / "differ", cwd=tmp_path)
    r = res.report
    assert res.code == 1 and r is not None, res.stdout + res.stderr
    assert (r["divergent_signal"], r["first_divergent_step"], r["cause"]) == (
        "saved:model.safetensors:0.weight", None, "saved")
    files = [(f["saver"], f["path"].rsplit("/", 1)[-1], f["agrees"],
              f["first_difference"]["key"]) for f in r["saved"] if f["kind"] == "file"]
    assert files == [("safetensors.torch.save_file", "model.safetensors", False, "0.weight"),
                     ("safetensors.numpy.save_file", "weights.npz.st", False, "0.weight"),
                     ("safetensors.torch.save_model", "whole.safetensors", False, "2.bias")]
    twin = run_cli(script, tmp=tmp_path / "twin", cwd=tmp_path)
    t = twin.report
    assert twin.code == 0 and t is not None, twin.stdout + twin.stderr
    assert all(f["agrees"] for f in t["saved"]) and t["saved_tensors_compared"] == 16


def test_a_lightning_checkpoint_is_compared_and_its_twin_agrees(tmp_path: Path) -> None:
    """fixtures/saved/lightning_ema.py: ModelCheckpoint's save (a torch.save into a buffer
    Lightning then writes) is named by its file; an EMA buffer that differs is found there."""
    if importlib.util.find_spec("lightning") is None:
        pytest.importorskip("pytorch_lightning", reason=FRAMEWORK_MISSING.format("pytorch_lightning"))
    script = f"{FIXTURES / 'saved' / 'lightning_ema.py'}:main"
    res = run_cli(script, "--", "--differ", tmp=tmp_path / "differ", cwd=tmp_path, timeout=600)
    r = res.report
    assert res.code == 1 and r is not None, res.stdout + res.stderr
    assert r["steps_compared"] == 4 and r["first_divergent_step"] is None
    assert r["divergent_signal"] == "saved:epoch=0-step=4.ckpt:state_dict.ema"
    ckpt = r["saved"][0]
    assert ckpt["saver"] == "torch.save (lightning)" and ckpt["step"] == 4
    assert ckpt["path"].endswith("checkpoints/epoch=0-step=4.ckpt")
    twin = run_cli(script, tmp=tmp_path / "twin", cwd=tmp_path, timeout=600)
    t = twin.report
    assert twin.code == 0 and t is not None, twin.stdout + twin.stderr
    assert all(f["agrees"] for f in t["saved"]) and t["saved_tensors_compared"] > 0


def test_the_hf_trainer_checkpoints_are_compared_file_by_file(tmp_path: Path) -> None:
    """fixtures/resume/hf_resume.py (checkpoint-4, -8, -12): every file of every checkpoint is
    compared (weights, optimizer, scheduler, RNG states) and agrees."""
    pytest.importorskip("transformers", reason=FRAMEWORK_MISSING.format("transformers"))
    res = run_cli(str(FIXTURES / "resume" / "hf_resume.py"), "--", "--out",
                  str(tmp_path / "out"), tmp=tmp_path / "check", cwd=tmp_path, timeout=600)
    r = res.report
    assert res.code == 0 and r is not None, res.stdout + res.stderr
    files = [f for f in r["saved"] if f["kind"] == "file"]
    names = {f["path"].rsplit("/", 1)[-1] for f in files}
    assert {"model.safetensors", "optimizer.pt", "rng_state.pth"} <= names
    assert sorted({f["step"] for f in files}) == [4, 8, 12] and all(f["agrees"] for f in files)
    assert r["saved_tensors_compared"] > 100
