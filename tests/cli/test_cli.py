"""The check end to end through the command line: exit codes, JSON keys, divergences."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..conftest import FIXTURES, CliResult, run_cli, run_plain

PUBLIC_KEYS = {"reproducible", "first_divergent_step", "divergent_signal", "steps", "metrics",
               "runs", "seed", "error"}


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cli")


@pytest.fixture(scope="module")
def clean(tmp: Path) -> CliResult:
    return run_cli("tiny:main", "--seed", "5", tmp=tmp / "clean")


@pytest.fixture(scope="module")
def planted(tmp: Path) -> CliResult:
    return run_cli("tiny:main", "--seed", "5", "--", "--diverge-at", "7", tmp=tmp / "planted")


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
    assert head["seed"] == 5 and head["target"] == "tiny:main"
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


def test_nan_in_both_runs_is_equal(tmp: Path) -> None:
    res = run_cli("tiny:main", "--", "--nan-at", "5", tmp=tmp / "nan")
    assert res.code == 0, res.stdout
    from repro_check.trace.format import load_trace

    tr = load_trace(res.report["run_results"][0]["trace"])
    assert tr.steps[10].signals["loss"]["value"] == "nan"


def test_metrics_only_divergence(tmp: Path) -> None:
    res = run_cli("tiny:main", "--", "--metric-noise", tmp=tmp / "metric")
    assert res.code == 1
    assert res.report["first_divergent_step"] is None
    assert res.report["divergent_signal"] == "metric:mse"


def test_tolerance_opt_in_accepts_a_known_difference(tmp: Path) -> None:
    shifted = ("--", "--metric-shift-in-run", "2")
    res = run_cli("tiny:main", "--rtol", "0.01", *shifted, tmp=tmp / "tol")
    assert res.code == 1  # 0.05 on an mse below 1 is outside 1 %
    assert res.report["divergent_signal"] == "metric:mse"
    res = run_cli("tiny:main", "--atol", "0.06", *shifted, tmp=tmp / "tol2")
    assert res.code == 0 and "atol=0.06" in res.report["tolerance"]


def test_max_steps_stops_cleanly(tmp: Path) -> None:
    res = run_cli("tiny:main", "--max-steps", "5", tmp=tmp / "max")
    assert res.code == 0
    assert res.report["steps"] == [5, 5] and res.report["metrics"] == [{}, {}]
    assert {r["status"] for r in res.report["run_results"]} == {"stopped"}
    # why no metric was compared: the runs were cut, not a target that records none
    said = " ".join(res.stdout.split())
    assert "no metric was compared: the runs were stopped by --max-steps before ending" in said
    assert "return a number" not in said


def test_max_steps_equal_to_the_scripts_own_steps_compares_its_final_metric(tmp: Path) -> None:
    res = run_cli("tiny:main", "--max-steps", "5", "--", "--steps", "5",
                  "--metric-shift-in-run", "2", tmp=tmp / "max-own")
    assert res.code == 1, res.stdout + res.stderr
    assert {r["status"] for r in res.report["run_results"]} == {"completed"}
    assert res.report["steps"] == [5, 5] and res.report["divergent_signal"] == "metric:mse"


def test_target_raising_is_exit_3_with_its_traceback(tmp: Path) -> None:
    res = run_cli("tiny:main", "--", "--raise-at", "3", tmp=tmp / "raise")
    assert res.code == 3
    assert "run 1 raised RuntimeError: planted failure at step 3" in res.report["error"]
    assert "tiny.py" in res.stdout and "Traceback" in res.stdout
    assert "repro_check" not in res.stdout.split("Traceback")[1].split("RuntimeError")[0]


def test_target_raising_in_run_2_only(tmp: Path) -> None:
    res = run_cli("tiny:main", "--", "--raise-at", "3", "--raise-in-run", "2", tmp=tmp / "raise2")
    assert res.code == 3
    assert res.report["error"].startswith("run 2 raised")
    assert res.report["steps"] == [40, 2]


def test_killed_run_is_exit_3_naming_the_signal(tmp: Path) -> None:
    res = run_cli("tiny:main", "--", "--kill-self", tmp=tmp / "kill")
    assert res.code == 3 and "SIGKILL" in res.report["error"]


def test_nothing_recorded_is_exit_3(tmp: Path) -> None:
    res = run_cli("script_main.py", "--", "0", tmp=tmp / "nothing")
    assert res.code == 3 and "nothing to compare" in res.report["error"]


def test_sys_exit_zero_keeps_steps(tmp: Path) -> None:
    res = run_cli("tiny:main", "--", "--exit-at", "6", tmp=tmp / "exit0")
    assert res.code == 0 and res.report["steps"] == [6, 6]
    res = run_cli("tiny:main", "--", "--exit-at", "6", "--exit-code", "4", tmp=tmp / "exit4")
    assert res.code == 3 and "sys.exit(4)" in res.report["error"]


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
    res = run_plain("broken:main", cwd=tmp_path)
    assert res.code == 2
    assert "broken.py" in res.stderr and "not_a_real_package_xyz" in res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("repro-check: error: importing 'broken'")


def test_attribute_that_is_not_callable(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text("main = 3\n")
    res = run_plain("job:main", cwd=tmp_path)
    assert res.code == 2 and "not callable" in res.stderr


def test_help_and_version() -> None:
    assert run_plain("--help").code == 0
    res = run_plain("--version")
    assert res.code == 0 and "repro-check" in res.stdout


def test_python_api_does_what_the_cli_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import repro_check

    monkeypatch.chdir(FIXTURES)
    report = repro_check.check("tiny:main", seed=5, args=["--steps", "6"], trace_dir=tmp_path)
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
