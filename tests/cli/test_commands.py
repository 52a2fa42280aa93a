"""The subcommands through ``repro_check.cli.console_main``, in this process, as a user runs them:
exit codes 0/1/2/3, ``--json``, one-line errors on stderr with no traceback of repro-check's own,
and every configured target of a ``[tool.repro-check]`` project run with no arguments.

Whatever can be shown without running a target is shown on traces written here (``diff``) or on
source that is only read (``doctor``); the configured project runs each command once.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from repro_check.cli import console_main

from ..conftest import FIXTURES
from ..synthetic_traces import LOSSES, write_trace

CLI_TINY = Path(__file__).with_name("cli_tiny.py")


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str
    report: dict[str, Any] | None = None


@contextlib.contextmanager
def in_folder(folder: Path) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def repro_check(argv: Sequence[str], cwd: Path, json_path: Path | None = None) -> Result:
    """``repro-check ARGV`` in ``cwd``; with ``json_path``, ``--json`` is added and read back."""
    argv = list(argv)
    if json_path is not None:
        at = argv.index("--") if "--" in argv else len(argv)
        argv[at:at] = ["--json", str(json_path)]
    out, err = io.StringIO(), io.StringIO()
    with in_folder(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = console_main(argv)
    report = json.loads(json_path.read_text()) if json_path is not None and json_path.exists() \
        else None
    return Result(code, out.getvalue(), err.getvalue(), report)


def assert_one_line_error(res: Result, code: int = 2) -> str:
    assert res.code == code, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("repro-check: error: ")
    return lines[0]


# ---- usage errors: exit 2, one line, nothing run -------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    ([], "TARGET"),
    (["check"], "TARGET"),
    (["--bogus-option"], "--bogus-option"),
    (["tiny.py:main", "--runs", "0"], "--runs"),
    (["tiny.py:main", "--seed", "-1"], "--seed"),
    (["tiny.py:main", "--seed", "ten"], "--seed"),
    (["tiny.py:main", "--without", "nump"], "did you mean 'numpy'"),
    (["tiny.py:main", "--max-steps", "0"], "--max-steps"),
    (["trian:main"], "did you mean 'train'"),
    (["train.py:mian"], "mian"),
    (["nowhere.py"], "nowhere.py"),
    (["train.py:main", "--json", "no/such/folder/report.json"], "--json"),
    (["record", "train.py:main"], "-o"),
    (["record"], "TARGET"),
    (["verify", "train.py:main"], "--golden"),
    (["verify", "train.py:main", "--golden", "missing.json"], "missing.json"),
    (["diff", "only-one.jsonl"], "B"),
    (["diff", "missing-a.jsonl", "missing-b.jsonl"], "missing-a.jsonl"),
    (["doctor", "--no-env"], "TARGET"),
    (["doctor", "nowhere.py", "--no-env"], "nowhere.py"),
])
def test_usage_errors_are_one_line_and_exit_2(tmp_path: Path, argv: list[str],
                                              message: str) -> None:
    (tmp_path / "train.py").write_text("def main():\n    return 1.0\n")
    res = repro_check(argv, tmp_path)
    line = assert_one_line_error(res)
    assert message in line
    assert res.stdout == ""
    assert not (tmp_path / ".repro-check").exists()  # nothing ran, no run folder made


def test_help_and_version(tmp_path: Path) -> None:
    for argv in (["--help"], ["record", "--help"], ["verify", "--help"], ["diff", "--help"],
                 ["doctor", "--help"]):
        res = repro_check(argv, tmp_path)
        assert res.code == 0 and "usage:" in res.stdout and res.stderr == ""
    res = repro_check(["--version"], tmp_path)
    assert res.code == 0 and re.fullmatch(r"repro-check \d+\.\d+\.\d+\S*\n", res.stdout)


# ---- diff: exit codes 0, 1, 2, 3 and --json on traces written here -------------------------------
@pytest.fixture()
def traces(tmp_path: Path) -> dict[str, Path]:
    t = tmp_path / "traces"
    return {
        "a": write_trace(t / "a.jsonl", LOSSES, metrics={"acc": 0.5}),
        "same": write_trace(t / "same.jsonl", LOSSES, metrics={"acc": 0.5}),
        "changed": write_trace(t / "changed.jsonl", LOSSES[:9] + [x + 1e-3 for x in LOSSES[9:]],
                               metrics={"acc": 0.5}),
        "failed": write_trace(t / "failed.jsonl", LOSSES[:4], status="failed",
                              error={"kind": "raised", "type": "RuntimeError",
                                     "message": "boom", "traceback": "RuntimeError: boom\n"}),
        "truncated": write_trace(t / "truncated.jsonl", LOSSES, end=False),
    }


@pytest.mark.parametrize("b, code", [("same", 0), ("changed", 1), ("failed", 3)])
def test_diff_exit_code_and_json(tmp_path: Path, traces: dict[str, Path], b: str,
                                 code: int) -> None:
    res = repro_check(["diff", str(traces["a"]), str(traces[b])], tmp_path,
                      json_path=tmp_path / "report.json")
    assert res.code == code, res.stdout + res.stderr
    assert res.stderr == "" and "Traceback" not in res.stdout
    r = res.report
    assert r is not None and r["exit_code"] == code
    assert r["reproducible"] is (code == 0)
    assert (r["error"] is not None) is (code == 3)
    if code == 1:  # "changed" adds 1e-3 to every loss from step 10 on
        assert r["first_divergent_step"] == 10 and r["divergent_signal"] == "loss"
    verdict = {0: "SAME", 1: "NOT REPRODUCIBLE", 3: "TARGET FAILED"}[code]
    assert verdict in res.stdout


def test_diff_of_a_truncated_trace_is_exit_2_and_writes_no_report(tmp_path: Path,
                                                                  traces: dict[str, Path]) -> None:
    res = repro_check(["diff", str(traces["a"]), str(traces["truncated"])], tmp_path,
                      json_path=tmp_path / "report.json")
    line = assert_one_line_error(res)
    assert "truncated" in line and res.report is None and res.stdout == ""


def test_diff_tolerance_flags(tmp_path: Path, traces: dict[str, Path]) -> None:
    args = ["diff", str(traces["a"]), str(traces["changed"])]
    assert repro_check([*args, "--atol", "1e-2"], tmp_path).code == 0
    assert repro_check([*args, "--atol", "loss=1e-2"], tmp_path).code == 0
    assert repro_check([*args, "--atol", "metric:acc=1e-2"], tmp_path).code == 1
    assert repro_check([*args, "--atol", "1e-9"], tmp_path).code == 1
    line = assert_one_line_error(repro_check([*args, "--atol", "lots"], tmp_path))
    assert "lots" in line


def test_rtol_is_relative_to_the_reference(tmp_path: Path) -> None:
    # A is the reference: |a - b| <= atol + rtol * |b|, b the reference (docs/configuration.md).
    # 1.0 against 1.25: |diff| 0.25 = 0.25 of the reference, 0.2 of the other value.
    ref = write_trace(tmp_path / "ref.jsonl", [2.0, 1.0])
    other = write_trace(tmp_path / "other.jsonl", [2.0, 1.25])
    args = ["diff", str(ref), str(other)]
    assert repro_check([*args, "--rtol", "0.26"], tmp_path).code == 0  # above both ratios
    assert repro_check([*args, "--rtol", "0.19"], tmp_path).code == 1  # below both


def test_rtol_below_the_difference_relative_to_the_reference_rejects(tmp_path: Path) -> None:
    ref = write_trace(tmp_path / "ref.jsonl", [2.0, 1.0])
    other = write_trace(tmp_path / "other.jsonl", [2.0, 1.25])
    res = repro_check(["diff", str(ref), str(other), "--rtol", "0.21"], tmp_path)
    assert res.code == 1


# ---- [tool.repro-check] read from the current folder upward, for a command that runs nothing -----
def test_config_tolerances_apply_to_diff(tmp_path: Path, traces: dict[str, Path]) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.repro-check]\natol = { loss = 1e-2 }\n")
    (tmp_path / "deep" / "er").mkdir(parents=True)
    res = repro_check(["diff", str(traces["a"]), str(traces["changed"])], tmp_path / "deep" / "er")
    assert res.code == 0, res.stdout
    # the flag overrides the config
    res = repro_check(["diff", str(traces["a"]), str(traces["changed"]), "--atol", "loss=1e-9"],
                      tmp_path / "deep" / "er")
    assert res.code == 1


@pytest.mark.parametrize("table, message", [
    ('seed = "x"', "seed"),
    ("seed = -1", "seed"),
    ("runs = 1", "runs"),
    ("sede = 3", "sede"),
    ("targets = [{ args = [] }]", "target"),
    ("seed = ", "TOML"),
])
def test_bad_config_is_one_line_and_exit_2(tmp_path: Path, traces: dict[str, Path], table: str,
                                           message: str) -> None:
    (tmp_path / "pyproject.toml").write_text(f"[tool.repro-check]\n{table}\n")
    for argv in (["diff", str(traces["a"]), str(traces["same"])], ["train.py:main"]):
        line = assert_one_line_error(repro_check(argv, tmp_path))
        assert message in line and "pyproject.toml" in line


# ---- doctor: reads source, runs nothing ----------------------------------------------------------
def test_doctor_finds_the_marked_hazards(tmp_path: Path) -> None:
    source = FIXTURES / "hazards" / "cudnn_benchmark.py"
    expected = sorted(i for i, line in enumerate(source.read_text().splitlines(), 1)
                      if "# expect: RC102" in line)
    assert expected
    res = repro_check(["doctor", str(source), "--no-env"], tmp_path,
                      json_path=tmp_path / "doctor.json")
    assert res.code == 1 and "Traceback" not in res.stderr
    r = res.report
    assert r["clean"] is False
    assert sorted(f["line"] for f in r["findings"] if f["code"] == "RC102") == expected
    assert "RC102" in res.stdout


def test_doctor_on_clean_source_is_exit_0(tmp_path: Path) -> None:
    (tmp_path / "clean.py").write_text(
        "import torch\n\n\ndef main():\n    torch.manual_seed(0)\n"
        "    return float(torch.randn(3).sum())\n")
    res = repro_check(["doctor", "clean.py", "--no-env"], tmp_path,
                      json_path=tmp_path / "doctor.json")
    assert res.code == 0, res.stdout
    assert res.report["clean"] is True and res.report["findings"] == []


# ---- a configured project: every target, with no arguments ---------------------------------------
PYPROJECT = """\
[project]
name = "demo"

