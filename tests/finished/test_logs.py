"""Scalar logs of two finished runs through ``repro-check diff``: CSV, JSONL, the HF Trainer's
trainer_state.json and Lightning's metrics.csv, each written here in the shape its library
writes; what differs is named by step and scalar, and a file that is not a log is refused in
one line (exit 2)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from repro_check.compare.steps import Policy
from repro_check.finished.logs import ScalarLog, compare_logs
from repro_check.trace.values import Tolerance

from ..conftest import run_cli

LOSSES = [2.302585, 1.9, 1.51, 1.2, 0.98, 0.81]


def next_up(x: float) -> float:
    """The next float64 above ``x`` (one ulp)."""
    return struct.unpack(">d", struct.pack(">q", struct.unpack(">q", struct.pack(">d", x))[0] + 1))[0]


def write_csv(path: Path, losses: list[float], header: str = "step,loss,lr") -> Path:
    rows = [header] + [f"{i},{loss!r},0.1" for i, loss in enumerate(losses, 1)]
    path.write_text("\n".join(rows) + "\n")
    return path


def write_jsonl(path: Path, losses: list[float], step: bool = True) -> Path:
    path.write_text("".join(json.dumps({**({"step": i * 10} if step else {}), "loss": loss,
                                        "grad_norm": 1.0}) + "\n"
                            for i, loss in enumerate(losses, 1)))
    return path


def write_trainer_state(folder: Path, losses: list[float], runtime: float = 12.5) -> Path:
    """trainer_state.json as transformers writes it: the logged losses, an eval entry, and the
    final train summary with its timing figures."""
    history = [{"epoch": round(i / len(losses), 4), "grad_norm": 0.5 + i, "learning_rate": 5e-05,
                "loss": loss, "step": i * 5} for i, loss in enumerate(losses, 1)]
    history.append({"epoch": 1.0, "eval_loss": losses[-1] + 0.1, "eval_runtime": runtime / 10,
                    "eval_samples_per_second": 100.0 / runtime, "step": len(losses) * 5})
    history.append({"epoch": 1.0, "step": len(losses) * 5, "total_flos": 1234.0,
                    "train_loss": sum(losses) / len(losses), "train_runtime": runtime,
                    "train_samples_per_second": 80.0 / runtime})
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "trainer_state.json"
    state = {"best_metric": None, "epoch": 1.0, "global_step": len(losses) * 5,
             "log_history": history, "max_steps": len(losses) * 5, "num_train_epochs": 1}
    path.write_text(json.dumps(state, indent=2, sort_keys=True))
    return path


def write_lightning(version: Path, losses: list[float]) -> Path:
    """A CSVLogger version folder: metrics.csv with train rows and an epoch-end validation row,
    each leaving the other's cells empty, and hparams.yaml."""
    version.mkdir(parents=True, exist_ok=True)
    rows = ["epoch,step,train_loss,val_loss"]
    rows += [f"0,{i - 1},{loss!r}," for i, loss in enumerate(losses, 1)]
    rows.append(f"0,{len(losses) - 1},,{losses[-1] + 0.1!r}")
    (version / "metrics.csv").write_text("\n".join(rows) + "\n")
    (version / "hparams.yaml").write_text("lr: 0.1\n")
    return version


def diff(tmp: Path, *args: str) -> tuple[int, str, str, dict | None]:
    res = run_cli("diff", *args, tmp=tmp / "out", cwd=tmp, traces=False, timeout=120)
    return res.code, res.stdout, res.stderr, res.report


def one_line_error(code: int, out: str, err: str) -> str:
    assert code == 2, out + err
    assert "Traceback" not in out + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_identical_csv_logs_are_the_same(tmp_path: Path) -> None:
    a = write_csv(tmp_path / "a.csv", LOSSES)
    b = write_csv(tmp_path / "b.csv", LOSSES)
    code, out, err, report = diff(tmp_path, str(a), str(b))
    assert code == 0, out + err
    assert "SAME" in out
    assert report is not None and report["verdict"] == "same" and report["reproducible"]
    logs = report["finished"]["logs"]
    assert [s["name"] for s in logs["scalars"]] == ["loss", "lr"]
    assert all(s["steps_compared"] == len(LOSSES) and s["same"] for s in logs["scalars"])
    assert report["finished"]["format"] == "csv" and report["first_divergent_step"] is None
    assert report["evidence"]["steps"] == len(LOSSES) and report["evidence"]["metrics"] == 2


