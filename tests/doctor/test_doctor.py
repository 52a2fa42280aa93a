"""repro-check doctor: hazards found at the right line, silencing, JSON, exit codes, no import."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from repro_check.doctor import checkup as doctor
from repro_check.cli.main import console_main
from repro_check.errors import TargetNotFound, UsageError

ROOT = Path(__file__).resolve().parents[2]
HAZARDS = ROOT / "fixtures" / "hazards"
EXPECT = re.compile(r"#\s*expect:\s*(RC\d{3})")
HAZARD_FILES = sorted(p for p in HAZARDS.rglob("*.py") if p.name != "__init__.py")


def expected(files: list[str]) -> set[tuple[str, int, str]]:
    """The ``# expect: RCxxx`` markers in the given files: (resolved path, line, code)."""
    out = set()
    for f in files:
        path = Path(f).resolve()
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for code in EXPECT.findall(line):
                out.add((str(path), n, code))
    return out


def found(report: doctor.DoctorReport) -> set[tuple[str, int, str]]:
    return {(str(Path(f.file).resolve()), f.line, f.code) for f in report.findings}


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """Run from an empty folder, so no pyproject.toml of ours is picked up."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def render(report: doctor.DoctorReport) -> str:
    out = StringIO()
    doctor.print_summary(report, Console(width=120, file=out, color_system=None))
    return out.getvalue()


# ---- each hazard at its line ------------------------------------------------------------------

@pytest.mark.parametrize("path", HAZARD_FILES, ids=lambda p: str(p.relative_to(HAZARDS)))
def test_each_hazard_is_reported_with_its_code_at_its_line(path, elsewhere):
    report = doctor.doctor(str(path), env=False)
    want = expected(report.files)
    assert want, f"{path.name} plants no hazard"
    assert found(report) == want
    for f in report.findings:
        assert f.message and f.why == doctor.CODES[f.code].why and f.fix


def test_every_code_has_a_fixture_and_a_documented_row():
    planted = {code for p in HAZARD_FILES for code in EXPECT.findall(p.read_text())}
    assert planted == set(doctor.CODES)
    table = (ROOT / "docs" / "doctor-codes.md").read_text()
    documented = set(re.findall(r"^\| (RC\d{3}) \|", table, flags=re.M))
    assert documented == set(doctor.CODES)


CLEAN = ROOT / "fixtures" / "clean"
CLEAN_FILES = sorted(CLEAN.glob("*.py"))
TWIN = re.compile(r"\bTwin of (RC\d{3}(?: and RC\d{3})*)")
#: codes added for today's GPU stacks: each has a hazard fixture and a clean twin
GPU_CODES = {"RC109", "RC117", "RC118", "RC119", "RC120", "RC121", "RC122", "RC123"}


@pytest.mark.parametrize("path", CLEAN_FILES, ids=lambda p: p.name)
def test_clean_twins_are_not_flagged(path, elsewhere):
    """The fixed form of each hazard (TF32 off, flash-attn deterministic, a ring all-reduce,
    NVTE's switch at 0, memory written before it is read, deterministic algorithms on)."""
    report = doctor.doctor(str(path), env=False)
    assert TWIN.search(path.read_text()), f"{path.name} says of no code that it is its twin"
    assert report.findings == [], [(f.line, f.code, f.message) for f in report.findings]


def test_every_gpu_code_has_a_clean_twin():
    twins = {c for p in CLEAN_FILES for m in TWIN.findall(p.read_text())
             for c in re.findall(r"RC\d{3}", m)}
    assert GPU_CODES <= twins <= set(doctor.CODES)


def test_imported_project_files_are_scanned_but_not_installed_packages(elsewhere):
    report = doctor.doctor(str(HAZARDS / "uses_helper.py"), env=False)
    names = {Path(f).relative_to(HAZARDS).as_posix() for f in report.files}
    assert names == {"uses_helper.py", "helpers/__init__.py", "helpers/loaders.py",
                     "helpers/transforms.py"}
    assert {f.code for f in report.findings} == {"RC101", "RC106"}
    assert all("site-packages" not in f for f in report.files)


def test_package_target_scans_its_main_and_relative_imports(elsewhere):
    pkg = elsewhere / "trainpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text("from . import data\n\ndata.load()\n")
    (pkg / "data.py").write_text("import os\n\n\ndef load():\n"
                                 "    return [f for f in os.listdir('.')]\n")
    report = doctor.doctor("trainpkg", env=False)
    assert [(Path(f.file).name, f.line, f.code) for f in report.findings] == [("data.py", 5, "RC113")]


# ---- the references ----------------------------------------------------------------------------

def first_training_line(file: str) -> int:
    """The line of the file's first optimizer or backward call: where RC114 points."""
    lines = (ROOT / file).read_text().splitlines()
    return next(n for n, text in enumerate(lines, 1)
                if re.search(r"optim\.\w+\(|\.backward\(", text))


@pytest.mark.parametrize("target, file", [
    ("repro_check/workloads/mnist.py", "repro_check/workloads/mnist.py"),
    ("repro_check.workloads.mnist:main", "repro_check/workloads/mnist.py"),
    ("fixtures/train.py", "fixtures/train.py"),
    ("fixtures/manual_sgd.py", "fixtures/manual_sgd.py"),
    ("fixtures/script_main.py", "fixtures/script_main.py"),
])
def test_reference_workloads_report_only_that_they_leave_seeding_to_the_caller(target, file,
                                                                               monkeypatch):
    """They never seed torch (repro-check's runs do): RC114 and nothing else."""
    monkeypatch.chdir(ROOT)
    if not (ROOT / file).exists():
        pytest.skip(f"{file} is not in this checkout")
    report = doctor.doctor(target, env=False)
    assert report.files
    assert found(report) == {(str((ROOT / file).resolve()), first_training_line(file), "RC114")}
    assert report.exit_code == 1
    assert "never seeds torch" in render(report)


def test_tiny_fixture_reports_its_planted_os_entropy_and_no_seeding(monkeypatch):
    monkeypatch.chdir(ROOT)
    source = (ROOT / "fixtures" / "tiny.py").read_text().splitlines()
    line = next(n for n, text in enumerate(source, 1) if "os.urandom" in text)
    report = doctor.doctor("fixtures/tiny.py:main", env=False)
    assert [(f.code, f.line) for f in report.findings] == [
        ("RC111", line), ("RC114", first_training_line("fixtures/tiny.py"))]


# ---- silencing --------------------------------------------------------------------------------

def test_comments_silence_their_line_only(elsewhere):
    report = doctor.doctor(str(HAZARDS / "silenced.py"), env=False)
    assert [f.code for f in report.findings] == ["RC107"]
    quiet = {(f.code, f.line, by) for f, by in report.silenced}
    assert quiet == {("RC102", 9, "comment"), ("RC104", 13, "comment"), ("RC101", 14, "comment"),
                     ("RC112", 14, "comment"), ("RC111", 16, "comment")}
    text = render(report)
    assert "RC102" not in text and "RC107" in text and "5 silenced" in text


@pytest.mark.parametrize("toml", [
    '[tool.repro-check.doctor]\nignore = ["RC107"]\n',
    '[tool.repro-check]\ndoctor.ignore = ["rc107"]\n',
])
def test_pyproject_silences_a_code_in_output_and_json(toml, elsewhere, capsys):
    (elsewhere / "pyproject.toml").write_text(toml)
    sub = elsewhere / "sub"
    sub.mkdir()
    os.chdir(sub)  # found from the current folder upward
    out = elsewhere / "report.json"
    code = console_main(["doctor", str(HAZARDS / "silenced.py"), "--no-env", "--json", str(out)])
    assert code == 0
    assert "RC107" not in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["clean"] is True and data["findings"] == []
    assert {"code": "RC107", "file": str(HAZARDS / "silenced.py"), "line": 17,
            "by": "config"} in data["silenced"]


def test_ignore_option_silences_for_one_call(elsewhere):
    report = doctor.doctor(str(HAZARDS / "set_order.py"), ignore=["RC107"], env=False)
    assert report.clean and {by for _, by in report.silenced} == {"option"}


def test_unknown_code_in_a_comment_is_a_warning(elsewhere):
    script = elsewhere / "t.py"
    script.write_text("import torch\ntorch.seed()  # repro-check: ignore[RC999]\n")
    report = doctor.doctor(str(script), env=False)
    assert [f.code for f in report.findings] == ["RC105"]
    assert report.warnings == ["t.py:2: unknown code 'RC999' in an ignore comment"]


@pytest.mark.parametrize("toml, message", [
    ('[tool.repro-check.doctor]\nignore = ["RC1O1"]\n', "unknown code 'RC1O1'; codes: RC101, "),
    ('[tool.repro-check.doctor]\nignore = ["101"]\n', "unknown code '101' (did you mean 'RC101'?)"),
    ('[tool.repro-check.doctor]\nignore = "RC101"\n', "must be a list of codes"),
    ('[tool.repro-check.doctor]\nignored = ["RC101"]\n', "unknown key 'ignored'"),
    ('[tool.repro-check]\ndoctor = 3\n', "must be a table"),
    ('[tool.repro-check.doctor\nignore = 1\n', "invalid TOML"),
    ('[tool.repro-check]\nseed = -1\n', "seed: expected a whole number"),  # the whole table
])
def test_bad_config_is_one_line_and_exit_2(toml, message, elsewhere, capsys):
    (elsewhere / "pyproject.toml").write_text(toml)
    code = console_main(["doctor", str(HAZARDS / "reseed.py"), "--no-env"])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and err.count("\n") == 1 and err.startswith("repro-check: error: ")


# ---- JSON, output and exit codes --------------------------------------------------------------

def test_json_report_keys_and_environment(elsewhere, capsys):
    out = elsewhere / "doctor.json"
    code = console_main(["doctor", str(HAZARDS / "reseed.py"), "--json", str(out)])
    assert code == 1
    data = json.loads(out.read_text())
    assert {"environment", "findings", "clean"} <= set(data) and data["clean"] is False
    assert all(set(f) == {"code", "file", "line", "message", "why", "fix"} for f in data["findings"])
    assert [f["line"] for f in data["findings"]] == [11, 12, 13, 15, 16]
    env = data["environment"]
    for key in ("python", "torch", "cuda", "cudnn", "numpy", "devices", "threads", "flags"):
        assert key in env
    for name in ("PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        assert name in env["variables"]
    assert {"deterministic_algorithms", "cudnn_benchmark", "cudnn_deterministic"} <= set(env["flags"])
    assert env["threads"]["intra_op"] >= 1
    printed = capsys.readouterr().out
    assert "Environment" in printed and "PYTHONHASHSEED" in printed and "RC105" in printed
    assert [p.name for p in elsewhere.iterdir()] == ["doctor.json"]  # no temporary file left


def test_environment_only_without_target(elsewhere, capsys):
    assert console_main(["doctor"]) == 0
    assert "CUBLAS_WORKSPACE_CONFIG" in capsys.readouterr().out


def test_findings_render_with_file_line_why_and_fix(elsewhere):
    report = doctor.doctor(str(HAZARDS / "cudnn_benchmark.py"), env=False)
    text = render(report)
    assert f"{HAZARDS / 'cudnn_benchmark.py'}:6  RC102" in text
    assert "why: cuDNN times" in text and "fix: Set torch.backends.cudnn.benchmark = False" in text
    assert "3 hazards found" in text


@pytest.mark.parametrize("argv, message", [
    (["doctor", "missing.py"], "no such file: missing.py"),
    (["doctor", "no_such_module_xyz:main"], "no module named 'no_such_module_xyz'"),
    (["doctor", str(HAZARDS / "reseed.py") + ":mian"], "has no function 'mian'"),
    (["doctor", str(HAZARDS / "reseed.py"), "--ignore", "RC999"], "--ignore: unknown code 'RC999'"),
    (["doctor", "--no-env"], "nothing to do"),
    (["doctor", str(HAZARDS / "reseed.py"), "b.py"], "no such file: b.py"),  # several: each checked
])
def test_usage_errors_exit_2(argv, message, elsewhere, capsys):
    assert console_main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_unparsable_target_is_a_usage_error(elsewhere):
    (elsewhere / "broken.py").write_text("def main(:\n    pass\n")
    with pytest.raises(UsageError, match=r"broken.py has a syntax error: .*\(line 1\)"):
        doctor.doctor("broken.py", env=False)


def test_unparsable_imported_file_is_skipped_not_fatal(elsewhere):
    (elsewhere / "helper_broken.py").write_text("x = (\n")
    (elsewhere / "main.py").write_text("import helper_broken\nimport torch\ntorch.seed()\n")
    report = doctor.doctor("main.py", env=False)
    assert [f.code for f in report.findings] == ["RC105"]
    assert [s["file"] for s in report.skipped] == ["helper_broken.py"]


def test_module_target_that_cannot_be_found_raises_target_not_found(elsewhere):
    with pytest.raises(TargetNotFound):
        doctor.doctor("no_such_module_xyz", env=False)


# ---- the target is read, never run ------------------------------------------------------------

def test_doctor_never_imports_or_runs_the_target(tmp_path):
    marker = tmp_path / "marker"
    out = tmp_path / "report.json"
    env = {**os.environ, "REPRO_CHECK_TEST_MARKER": str(marker),
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(
        [sys.executable, "-m", "repro_check", "doctor", str(HAZARDS / "never_run.py"),
         "--no-env", "--json", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert not marker.exists()
    data = json.loads(out.read_text())
    assert [(f["code"], f["line"]) for f in data["findings"]] == [("RC102", 13)]
    assert data["environment"] is None
    assert "never_run" not in sys.modules


def test_identical_findings_share_one_why_and_fix(elsewhere):
    script = elsewhere / "many.py"
    script.write_text("import os\n" + "".join(f"k{i} = os.urandom(4)\n" for i in range(10)))
    report = doctor.doctor(str(script), env=False)
    assert sum(f.code == "RC111" for f in report.findings) == 10
    text = render(report)
    assert text.count("why: ") == len({f.code for f in report.findings})
    assert text.count("RC111  ") == 10 and "(all 10 above)" in text