[tool.repro-check]
seed = 3
golden-dir = "goldens"
trace-dir = "traces"
junit = "reports/junit.xml"
targets = [
    { target = "tiny.py:main", args = ["--steps", "4"] },
    { target = "models/tiny_b.py:main", args = ["--steps", "4", "--diverge-at", "3"] },
]
"""
TARGETS = ["tiny.py:main", "models/tiny_b.py:main"]
DIVERGING_AT = 3


def golden_name(target: str) -> str:
    """docs/configuration.md: every run of characters other than letters, digits, . _ - -> '-'."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", target) + ".json"


@dataclass
class Project:
    root: Path
    cwd: Path
    check: Result
    check_junit: str
    record: Result
    verify: Result


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    root = tmp_path_factory.mktemp("project")
    (root / "pyproject.toml").write_text(PYPROJECT)
    # fixtures/tiny.py's options without torch.optim (seconds of torch._dynamo a run saved)
    shutil.copyfile(CLI_TINY, root / "tiny.py")
    (root / "models").mkdir()
    shutil.copyfile(CLI_TINY, root / "models" / "tiny_b.py")
    (root / "reports").mkdir()
    cwd = root / "src" / "deeper"  # the config is found from the current folder upward
    cwd.mkdir(parents=True)
    out = root / "out"
    out.mkdir()
    check = repro_check(["--quiet"], cwd, json_path=out / "check.json")
    junit_path = root / "reports" / "junit.xml"
    junit = junit_path.read_text() if junit_path.exists() else ""
    record = repro_check(["record", "--quiet"], cwd, json_path=out / "record.json")
    # given a TARGET, verify runs that one, its golden found by the configured golden-dir
    verify = repro_check(["verify", TARGETS[0], "--quiet"], root, json_path=out / "verify.json")
    return Project(root, cwd, check, junit, record, verify)