def test_one_ulp_in_a_csv_log_names_its_step_and_scalar(tmp_path: Path) -> None:
    changed = list(LOSSES)
    changed[3] = next_up(changed[3])
    a = write_csv(tmp_path / "a.csv", LOSSES)
    b = write_csv(tmp_path / "b.csv", changed)
    code, out, err, report = diff(tmp_path, str(a), str(b))
    assert code == 1, out + err
    assert report is not None
    assert report["first_divergent_step"] == 4 and report["divergent_signal"] == "loss"
    loss = report["finished"]["logs"]["scalars"][0]
    assert loss["first_divergent_step"] == 4 and loss["first_reason"] == "value"
    assert loss["a_value"] == LOSSES[3] and loss["b_value"] == changed[3]
    assert loss["max_abs_step"] == 4 and loss["max_abs_diff"] == changed[3] - LOSSES[3]
    assert loss["final_abs_diff"] == 0.0 and loss["differing_steps"] == 1
    assert "First difference: step 4, scalar loss" in out and "DIFFERS" in out
    # within a tolerance that covers it (a log's scalar is metric:NAME) the logs agree
    code, out, err, report = diff(tmp_path, str(a), str(b), "--atol", "metric:loss=1e-9")
    assert code == 0, out + err


def test_a_shorter_log_differs_at_its_first_missing_step(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", LOSSES)
    b = write_jsonl(tmp_path / "b.jsonl", LOSSES[:4])
    code, out, err, report = diff(tmp_path, str(a), str(b))
    assert code == 1, out + err
    assert report is not None and report["finished"]["format"] == "jsonl"
    assert report["first_divergent_step"] == 50
    loss = report["finished"]["logs"]["scalars"][0]
    assert loss["first_reason"] == "only_in_a" and loss["steps_only_in_a"] == 2
    assert "logged by a.jsonl only" in out


def test_jsonl_without_a_step_key_is_numbered_by_line(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", LOSSES, step=False)
    changed = LOSSES[:2] + [0.0] + LOSSES[3:]
    b = write_jsonl(tmp_path / "b.jsonl", changed, step=False)
    code, out, err, report = diff(tmp_path, str(a), str(b))
    assert code == 1 and report is not None and report["first_divergent_step"] == 3


def test_trainer_state_compares_log_history_by_step_and_leaves_out_timings(
        tmp_path: Path) -> None:
    a = write_trainer_state(tmp_path / "run1" / "checkpoint-30", LOSSES, runtime=12.5)
    b = write_trainer_state(tmp_path / "run2" / "checkpoint-30", LOSSES, runtime=13.75)
    code, out, err, report = diff(tmp_path, str(a), str(b))
    assert code == 0, out + err  # only the timing figures differ
    assert report is not None and report["finished"]["format"] == "trainer-state"
    logs = report["finished"]["logs"]
    names = [s["name"] for s in logs["scalars"]]
    assert {"loss", "epoch", "grad_norm", "learning_rate", "eval_loss", "train_loss"} <= set(names)
    assert {"train_runtime", "eval_runtime", "train_samples_per_second"} <= set(
        logs["scalars_skipped"])
    changed = list(LOSSES)
    changed[1] = next_up(changed[1])
    c = write_trainer_state(tmp_path / "run3", changed)
    code, out, err, report = diff(tmp_path, str(a), str(c))
    assert code == 1, out + err
    # the loss logged at step 10 (the second entry) differs first; train_loss (the mean) too
    assert report is not None and report["first_divergent_step"] == 10
    assert report["divergent_signal"] == "loss"


def test_lightning_version_folders_merge_rows_by_step(tmp_path: Path) -> None:
    a = write_lightning(tmp_path / "a" / "lightning_logs" / "version_0", LOSSES)
    changed = list(LOSSES)
    changed[-1] = next_up(changed[-1])
    b = write_lightning(tmp_path / "b" / "lightning_logs" / "version_0", changed)
    code, out, err, report = diff(tmp_path, str(a), str(a / "metrics.csv"))
    assert code == 0, out + err
    assert report is not None and report["finished"]["format"] == "lightning"
    scalars = {s["name"]: s for s in report["finished"]["logs"]["scalars"]}
    assert scalars["train_loss"]["steps_compared"] == len(LOSSES)
    assert scalars["val_loss"]["steps_compared"] == 1
    code, out, err, report = diff(tmp_path, str(a), str(b))
    assert code == 1, out + err
    assert report is not None and report["first_divergent_step"] == len(LOSSES) - 1
    assert report["divergent_signal"] == "train_loss"


def test_a_scalar_on_one_side_only_differs(tmp_path: Path) -> None:
    a = write_csv(tmp_path / "a.csv", LOSSES)
    b = write_csv(tmp_path / "b.csv", LOSSES, header="step,loss,momentum")
    code, out, err, report = diff(tmp_path, str(a), str(b))
    assert code == 1, out + err
    assert report is not None
    logs = report["finished"]["logs"]
    assert logs["scalars_only_in_a"] == ["lr"] and logs["scalars_only_in_b"] == ["momentum"]
    assert "Logged by a.csv only: lr" in out


@pytest.mark.parametrize("name,text,expected", [
    ("a.csv", "", "expected a csv metrics file with a header row"),
    ("a.csv", "step,name\n1,abc\n", "no numeric values found"),
    ("a.csv", "step,loss\nfirst,1.0\n", "expected a whole number"),
    ("a.jsonl", '{"loss": 1.0}\n[1, 2]\n', "line 2 is not a JSON object"),
    ("a.jsonl", '{"loss": 1.0}\n{oops\n', "line 2 is not JSON"),
    ("trainer_state.json", '{"global_step": 3}', "no log_history list"),
    ("trainer_state.json", "{not json", "cannot read it as JSON"),
    ("trainer_state.json", '{"log_history": [{"loss": 1.0}]}', "has no step"),
])
def test_a_malformed_log_is_refused_in_one_line(tmp_path: Path, name: str, text: str,
                                                expected: str) -> None:
    bad = tmp_path / "bad" / name
    bad.parent.mkdir()
    bad.write_text(text)
    good = {"a.csv": lambda: write_csv(tmp_path / "good.csv", LOSSES),
            "a.jsonl": lambda: write_jsonl(tmp_path / "good.jsonl", LOSSES),
            "trainer_state.json": lambda: write_trainer_state(tmp_path / "good", LOSSES)}[name]()
    line = one_line_error(*diff(tmp_path, str(good), str(bad))[:3])
    assert str(bad) in line and expected in line, line


def test_logs_of_different_formats_are_a_usage_error(tmp_path: Path) -> None:
    a = write_csv(tmp_path / "a.csv", LOSSES)
    b = write_jsonl(tmp_path / "b.jsonl", LOSSES)
    line = one_line_error(*diff(tmp_path, str(a), str(b))[:3])
    assert "different formats" in line and "CSV metrics file" in line and "JSONL" in line
    # --format reads both as one format: a JSONL file is no CSV log
    code, out, err, _ = diff(tmp_path, str(a), str(b), "--format", "csv")
    assert code == 2 and "Traceback" not in err


def test_a_trace_and_a_log_are_of_different_formats(tmp_path: Path) -> None:
    from ..synthetic_traces import write_trace

    trace = write_trace(tmp_path / "t.jsonl", [1.0, 0.5])
    a = write_csv(tmp_path / "a.csv", LOSSES)
    line = one_line_error(*diff(tmp_path, str(trace), str(a))[:3])
    assert "different formats" in line and "repro-check trace" in line


def test_tensorboard_without_the_package_says_how_to_get_it(tmp_path: Path) -> None:
    try:  # the default venv lacks tensorboard, as the fast CI tier's does
        import tensorboard  # noqa: F401
        pytest.skip("tensorboard is installed here")
    except ImportError:
        pass
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "events.out.tfevents.1.host").write_bytes(b"")
    line = one_line_error(*diff(tmp_path, str(tmp_path / "a"), str(tmp_path / "b"))[:3])
    assert line.endswith("reading TensorBoard logs needs the tensorboard package "
                         "(pip install tensorboard)"), line


def test_a_wandb_run_that_is_no_run_file_is_one_line(tmp_path: Path) -> None:
    """Without wandb installed the line says to install it (the records' schema is its); with
    it, a file without W&B's header is named as not a run file (make test-frameworks reads
    real runs: tests/finished/test_frameworks.py)."""
    import importlib.util

    for side in ("a", "b"):
        run = tmp_path / side / "offline-run-20240101_000000-abc"
        run.mkdir(parents=True)
        (run / "run-abc.wandb").write_bytes(b"\x00")
    line = one_line_error(*diff(tmp_path, *(str(tmp_path / s / "offline-run-20240101_000000-abc")
                                            for s in ("a", "b")))[:3])
    if importlib.util.find_spec("wandb") is None:
        assert line.endswith("reading W&B offline runs needs the wandb package (pip install "
                             "wandb)"), line
    else:
        assert "run-abc.wandb: not a W&B run file" in line, line


def test_compare_logs_takes_the_lowest_first_step_and_nan_equal_to_nan() -> None:
    a, b = ScalarLog("a", "csv"), ScalarLog("b", "csv")
    for step in range(1, 5):
        a.put("acc", step, 0.5)
        b.put("acc", step, 0.5 if step < 4 else 0.25)
        a.put("loss", step, float("nan") if step == 2 else 1.0)
        b.put("loss", step, float("nan") if step == 2 else (1.0 if step < 3 else 2.0))
    out = compare_logs(a, b, Policy(Tolerance()))
    assert out.first_divergent_step == 3 and out.first_divergent_scalar == "loss"
    loss = out.scalars[1]
    assert loss.max_abs_diff == 1.0 and loss.max_abs_step == 3 and loss.final_abs_diff == 1.0
    assert [d for _, d in loss.drift] == [0.0, 0.0, 1.0, 1.0]
    assert out.to_dict()["first_divergent_scalar"] == "loss"


def test_the_html_page_shows_the_verdict_and_first_difference(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="--report needs matplotlib (the report extra)")
    changed = list(LOSSES)
    changed[1] = next_up(changed[1])
    a = write_csv(tmp_path / "a.csv", LOSSES)
    b = write_csv(tmp_path / "b.csv", changed)
    page = tmp_path / "page.html"
    code, out, err, _ = diff(tmp_path, str(a), str(b), "--report", str(page))
    assert code == 1, out + err
    html = page.read_text()
    assert 'id="verdict">DIFFERS<' in html and "Finished runs compared" in html
    assert "step 2, scalar loss" in html and "nothing run · exact bits" in html
