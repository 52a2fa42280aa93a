"""The check end to end through the command line: exit codes, JSON keys, divergences.

Each real check here serves every test that reads it (module-scoped fixtures): the target is
tests/cli/cli_tiny.py, fixtures/tiny.py without torch.optim (whose first optimizer loads
torch._dynamo, seconds a run) and with per-run failures, so that one check of four runs shows a
raise, a SIGKILL and a sys.exit(4) at once. The planted, NaN, metric and tolerance checks are
asserted in make test on their runs replayed from recorded traces (tests/recorded.py) and in
the slow tier on live runs."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest

from ..conftest import CliResult, run_cli, run_plain
from ..recorded import BOTH, cli_result, replayed_or_live
from .test_commands import in_folder

PUBLIC_KEYS = {"reproducible", "first_divergent_step", "divergent_signal", "steps", "metrics",
               "runs", "seed", "error"}
HERE = Path(__file__).resolve().parent
TARGET = "cli_tiny:main"  # tests/cli/cli_tiny.py, found from HERE


def check(*args: str, tmp: Path) -> CliResult:
    """``repro-check cli_tiny:main ARGS`` run from this folder."""
    return run_cli(TARGET, *args, tmp=tmp, cwd=HERE)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cli")


@pytest.fixture(scope="module")
def clean(tmp: Path) -> CliResult:
    return check("--seed", "5", tmp=tmp / "clean")


@pytest.fixture(scope="module", params=BOTH)
def planted(request: pytest.FixtureRequest, tmp: Path) -> CliResult:
    return cli_result(replayed_or_live(request.param, "cli_planted", tmp))


@pytest.fixture(scope="module", params=BOTH)
def stopped_with_nan(request: pytest.FixtureRequest, tmp: Path) -> CliResult:
    """Runs cut by --max-steps 5, the loss NaN from step 3 on in both."""
    return cli_result(replayed_or_live(request.param, "cli_nan", tmp))


@pytest.fixture(scope="module", params=BOTH)
def metric_shifted(request: pytest.FixtureRequest, tmp: Path) -> CliResult:
    """--max-steps equal to the script's own 5 steps, run 2's final metric 0.05 higher, a 1 %
    relative tolerance: steps all agree, the final metric does not."""
    return cli_result(replayed_or_live(request.param, "cli_metric_shifted", tmp))


@pytest.fixture(scope="module", params=BOTH)
def tolerated(request: pytest.FixtureRequest, tmp: Path) -> CliResult:
    """Run 2's final metric 0.05 higher, under an absolute tolerance above that."""
    return cli_result(replayed_or_live(request.param, "cli_tolerated", tmp))


@pytest.fixture(scope="module")
def failing(tmp: Path) -> CliResult:
    """Four runs: 1 completes its 40 steps, 2 raises at step 3, 3 is SIGKILLed at step 3,
    4 calls sys.exit(4) at step 6."""
    return check("--runs", "4", "--", "--raise-at", "3", "--raise-in-run", "2",
                 "--kill-in-run", "3", "--exit-at", "6", "--exit-code", "4", "--exit-in-run", "4",
                 tmp=tmp / "failing")


@pytest.fixture(scope="module")
def api_exit_zero(tmp: Path) -> Any:
    """The Python API's check of a target that calls sys.exit(0) at step 6 (module form, found
    from the current folder as the command line finds it)."""
    import repro_check

    with in_folder(HERE):
        return repro_check.check(TARGET, seed=5, args=["--exit-at", "6"],
                                 trace_dir=tmp / "api")




def test_reproducible_exit_0_and_json_keys(clean: CliResult) -> None:
    assert clean.code == 0, clean.stdout + clean.stderr
    r = clean.report
    assert PUBLIC_KEYS <= set(r)
    assert r["reproducible"] is True and r["first_divergent_step"] is None
    assert r["divergent_signal"] is None and r["error"] is None
    assert r["steps"] == [40, 40] and r["runs"] == 2 and r["seed"] == 5
    assert set(r["metrics"][0]) == {"mse"} and r["metrics"][0] == r["metrics"][1]
    assert "REPRODUCIBLE" in clean.stdout and "All 40 steps" in clean.stdout