@pytest.mark.slow
def test_check_runs_every_configured_target(project: Project) -> None:
    res = project.check
    assert res.code == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and res.stderr == ""  # --quiet
    r = res.report
    # several targets: reproducible only when all are, the exit code of them all, each listed
    assert r["reproducible"] is False and r["exit_code"] == 1
    assert r["targets"] == TARGETS
    first, second = r["reports"]
    assert first["target"] == TARGETS[0] and second["target"] == TARGETS[1]
    assert first["reproducible"] is True and first["exit_code"] == 0 and first["seed"] == 3
    assert first["steps"] == [4, 4] and first["args"] == ["--steps", "4"]
    assert second["exit_code"] == 1 and second["first_divergent_step"] == DIVERGING_AT
    assert second["divergent_signal"] == "loss" and second["seed"] == 3
    # the keys at the top are the failing target's
    assert r["first_divergent_step"] == DIVERGING_AT and r["target"] == TARGETS[1]
    # traces went to the configured trace-dir, relative to the config's folder
    for rep in r["reports"]:
        for rr in rep["run_results"]:
            assert Path(rr["trace"]).resolve().is_relative_to((project.root / "traces").resolve())
    assert not (project.cwd / ".repro-check").exists()


@pytest.mark.slow
def test_check_summary_names_both_targets(project: Project) -> None:
    out = project.check.stdout
    assert TARGETS[0] in out and TARGETS[1] in out
    assert "NOT REPRODUCIBLE" in out and f"step {DIVERGING_AT}" in out
    # the failing target's replay command, whole, on a line of its own
    replay = project.check.report["reports"][1]["replay"]
    assert replay and TARGETS[1] in replay
    assert replay in out.splitlines()


