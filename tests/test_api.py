"""The public Python API end to end: check, record, verify, diff and log_metric.

Every assertion goes through ``repro_check.<function>``, the Report's public properties, its
documented JSON keys and the trace files on disk (docs/trace-format.md).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import repro_check

from .api_targets import (
    DIVERGE_AT,
    PRINTED,
    SEED,
    STEPS,
    TINY,
    TINY_ARGS,
    Golden,
)
from .synthetic_traces import LOSSES, read_lines, steps_of, write_trace

# the shared runs (same_check, golden, verify_same, ...): computed once a session
pytest_plugins = ["tests.api_runs"]

PUBLIC_KEYS = {"reproducible", "first_divergent_step", "divergent_signal", "steps", "metrics",
               "runs", "seed", "error"}


def traces_of(report: Any) -> list[str]:
    return [r["trace"] for r in report.to_dict()["run_results"]]


def loss_bits(path: str | Path) -> list[str | None]:
    return [(s["signals"].get("loss") or {}).get("bits") for s in steps_of(path)]


# ---- check ---------------------------------------------------------------------------------------
def test_check_of_a_seeded_script_is_reproducible(same_check: Any) -> None:
    r = same_check
    assert r.reproducible is True and int(r.exit_code) == 0
    assert r.first_divergent_step is None and r.divergent_signal is None
    d = r.to_dict()
    assert PUBLIC_KEYS <= set(d)
    assert d["reproducible"] is True and d["error"] is None and d["replay"] is None
    assert d["runs"] == 2 and d["seed"] == SEED and d["exit_code"] == 0
    # the steps the report counts are the step lines of each run's trace
    assert d["steps"] == [len(steps_of(p)) for p in traces_of(r)]
    assert d["steps"][0] > 0


def test_log_metric_inside_a_run_becomes_the_final_metric(same_check: Any) -> None:
    metrics = same_check.to_dict()["metrics"]
    assert len(metrics) == 2 and metrics[0] == metrics[1]
    # printed_metric.py logs "accuracy" (a fraction) and a string that must be ignored; it
    # also prints the accuracy, which repro-check picks from its output
    assert set(metrics[0]) == {"accuracy", "printed:accuracy"}
    assert 0.0 <= metrics[0]["accuracy"] <= 1.0
    assert metrics[0]["printed:accuracy"] == metrics[0]["accuracy"]
    for trace in traces_of(same_check):
        logged, shown = [x for x in read_lines(trace) if "metrics" in x]
        assert set(logged["metrics"]) == {"accuracy"}
        assert logged["metrics"]["accuracy"]["value"] == metrics[0]["accuracy"]
        assert set(shown["metrics"]) == {"printed:accuracy"}


def test_log_metric_outside_repro_check_does_nothing_and_returns_its_value() -> None:
    value = object()
    assert repro_check.log_metric("accuracy", value) is value  # it can wrap an expression
    assert repro_check.log_metric("ignored", "not a number") == "not a number"


def test_check_writes_one_documented_trace_per_run(same_check: Any) -> None:
    paths = traces_of(same_check)
    assert len(paths) == 2 and len(set(paths)) == 2
    for run, path in enumerate(paths, 1):
        lines = read_lines(path)
        head = lines[0]
        assert head["format"] == "repro-check-trace" and head["version"] == 2
        assert head["header"]["run"] == run and head["header"]["seed"] == SEED
        assert head["header"]["target"] == PRINTED
        assert {"python", "torch", "threads", "device", "target_sha256"} <= \
            set(head["header"]["environment"])
        steps = [x["step"] for x in lines if "step" in x]
        assert steps == list(range(1, len(steps) + 1))
        assert "end" in lines[-1] and lines[-1]["end"]["status"] == "completed"
    assert loss_bits(paths[0]) == loss_bits(paths[1])


def test_check_finds_the_planted_divergence(diverging_check: Any) -> None:
    r = diverging_check
    assert r.reproducible is False and int(r.exit_code) == 1
    assert r.first_divergent_step == DIVERGE_AT and r.divergent_signal == "loss"
    d = r.to_dict()
    assert d["first_divergent_step"] == DIVERGE_AT and d["divergent_signal"] == "loss"
    assert d["steps"] == [STEPS, STEPS] and d["error"] is None
    div = d["divergence"]
    assert div["abs_diff"] > 0
    # every step after the first divergent one differs too: the parameters have moved apart
    assert div["later_divergent_steps"] == STEPS - DIVERGE_AT


def test_the_divergence_is_where_the_traces_on_disk_differ(diverging_check: Any) -> None:
    a, b = (loss_bits(p) for p in traces_of(diverging_check))
    first = next(i for i, (x, y) in enumerate(zip(a, b), 1) if x != y)
    assert first == diverging_check.first_divergent_step
    # the report carries both values of the first divergent step, exactly as recorded
    div = diverging_check.to_dict()["divergence"]
    bits = {v.get("bits") for v in div.values() if isinstance(v, dict)}
    assert bits == {a[first - 1], b[first - 1]}


def test_the_replay_line_names_the_check_up_to_the_divergence(diverging_check: Any) -> None:
    replay = diverging_check.replay
    assert replay == diverging_check.to_dict()["replay"]
    assert replay.startswith("repro-check ") and TINY in replay
    assert f"--seed {SEED}" in replay and f"--max-steps {DIVERGE_AT}" in replay
    assert replay.endswith(f"-- {' '.join(TINY_ARGS)} --diverge-at {DIVERGE_AT}")


# ---- record and verify ---------------------------------------------------------------------------
def test_record_writes_a_golden_trace(golden: Golden) -> None:
    assert int(golden.report.exit_code) == 0 and golden.data["error"] is None
    assert golden.path.is_file()
    lines = read_lines(golden.path)
    head = lines[0]
    assert head["format"] == "repro-check-trace" and head["version"] == 2
    assert head["header"]["seed"] == SEED and head["header"]["args"] == TINY_ARGS
    assert head["header"]["golden"]["runs"] == 1 and head["header"]["golden"]["band"] is False
    assert "end" in lines[-1]
    # one run: the golden holds exactly that run's steps and metrics
    (run_trace,) = traces_of(golden.report)
    assert loss_bits(golden.path) == loss_bits(run_trace) and len(loss_bits(run_trace)) == STEPS
    (metrics,) = [x["metrics"] for x in lines if "metrics" in x]
    assert set(metrics) == {"mse"}
    assert golden.data["metrics"] == [{"mse": metrics["mse"]["value"]}]


def test_verify_against_the_golden_passes_with_its_settings(verify_same: Any,
                                                            golden: Golden) -> None:
    r = verify_same
    assert r.reproducible is True and int(r.exit_code) == 0
    assert r.first_divergent_step is None and r.divergent_signal is None
    d = r.to_dict()
    assert PUBLIC_KEYS <= set(d)
    # nothing was given but the golden: its target, seed and arguments were used
    assert d["seed"] == SEED and d["steps"] == [STEPS, STEPS] and d["args"] == TINY_ARGS
    assert d["metrics"][0] == d["metrics"][1] == golden.data["metrics"][0]
    assert d["replay"] is None


def test_verify_with_another_seed_fails_at_step_1(verify_other_seed: Any) -> None:
    r = verify_other_seed
    assert r.reproducible is False and int(r.exit_code) == 1
    # a different seed gives torch's stream another state before the first step
    assert r.first_divergent_step == 1 and r.divergent_signal == "rng.torch"
    d = r.to_dict()
    assert d["seed"] == SEED + 1 and d["error"] is None
    replay = d["replay"]
    assert replay.startswith(f"repro-check verify {TINY} --golden ")
    assert f"--seed {SEED + 1}" in replay and "--max-steps 1" in replay


def test_record_of_a_failing_target_writes_no_golden(failed_record: tuple[Any, Path]) -> None:
    report, path = failed_record
    assert int(report.exit_code) == 3 and not report.reproducible
    assert "planted failure at step 2" in report.error
    assert not path.exists()
    d = report.to_dict()
    assert d["exit_code"] == 3 and d["error"] == report.error
    assert d["steps"] == [1]  # step 1 finished before the target raised
    assert d["run_results"][0]["status"] != "completed"


# ---- diff ----------------------------------------------------------------------------------------
def test_diff_of_the_diverging_runs_traces(diverging_check: Any) -> None:
    a, b = traces_of(diverging_check)
    r = repro_check.diff(a, b)
    assert r.reproducible is False and int(r.exit_code) == 1
    assert r.first_divergent_step == diverging_check.first_divergent_step
    assert r.divergent_signal == diverging_check.divergent_signal
    assert r.to_dict()["steps"] == [STEPS, STEPS]


def test_diff_of_a_golden_and_a_run_of_the_same_code(golden: Golden, verify_same: Any) -> None:
    run_trace = traces_of(verify_same)[1]
    r = repro_check.diff(golden.path, run_trace)
    assert r.reproducible is True and int(r.exit_code) == 0 and r.replay is None
    assert r.to_dict()["metrics"] == golden.data["metrics"] * 2


def test_diff_of_a_trace_with_itself_is_the_same(tmp_path: Path) -> None:
    a = write_trace(tmp_path / "a.jsonl", LOSSES, metrics={"acc": 0.75})
    shutil.copyfile(a, tmp_path / "b.jsonl")
    r = repro_check.diff(a, tmp_path / "b.jsonl")
    assert r.reproducible and r.exit_code == 0
    d = json.loads(r.to_json())
    assert d == r.to_dict()
    assert d["steps"] == [len(LOSSES)] * 2 and d["metrics"] == [{"acc": 0.75}] * 2


# ---- usage errors --------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    ({"runs": 0}, "--runs"),
    ({"seed": -1}, "--seed"),
    ({"seed": 2**32}, "--seed"),
    ({"max_steps": 0}, "--max-steps"),
    ({"timeout": 0}, "--timeout"),
    ({"threads": 0}, "--threads"),
    ({"atol": -1.0}, "atol"),
    ({"without": ["nump"]}, "numpy"),
])
def test_check_rejects_bad_arguments_before_any_run(tmp_path: Path, kwargs: dict[str, Any],
                                                    message: str) -> None:
    with pytest.raises(repro_check.UsageError, match=message) as info:
        repro_check.check(TINY, trace_dir=tmp_path / "traces", **kwargs)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "traces").exists()  # nothing ran


def test_a_target_that_cannot_be_resolved_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("def main():\n    return 1.0\n")
    missing = f"{tmp_path / 'train.py'}:mian"
    with pytest.raises(repro_check.UsageError, match="did you mean 'main'"):
        repro_check.check(missing, trace_dir=tmp_path / "traces")
    with pytest.raises(repro_check.UsageError, match="no_such_file.py"):
        repro_check.check(str(tmp_path / "no_such_file.py"), trace_dir=tmp_path / "traces")
    with pytest.raises(repro_check.UsageError, match="mian"):
        repro_check.record(missing, tmp_path / "golden.json", trace_dir=tmp_path / "traces")
    assert not (tmp_path / "golden.json").exists()
    assert not list(tmp_path.glob("traces/**/run-*.jsonl"))  # nothing ran


def test_record_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(repro_check.UsageError, match="--runs"):
        repro_check.record(TINY, tmp_path / "g.json", runs=0, trace_dir=tmp_path / "t")
    with pytest.raises(repro_check.UsageError, match="--seed"):
        repro_check.record(TINY, tmp_path / "g.json", seed=-3, trace_dir=tmp_path / "t")
    assert not (tmp_path / "g.json").exists()


def test_verify_rejects_a_golden_that_is_not_a_complete_trace(tmp_path: Path) -> None:
    with pytest.raises(repro_check.UsageError, match="no such file"):
        repro_check.verify(TINY, tmp_path / "missing.json")
    truncated = write_trace(tmp_path / "truncated.json", LOSSES, end=False)
    with pytest.raises(repro_check.UsageError, match="truncated"):
        repro_check.verify(TINY, truncated)
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"reproducible": True}))
    with pytest.raises(repro_check.TraceFileError):
        repro_check.verify(TINY, report)
    # TraceFileError is a UsageError: exit 2
    assert issubclass(repro_check.TraceFileError, repro_check.UsageError)


def test_verify_rejects_bad_overrides(tmp_path: Path) -> None:
    good = write_trace(tmp_path / "g.json", LOSSES[:3], target=TINY)
    with pytest.raises(repro_check.UsageError, match="--seed"):
        repro_check.verify(TINY, good, seed=-1)
    with pytest.raises(repro_check.UsageError, match="--max-steps"):
        repro_check.verify(TINY, good, max_steps=0)
    with pytest.raises(repro_check.UsageError, match="--threads"):
        repro_check.verify(TINY, good, threads=0)


def test_diff_rejects_files_that_are_not_traces(tmp_path: Path) -> None:
    good = write_trace(tmp_path / "a.jsonl", LOSSES)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for bad in (tmp_path / "missing.jsonl", empty, write_trace(tmp_path / "t.jsonl", LOSSES,
                                                               end=False)):
        for args in ((good, bad), (bad, good)):
            with pytest.raises(repro_check.UsageError) as info:
                repro_check.diff(*args)
            assert str(bad) in str(info.value) and "\n" not in str(info.value)
