"""Training in processes the target starts: one stream per process, compared across runs by the
process's index (the order the target started it). Hogwild's lock-free shared updates race and
are reported with the step and the process where they first differ; processes that each train a
seeded model of their own reproduce, under fork and under spawn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import repro_check
from repro_check.compare.processes import ProcessComparison
from repro_check.report.processes import processes_part
from repro_check.compare.steps import Comparison
from repro_check.report.model import Report
from repro_check.run.runner import RunResult
from repro_check.run.streams import ProcessResult
from repro_check.trace.format import load_trace

from ...conftest import FIXTURES, CliResult, run_cli

pytest_plugins = ["tests.api_runs"]  # same_check: a script that starts no process

HOGWILD_STEPS = 200
MAX_STEPS = 10
DET = str(FIXTURES / "mp_deterministic.py") + ":main"


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mp")


@pytest.fixture(scope="module")
def hogwild(tmp: Path) -> CliResult:
    return run_cli("hogwild.py:main", "--seed", "1", "--", "--steps", str(HOGWILD_STEPS),
                   tmp=tmp / "hogwild")


@pytest.fixture(scope="module")
def forked(tmp: Path) -> repro_check.Report:
    # a helper first (index 1, never trains), DataLoader workers in the main process (no index),
    # three steps of the main process's own before the two training processes (2 and 3), which
    # --max-steps stops at step 10 of their 30 (the main process ends its 3 steps on its own)
    return repro_check.check(DET, seed=5, max_steps=MAX_STEPS,
                             args=["--start-method", "fork", "--helper", "--main-steps", "3",
                                   "--loader-workers", "2"],
                             trace_dir=tmp / "fork")


@pytest.fixture(scope="module")
def spawned(tmp: Path) -> repro_check.Report:
    return repro_check.check(DET, seed=5, args=["--start-method", "spawn"], trace_dir=tmp / "spawn")


def _trace_files(report: Any) -> list[str]:
    folder = Path(report["trace_dir"] if isinstance(report, dict) else report.trace_dir)
    return sorted(p.name for p in folder.iterdir())


# ---- Hogwild: shared parameters updated without locks ----------------------------------------

@pytest.mark.slow
def test_hogwild_is_not_reproducible_and_names_the_step_and_the_process(hogwild: CliResult) -> None:
    assert hogwild.code == 1, hogwild.stdout + hogwild.stderr
    r = hogwild.report
    assert r is not None and r["reproducible"] is False and r["error"] is None
    step, proc = r["first_divergent_step"], r["first_divergent_process"]
    assert isinstance(step, int) and 1 <= step <= HOGWILD_STEPS
    assert proc in (1, 2) and r["divergence"]["process"] == proc
    assert r["divergent_signal"] in ("init", "loss", "grads", "params")
    assert r["steps"] == [0, 0]  # the main process only starts the workers and tests the model
    assert [row["process"] for row in r["processes"]] == [1, 2]
    assert [row["steps"] for row in r["processes"]] == [[HOGWILD_STEPS] * 2] * 2
    assert r["ignored_processes"] == []
    assert f"First divergence: step {step}, signal {r['divergent_signal']}, run 2 vs run 1, " \
           f"process {proc}" in hogwild.stdout
    assert "processes the target started, steps recorded: 1: 200, 200; 2: 200, 200" \
        in " ".join(hogwild.stdout.replace("│", " ").split())
    # not the model's initialisation, nor a kernel: the processes update shared parameters
    assert r["cause"] == "compute"
    assert r["cause_detail"].startswith(f"the parameters process {proc} trains are in memory "
                                        "shared with other processes (4 parameter tensors")


@pytest.mark.slow
def test_each_hogwild_process_has_a_valid_trace_that_shows_the_divergence(
        hogwild: CliResult) -> None:
    r = hogwild.report
    assert r is not None
    assert _trace_files(r) == ["run-1.jsonl", "run-1.proc-1.jsonl", "run-1.proc-2.jsonl",
                               "run-2.jsonl", "run-2.proc-1.jsonl", "run-2.proc-2.jsonl"]
    traces = {}
    for row in r["processes"]:
        for run, path in enumerate(row["traces"], 1):
            trace = load_trace(path, require_end=True)
            assert trace.header["process"]["index"] == row["process"]
            assert trace.header["process"]["start_method"] == "spawn"
            assert trace.header["run"] == run and trace.header["seed"] == 1
            assert [s.step for s in trace.steps] == list(range(1, HOGWILD_STEPS + 1))
            traces[run, row["process"]] = trace
    step, proc, signal = r["first_divergent_step"], r["first_divergent_process"], \
        r["divergent_signal"]
    a, b = (traces[run, proc].steps[step - 1].signals[signal] for run in (1, 2))
    assert a != b
    main = load_trace(Path(r["trace_dir"]) / "run-1.jsonl", require_end=True)
    assert main.steps == [] and "process" not in main.header and "test_loss" in main.metrics


# ---- processes that train deterministically --------------------------------------------------

def test_forked_processes_reproduce_each_in_a_stream_of_its_own_stopped_at_max_steps(
        forked: repro_check.Report) -> None:
    """Each process is stopped at its own step --max-steps: the training processes at 10, the
    main process ends its own 3 steps before that (merged: the forked check and the one with
    --max-steps were two checks of the same script)."""
    assert forked.exit_code == 0 and forked.reproducible, forked.error
    r = forked.to_dict()
    assert r["steps"] == [3, 3]  # the main process's own steps stay the run's stream
    assert r["first_divergent_process"] is None
    assert [row["process"] for row in r["processes"]] == [2, 3]
    assert [row["steps"] for row in r["processes"]] == [[MAX_STEPS, MAX_STEPS]] * 2
    assert {row["status"][0] for row in r["processes"]} == {"stopped"}
    assert r["ignored_processes"] == [1]  # the helper; the DataLoader workers got no index
    for run in r["process_results"]:
        ends = {p["process"]: (p["status"], p["steps"]) for p in run["processes"]}
        assert ends == {1: ("completed", 0), 2: ("stopped", MAX_STEPS),
                        3: ("stopped", MAX_STEPS)}


def test_a_forked_process_counts_its_steps_from_one_and_the_main_trace_is_unchanged(
        forked: repro_check.Report) -> None:
    # the negative control's run records its main process only
    assert _trace_files(forked) == ["control.jsonl", "run-1.jsonl", "run-1.proc-2.jsonl",
                                    "run-1.proc-3.jsonl", "run-2.jsonl", "run-2.proc-2.jsonl",
                                    "run-2.proc-3.jsonl"]
    folder = Path(forked.trace_dir or "")
    child = load_trace(folder / "run-1.proc-2.jsonl", require_end=True)
    assert [s.step for s in child.steps] == list(range(1, MAX_STEPS + 1))
    assert child.header["process"]["start_method"] == "fork"
    assert child.end["process"] == 2 and child.end["status"] == "stopped"
    main = load_trace(folder / "run-1.jsonl", require_end=True)
    assert [s.step for s in main.steps] == [1, 2, 3] and "process" not in main.header
    assert "main_loss" in main.metrics


@pytest.mark.slow
def test_spawned_processes_reproduce_with_the_runs_seeding(spawned: repro_check.Report) -> None:
    """``torch.multiprocessing.spawn``: each process draws its targets' noise from Python's
    ``random``, with a scale drawn when the spawned interpreter imports the script again; only
    the run's seeding, applied there before that import, makes them the same in every run.
    Run to their end (no --max-steps), the processes and their traces end completed."""
    assert spawned.exit_code == 0 and spawned.reproducible, spawned.error
    r = spawned.to_dict()
    assert r["steps"] == [0, 0] and r["ignored_processes"] == []
    assert [(row["process"], row["steps"]) for row in r["processes"]] == \
        [(1, [30, 30]), (2, [30, 30])]
    for run in r["process_results"]:
        ends = {p["process"]: (p["status"], p["steps"]) for p in run["processes"]}
        assert ends == {1: ("completed", 30), 2: ("completed", 30)}
    child = load_trace(r["processes"][0]["traces"][0], require_end=True)
    header = child.header
    assert header["process"]["start_method"] == "spawn"
    assert header["seeding"]["python"] == 5 and header["seeding"]["threads"] == 1
    assert [s.step for s in child.steps] == list(range(1, 31))
    assert child.end["process"] == 1 and child.end["status"] == "completed"


def test_a_script_that_starts_no_process_is_reported_and_traced_as_before(same_check: Any) -> None:
    """Read off the session's shared check of a seeded script that starts no process
    (tests/api_runs.py)."""
    report = same_check
    assert report.exit_code == 0 and report.processes is None
    assert all(r.processes == [] for r in report.results)
    assert not {"first_divergent_process", "processes", "process_results"} & set(report.to_dict())
    # no events folder left (the negative control's run beside them)
    assert _trace_files(report) == ["control.jsonl", "run-1.jsonl", "run-2.jsonl"]


# ---- the comparison, stream by stream ----------------------------------------------------------

def _loss(x: float) -> dict[str, Any]:
    import struct

    return {"dtype": "float32", "bits": struct.pack(">f", x).hex(), "value": x}


def _feed(comp: ProcessComparison, run: int, process: int, losses: list[float]) -> None:
    for i, x in enumerate(losses, 1):
        comp.add_step(run, process, i, {"loss": _loss(x)})


def test_without_training_processes_the_result_is_the_main_streams_own() -> None:
    comp = ProcessComparison(2)
    for run in (1, 2):
        _feed(comp, run, 0, [1.0, 2.0])
        comp.end(run, {0: 2, 1: 0})  # a helper that recorded nothing
    main = comp.main.result()
    assert comp.result().__dict__ == main.__dict__
    report = Report(target="t", args=[], seed=1, components=[], runs=2,
                    results=[RunResult(1, processes=[ProcessResult(1, status="completed")])],
                    comparison=comp.result())
    report.processes = processes_part(report.results, comp, report.comparison)
    assert report.processes is None
    assert not {"first_divergent_process", "processes"} & set(report.to_dict())


def test_the_earliest_step_of_any_process_is_the_first_divergence() -> None:
    comp = ProcessComparison(3)
    for run in (1, 2, 3):
        _feed(comp, run, 0, [1.0, 1.0, 1.0])
        _feed(comp, run, 1, [1.0, 1.0, 1.0, 1.0, 9.0 if run == 2 else 1.0])
        _feed(comp, run, 2, [1.0, 1.0, 7.0 if run == 3 else 1.0, 1.0, 1.0])
        comp.end(run, {0: 3, 1: 5, 2: 5})
    res = comp.result()
    assert (res.first_divergent_step, res.divergence.run, res.divergence.process) == (3, 3, 2)
    assert res.per_run[2].process == 1 and res.per_run[2].step == 5  # type: ignore[union-attr]
    assert res.steps_compared == 13 and res.groups == [[1], [2], [3]]


def test_at_the_same_step_the_lower_process_is_named() -> None:
    comp = ProcessComparison(2)
    for run in (1, 2):
        for process in (2, 1):
            _feed(comp, run, process, [1.0, float(run)])
        comp.end(run, {0: 0, 1: 2, 2: 2})
    res = comp.result()
    assert (res.first_divergent_step, res.divergence.process) == (2, 1)


def test_a_process_only_one_run_started_diverges_at_its_first_step() -> None:
    comp = ProcessComparison(2)
    _feed(comp, 1, 1, [1.0, 2.0])
    comp.end(1, {0: 0, 1: 2})
    comp.end(2, {0: 0})
    res = comp.result()
    assert (res.first_divergent_step, res.divergent_signal, res.divergence.process) == \
        (1, "steps", 1)


def test_a_process_killed_because_the_run_stopped_is_cut_short_not_divergent() -> None:
    comp = ProcessComparison(2)
    _feed(comp, 1, 1, [1.0, 2.0, 3.0])
    comp.end(1, {0: 0, 1: 3}, cut=[1])
    _feed(comp, 2, 1, [1.0, 2.0, 3.0, 4.0])
    comp.end(2, {0: 0, 1: 4}, cut=[1])
    assert comp.result().reproducible


def test_fail_fast_waits_for_every_process_to_reach_the_step() -> None:
    comp = ProcessComparison(2)
    _feed(comp, 1, 1, [1.0, 1.0, 1.0, 1.0])
    _feed(comp, 2, 1, [1.0, 1.0, 1.0, 5.0])
    _feed(comp, 1, 2, [1.0])
    _feed(comp, 2, 2, [1.0])
    assert not comp.settled_divergence()  # process 2 could still differ at steps 2 and 3
    comp.add_step(1, 2, 2, {"loss": _loss(1.0)})
    comp.add_step(2, 2, 2, {"loss": _loss(1.0)})
    comp.add_step(1, 2, 3, {"loss": _loss(1.0)})
    comp.add_step(2, 2, 3, {"loss": _loss(1.0)})
    assert comp.settled_divergence()
    assert isinstance(comp.main, Comparison)