@pytest.mark.slow
def test_check_junit_has_a_testcase_per_target(project: Project) -> None:
    suite = ET.fromstring(project.check_junit)
    cases = suite.findall(".//testcase")
    assert len(cases) == 2
    failed = [c for c in cases if c.find("failure") is not None]
    assert len(failed) == 1
    failure = failed[0].find("failure")
    text = (failure.get("message") or "") + (failure.text or "")
    assert f"first divergent step {DIVERGING_AT}" in text


@pytest.mark.slow
def test_record_writes_a_golden_per_target(project: Project) -> None:
    res = project.record
    assert res.code == 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    r = res.report
    assert r["exit_code"] == 0 and r["targets"] == TARGETS
    for target, rep in zip(TARGETS, r["reports"]):
        path = project.root / "goldens" / golden_name(target)
        assert path.is_file(), sorted(p.name for p in (project.root / "goldens").iterdir())
        head = json.loads(path.read_text().splitlines()[0])
        assert head["format"] == "repro-check-trace" and head["header"]["target"] == target
        assert head["header"]["seed"] == 3 and head["header"]["golden"]["runs"] == 1
        assert rep["exit_code"] == 0 and rep["steps"] == [4]


@pytest.mark.slow
def test_verify_of_one_configured_target_against_its_recorded_golden(project: Project) -> None:
    res = project.verify
    assert res.code == 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    r = res.report
    assert r["reproducible"] is True and r["exit_code"] == 0 and r["target"] == TARGETS[0]
    assert "reports" not in r  # one target: the report as is
    assert r["steps"] == [4, 4] and r["seed"] == 3 and r["args"] == ["--steps", "4"]
    assert "MATCHES GOLDEN" in res.stdout
    assert golden_name(TARGETS[0]) in res.stdout  # the golden it was compared with