def test_traces_written_per_run(clean: CliResult) -> None:
    from repro_check.trace.format import load_trace

    paths = [r["trace"] for r in clean.report["run_results"]]
    traces = [load_trace(p) for p in paths]
    assert [len(t.steps) for t in traces] == [40, 40]
    head = traces[0].header
    assert head["seed"] == 5 and head["target"] == TARGET
    assert {"python", "torch", "numpy", "threads", "device"} <= set(head["environment"])
    assert traces[0].end["status"] == "completed"


def test_planted_divergence_reported_at_its_step(planted: CliResult) -> None:
    assert planted.code == 1
    r = planted.report
    assert r["reproducible"] is False
    assert r["first_divergent_step"] == 7 and r["divergent_signal"] == "loss"
    d = r["divergence"]
    assert d["reference"]["value"] != d["value"]["value"] and d["abs_diff"] > 0
    assert d["later_divergent_steps"] == 40 - 7
    assert "First divergence: step 7, signal loss" in planted.stdout
    assert "--max-steps 7" in r["replay"] and "--diverge-at 7" in r["replay"]


def test_nan_in_both_runs_is_equal(stopped_with_nan: CliResult, tmp_path: Path) -> None:
    res = stopped_with_nan
    assert res.code == 0, res.stdout
    from repro_check.trace.format import load_trace

    for run in res.report["run_results"]:
        tr = load_trace(run["trace"])
        assert [s.signals["loss"]["value"] for s in tr.steps[2:]] == ["nan"] * 3
    # a final metric that is NaN in both runs is equal too: two such traces, diffed here
    from repro_check.cli import console_main

    from ..synthetic_traces import LOSSES, write_trace

    nan = float("nan")
    a, b = (write_trace(tmp_path / f"{k}.jsonl", [*LOSSES[:4], *[nan] * 16], metrics={"mse": nan})
            for k in "ab")
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert console_main(["diff", str(a), str(b)]) == 0, out.getvalue()


def test_metrics_only_divergence(metric_shifted: CliResult) -> None:
    res = metric_shifted
    assert res.code == 1
    assert res.report["first_divergent_step"] is None
    assert res.report["divergent_signal"] == "metric:mse"


def test_tolerance_opt_in_accepts_a_known_difference(metric_shifted: CliResult,
                                                     tolerated: CliResult) -> None:
    res = metric_shifted
    assert res.code == 1  # 0.05 on an mse below 1 is outside 1 %
    assert res.report["divergent_signal"] == "metric:mse"
    assert "rtol=0.01" in res.report["tolerance"]
    res = tolerated
    assert res.code == 0 and "atol=0.06" in res.report["tolerance"], res.stdout + res.stderr


def test_max_steps_stops_cleanly(stopped_with_nan: CliResult) -> None:
    res = stopped_with_nan
    assert res.code == 0
    assert res.report["steps"] == [5, 5] and res.report["metrics"] == [{}, {}]
    assert {r["status"] for r in res.report["run_results"]} == {"stopped"}
    # why no metric was compared: the runs were cut, not a target that records none
    said = " ".join(res.stdout.split())
    assert "no metric was compared: the runs were stopped by --max-steps before ending" in said
    assert "return a number" not in said


def test_max_steps_equal_to_the_scripts_own_steps_compares_its_final_metric(
        metric_shifted: CliResult) -> None:
    res = metric_shifted
    assert res.code == 1, res.stdout + res.stderr
    assert {r["status"] for r in res.report["run_results"]} == {"completed"}
    assert res.report["steps"] == [5, 5] and res.report["divergent_signal"] == "metric:mse"


def test_target_raising_is_exit_3_with_its_traceback(failing: CliResult) -> None:
    res = failing
    assert res.code == 3
    assert "run 2 raised RuntimeError: planted failure at step 3" in res.report["error"]
    assert "cli_tiny.py" in res.stdout and "Traceback" in res.stdout
    assert "repro_check" not in res.stdout.split("Traceback")[1].split("RuntimeError")[0]


def test_target_raising_in_run_2_only(failing: CliResult) -> None:
    res = failing
    assert res.code == 3
    assert res.report["error"].startswith("run 2 raised")  # run 1, which completed, is not blamed
    assert res.report["steps"][:2] == [40, 2]
    assert res.report["run_results"][0]["status"] == "completed"


def test_killed_run_is_exit_3_naming_the_signal(failing: CliResult) -> None:
    assert failing.code == 3 and "run 3 was killed by SIGKILL" in failing.report["error"]


def test_nothing_recorded_is_exit_3(tmp_path: Path) -> None:
    # a whole script that takes arguments and runs, but makes no step and returns no metric
    (tmp_path / "no_steps.py").write_text("import sys\n\nimport torch\n\n"
                                          "print(float(torch.ones(int(sys.argv[1])).sum()))\n")
    res = run_cli("no_steps.py", "--", "3", tmp=tmp_path / "out", cwd=tmp_path)
    assert res.code == 3 and "nothing to compare" in res.report["error"], res.stdout


def test_sys_exit_zero_keeps_steps(api_exit_zero: Any, failing: CliResult) -> None:
    report = api_exit_zero
    assert report.exit_code == 0 and [r.steps for r in report.results] == [6, 6]
    assert report.error is None
    # another exit code is a failure: run 4 of the failing check called sys.exit(4) at step 6
    assert failing.code == 3 and "run 4: the target called sys.exit(4)" in failing.report["error"]
    assert failing.report["steps"][3] == 6


@pytest.mark.parametrize(
    "args, message",
    [
        (("trian:main",), "no module named 'trian' (did you mean 'train'"),
        (("train:mian",), "no function 'mian'"),
        (("missing.py",), "no such file: missing.py"),
        (("tiny:main", "--without", "numpi"), "did you mean 'numpy'"),
        (("tiny:main", "--seed", "-1"), "--seed must be between"),
        (("tiny:main", "--runs", "0"), "--runs must be at least 2, got 0"),
        (("tiny:main", "--json", "/nonexistent/dir/r.json"), "does not exist"),
        (("tiny:main", "--bogus"), "unrecognized arguments"),
        ((), "the following arguments are required: TARGET"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args: tuple[str, ...], message: str) -> None:
    res = run_plain(*args)
    assert res.code == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.stderr
    assert "Traceback" not in res.stderr


def test_import_error_inside_target_shows_its_traceback(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("import not_a_real_package_xyz\n\ndef main():\n    pass\n")
    # one run at a time: the first run's failed import ends the check before a second starts
    res = run_plain("broken:main", "--jobs", "1", cwd=tmp_path)
    assert res.code == 2
    assert "broken.py" in res.stderr and "not_a_real_package_xyz" in res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("repro-check: error: importing 'broken'")


def test_attribute_that_is_not_callable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a run does with TARGET (``targets.resolve``), here in this process: the refusal
    reaches the command line as the import error's does (exit 2, one line; the test above)."""
    import sys

    from repro_check import targets
    from repro_check.errors import TargetNotFound

    (tmp_path / "cli_job_not_callable.py").write_text("main = 3\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    target = targets.parse("cli_job_not_callable:main")
    targets.check(target)  # nothing the parent can see without running the module's code
    try:
        with pytest.raises(TargetNotFound, match="not callable"):
            targets.resolve(target, [])
    finally:
        sys.modules.pop("cli_job_not_callable", None)


def test_help_and_version() -> None:
    assert run_plain("--help").code == 0
    res = run_plain("--version")
    assert res.code == 0 and "repro-check" in res.stdout


def test_python_api_does_what_the_cli_does(api_exit_zero: Any) -> None:
    report = api_exit_zero
    assert report.reproducible and report.exit_code == 0
    assert [r.steps for r in report.results] == [6, 6]


def test_a_mistyped_command_is_named_and_a_target_of_that_name_is_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from repro_check import cli
    from repro_check.cli.commands import COMMANDS
    from repro_check.cli.main import mistyped_command
    from repro_check.errors import UsageError

    monkeypatch.chdir(tmp_path)
    assert cli.console_main(["verfy", "train:main"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'verfy' (did you mean 'verify'?)" in err
    assert len(err.strip().splitlines()) == 1 and "unrecognized arguments" not in err
    for word in ("train:main", "tiny", "verify.py", "pkg.verfy", "--seed"):
        mistyped_command(word, COMMANDS)  # targets and flags are the check's to judge
    (tmp_path / "recods.py").write_text("print('a script named like a command')\n")
    mistyped_command("recods", COMMANDS)  # resolves as a module here: a bare TARGET
    with pytest.raises(UsageError, match="did you mean 'record'"):
        mistyped_command("recod", COMMANDS)


def test_top_level_help_lists_every_command_and_exit_code(
        capsys: pytest.CaptureFixture[str]) -> None:
    from repro_check import cli

    assert cli.console_main(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for command in ("record", "verify", "diff", "diagnose", "doctor"):
        assert f"{command} (" in text, command
    assert "130 interrupted" in text and "3 target failed" in text