# ---- the runs use the package the command was started from -------------------------------------
WHERE = """\
import os
import sys

import repro_check


def main():
    with open(sys.argv[1], "w") as fh:
        fh.write(os.path.dirname(os.path.realpath(repro_check.__file__)))  # runs get a link to it
    return 1.0
"""


@dataclass
class Elsewhere:
    """``python -m repro_check record --debug`` of a configured target, started from a copy of
    the package that nothing installed points to (its folder: on the parent's path, and only
    there); the target writes where the repro_check it imports lives."""

    checkout: Path
    seen: Path
    traces: Path
    proc: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory: pytest.TempPathFactory) -> Elsewhere:
    from ..conftest import ROOT, cli_env

    tmp_path = tmp_path_factory.mktemp("elsewhere")
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT / "repro_check", checkout / "repro_check",
                    ignore=shutil.ignore_patterns("__pycache__", "data"))
    project = tmp_path / "project"
    project.mkdir()
    seen = tmp_path / "seen.txt"
    (project / "where.py").write_text(WHERE)
    (project / "pyproject.toml").write_text(
        "[tool.repro-check]\n"
        f"targets = [{{ target = \"where.py:main\", args = [{json.dumps(str(seen))}] }}]\n")
    env = cli_env()
    env.pop("PYTHONPATH", None)
    # the configured target runs from the config's folder, outside the checkout
    traces = tmp_path / "traces"
    proc = subprocess.run(
        [sys.executable, "-m", "repro_check", "record", "--debug", "--config",
         str(project / "pyproject.toml"), "-o", str(tmp_path / "golden.json"), "--quiet",
         "--trace-dir", str(traces)],
        cwd=checkout, env=env, capture_output=True, text=True, timeout=120)
    return Elsewhere(checkout, seen, traces, proc)


def test_runs_import_the_package_the_command_was_started_from(elsewhere: Elsewhere) -> None:
    proc = elsewhere.proc
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert Path(elsewhere.seen.read_text()).resolve() == \
        (elsewhere.checkout / "repro_check").resolve()


def test_debug_flag_is_the_debug_variable_for_us_and_our_runs(elsewhere: Elsewhere,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """``--debug`` before a ``--`` is ours (taken out, the variable set for the runs to inherit);
    after it, it is the target's."""
    from repro_check.cli.main import debug_flag

    # set, then removed: the monkeypatch puts back its absence afterwards (a bare delenv of an
    # absent variable records nothing, and what debug_flag sets would leak into later tests)
    monkeypatch.setenv("REPRO_CHECK_DEBUG", "")
    monkeypatch.delenv("REPRO_CHECK_DEBUG")
    assert debug_flag(["t.py", "--", "--debug"]) == ["t.py", "--", "--debug"]
    assert "REPRO_CHECK_DEBUG" not in os.environ
    assert debug_flag(["record", "--debug", "t.py", "--", "--debug"]) == [
        "record", "t.py", "--", "--debug"]
    assert os.environ["REPRO_CHECK_DEBUG"] == "1"
    # a run under it (the record above, started with --debug) lists what it patched, on its
    # stderr and in its trace
    proc = elsewhere.proc
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"repro-check: run 1 patched \S+: ", proc.stderr), proc.stderr[-2000:]
    trace = next(elsewhere.traces.glob("*/run-1.jsonl")).read_text()
    assert '"patches"' in trace
