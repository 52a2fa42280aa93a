"""The documented pre-merge gate end to end, through the command line as CI runs it.

A project configures its target and golden path in pyproject.toml; ``repro-check record`` saves
the golden, ``repro-check verify`` passes on the unchanged code and fails at step 2 once the
learning rate is changed in the code when only losses are compared (step 1's loss is computed
before the first update), with JUnit, JSON, GitHub annotation and step summary saying so; with
every signal compared it fails at step 1, where the parameters after the first update differ.
Then the band of repeated runs.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import shutil
import struct
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from repro_check.trace.format import dumps, header_line, iter_trace, load_trace

from ..conftest import FIXTURES, cli_env, repro_check_cli, with_options

HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None

PUBLIC_KEYS = {"reproducible", "first_divergent_step", "divergent_signal", "steps", "metrics",
               "runs", "seed", "error"}

PYPROJECT = """\
[project]
name = "demo"

[tool.repro-check]
seed = 7
json = "reports/verify.json"
targets = [
    { target = "tiny.py:main", golden = "golden/tiny.json", args = ["--steps", "5"] },
]
"""


@dataclass
class Res:
    code: int
    stdout: str
    stderr: str


def cli(*args: str, cwd: Path, **env: str) -> Res:
    proc = repro_check_cli(list(args), cwd=cwd, env=cli_env(**env), timeout=300)
    return Res(proc.returncode, proc.stdout, proc.stderr)


def set_torch_version(golden: Path, version: str) -> None:
    """Pretend the golden was recorded with another torch (a valid trace all the same)."""
    lines = golden.read_text().splitlines(keepends=True)
    head = json.loads(lines[0])
    head["header"]["environment"]["torch"] = version
    golden.write_text(dumps(head) + "".join(lines[1:]))


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    project = tmp_path_factory.mktemp("project")
    shutil.copy(FIXTURES / "tiny.py", project / "tiny.py")
    (project / "pyproject.toml").write_text(PYPROJECT)
    (project / "reports").mkdir()
    (project / "notebooks").mkdir()
    summary = project / "step-summary.md"
    gh = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    out: dict[str, Any] = {"project": project, "summary": summary}

    out["record"] = cli("record", cwd=project)
    out["golden_header"] = load_trace(project / "golden" / "tiny.json").header
    out["same"] = cli("verify", "--junit", "reports/same.xml", cwd=project, **gh)
    out["same_json"] = json.loads((project / "reports" / "verify.json").read_text())
    out["summary_after_same"] = summary.read_text() if summary.exists() else ""

    # the pull request: a new default learning rate, and (pretend) a torch upgrade since
    tiny = project / "tiny.py"
    source = tiny.read_text()
    assert 'default=0.05' in source
    tiny.write_text(source.replace('p.add_argument("--lr", type=float, default=0.05)',
                                   'p.add_argument("--lr", type=float, default=0.08)'))
    set_torch_version(project / "golden" / "tiny.json", "2.13.0")
    # from a subfolder: the config is found upward and its target runs from the config's folder
    # with --report too where matplotlib is there (the page's own test reads it)
    html = ["--report", str(project / "reports" / "changed.html")] if HAS_MATPLOTLIB else []
    out["changed"] = cli("verify", "--signals", "loss", "--junit", "changed.xml", *html,
                         cwd=project / "notebooks", **gh)
    out["changed_json"] = json.loads((project / "reports" / "verify.json").read_text())
    # every signal compared: the same run's trace against the golden (diff compares as verify
    # does, golden first, its environment too), instead of a second run of the changed code
    changed_trace = out["changed_json"]["run_results"][-1]["trace"]
    out["changed_all"] = cli("diff", "golden/tiny.json", changed_trace, "--json", "all.json",
                             cwd=project)
    out["changed_all_json"] = json.loads((project / "all.json").read_text())
    out["changed_junit"] = project / "notebooks" / "changed.xml"
    return out


def test_record_writes_a_golden_trace_with_the_configured_settings(gate: dict[str, Any]) -> None:
    assert gate["record"].code == 0, gate["record"].stdout + gate["record"].stderr
    head = gate["golden_header"]
    assert head["golden"]["runs"] == 1 and head["golden"]["band"] is False
    assert head["seed"] == 7 and head["args"] == ["--steps", "5"] and head["target"] == "tiny.py:main"
    env = head["environment"]
    for key in ("python", "torch", "cuda", "cudnn", "device_name", "threads", "seed_components",
                "deterministic_algorithms", "target_sha256"):
        assert key in env, key
    assert env["threads"] == 1 and env["seed"] == 7
    assert len(load_trace(gate["project"] / "golden" / "tiny.json").steps) == 5


def test_unchanged_code_verifies(gate: dict[str, Any]) -> None:
    res, report = gate["same"], gate["same_json"]
    assert res.code == 0, res.stdout + res.stderr
    assert PUBLIC_KEYS <= set(report)
    assert report["reproducible"] is True and report["first_divergent_step"] is None
    assert report["steps"] == [5, 5] and report["runs"] == 2 and report["seed"] == 7
    assert report["judged"]["exact"] >= 5 and report["environment_differences"] == []
    assert "MATCHES GOLDEN" in res.stdout and "::error" not in res.stdout
    suite = ET.parse(gate["project"] / "reports" / "same.xml").getroot()
    cases = suite.findall(".//testcase")
    assert [c.get("name") for c in cases] == ["tiny.py:main"]
    assert cases[0].find("failure") is None and suite.get("failures") == "0"
    assert "✅" in gate["summary_after_same"] and "tiny.py:main" in gate["summary_after_same"]


def test_changed_learning_rate_fails_at_step_2(gate: dict[str, Any]) -> None:
    res, report = gate["changed"], gate["changed_json"]
    assert res.code == 1, res.stdout + res.stderr
    assert report["reproducible"] is False
    assert report["first_divergent_step"] == 2 and report["divergent_signal"] == "loss"
    assert report["divergence"]["policy"] == "exact bits"
    assert report["steps"] == [5, 5] and report["divergence"]["later_divergent_steps"] == 3
    assert "First divergence: step 2, signal loss, this run vs golden" in res.stdout


def test_every_signal_compared_sees_the_first_update_at_step_1(gate: dict[str, Any]) -> None:
    """The changed run's trace records every signal (``--signals`` only narrows what verify
    compares); compared whole against the golden, step 1 already differs."""
    res, report = gate["changed_all"], gate["changed_all_json"]
    assert res.code == 1, res.stdout + res.stderr
    assert report["steps"] == [5, 5]
    # the learning rate itself is recorded each step (the resume's lr signal, compared in every
    # check): the change is named as what it is, ahead of the parameters it moves
    assert report["first_divergent_step"] == 1 and report["divergent_signal"] == "lr"
    # the golden was recorded from other code (and, pretended, another torch): the environment
    assert report["cause"] == "environment" and "target source" in report["cause_detail"]


def test_the_divergence_names_the_environment_differences(gate: dict[str, Any]) -> None:
    import torch

    res, report = gate["changed"], gate["changed_json"]
    keys = [d["key"] for d in report["environment_differences"]]
    assert keys[:2] == ["target_sha256", "torch"]
    expected = f"golden recorded with torch 2.13.0, this run {torch.__version__}"
    assert expected in res.stdout
    assert "The divergence comes with 2 environment difference(s)" in res.stdout
    assert expected in report["environment_note"]


def test_ci_outputs_of_the_failure(gate: dict[str, Any]) -> None:
    res = gate["changed"]
    errors = [line for line in res.stdout.splitlines() if line.startswith("::error")]
    assert len(errors) == 1 and "first divergent step 2" in errors[0]
    assert "%0AReplay: cd " in errors[0] and "repro-check verify tiny.py:main" in errors[0]
    case = ET.parse(gate["changed_junit"]).getroot().find(".//testcase")
    failure = case.find("failure") if case is not None else None
    assert failure is not None and "first divergent step 2" in failure.get("message", "")
    assert "First divergence: step 2" in (failure.text or "")
    summary = gate["summary"].read_text()
    assert summary.startswith(gate["summary_after_same"])  # appended, not replaced
    added = summary[len(gate["summary_after_same"]):]
    assert "❌" in added and "| 2 | loss |" in added and "```sh" in added


@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="the HTML report needs the [report] extra")
def test_verify_writes_the_html_report(gate: dict[str, Any]) -> None:
    """verify takes --report as check does, the page with its own section naming the golden."""
    page = gate["project"] / "reports" / "changed.html"
    assert f"report: {page}" in gate["changed"].stdout
    html = page.read_text(encoding="utf-8")
    assert "<h2>Golden comparison</h2>" in html
    assert "against the golden <code>golden/tiny.json</code>" in html  # the path as configured
    assert "<th>golden</th><th>this run</th>" in html  # the sides are named as the terminal does
    assert 'id="verdict">NOT REPRODUCIBLE<' in html


def test_the_replay_line_reproduces_the_failure(gate: dict[str, Any]) -> None:
    replay = gate["changed_json"]["replay"]
    # run from a subfolder, the configured target ran from the config's folder: so does the replay
    cd = f"cd {shlex.quote(str(gate['project']))} && "
    assert replay.startswith(cd + "repro-check verify tiny.py:main --golden golden/tiny.json ")
    assert "--seed 7" in replay and "--max-steps 2" in replay and replay.endswith("-- --steps 5")
    assert "--signals loss" in replay
    assert replay in gate["changed"].stdout  # printed whole, on one line
    argv = shlex.split(replay[len(cd):])[1:]
    res = cli(*with_options(tuple(argv), ["--json", "replay.json"]), cwd=gate["project"])
    assert res.code == 1, res.stdout + res.stderr
    again = json.loads((gate["project"] / "replay.json").read_text())
    assert again["first_divergent_step"] == 2 and again["steps"] == [5, 2]


# ---- a band from repeated runs ---------------------------------------------------------------
def write_midpoint_trace(a: Path, b: Path, out: Path) -> None:
    """Trace ``a`` with each step's loss replaced by the float32 midpoint of ``a``'s and ``b``'s
    (every other signal of jitter.py's runs is the same in both)."""
    import numpy as np

    from repro_check.trace import values

    lines_a, lines_b = a.read_text().splitlines(), b.read_text().splitlines()
    assert len(lines_a) == len(lines_b)
    written = 0
    with out.open("w") as f:
        for la, lb in zip(lines_a, lines_b):
            ea, eb = json.loads(la), json.loads(lb)
            if "step" in ea:
                assert ea["signals"]["loss"]["dtype"] == "float32"
                la_, lb_ = (struct.unpack(">f", bytes.fromhex(e["signals"]["loss"]["bits"]))[0]
                            for e in (ea, eb))
                assert la_ != lb_, "the two runs record different losses"
                mid = np.float32((np.float64(la_) + np.float64(lb_)) / 2)
                assert min(la_, lb_) < mid < max(la_, lb_)
                ea["signals"]["loss"] = values.encode(mid)
                written += 1
            f.write(dumps(ea))
    assert written == 6


@pytest.fixture(scope="module")
def band(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("band")
    target = f"{FIXTURES / 'jitter.py'}:main"
    out: dict[str, Any] = {"tmp": tmp}
    out["record"] = cli("record", target, "--runs", "2", "-o", "goldens/band.json",
                        "--json", "record.json", cwd=tmp)
    # inside the band: each loss between the two recorded runs' (the midpoint of run 1's and run
    # 2's, as a run with --shift 0.5 would record it), compared with the golden as verify does
    inside = tmp / "inside-run.jsonl"
    if out["record"].code == 0:
        runs = [Path(r["trace"]) for r in
                json.loads((tmp / "record.json").read_text())["run_results"]]
        write_midpoint_trace(runs[0], runs[1], inside)
    out["inside"] = cli("diff", "goldens/band.json", str(inside), "--json", "inside.json", cwd=tmp)
    out["outside"] = cli("verify", target, "--golden", "goldens/band.json", "--json",
                         "outside.json",
                         "--", "--shift", "5", cwd=tmp)
    for name in ("record", "inside", "outside"):
        path = tmp / f"{name}.json"
        out[f"{name}_json"] = json.loads(path.read_text()) if path.exists() else None
    return out


@pytest.mark.slow
def test_record_runs_stores_the_spread_of_each_step(band: dict[str, Any]) -> None:
    assert band["record"].code == 0, band["record"].stdout + band["record"].stderr
    assert band["record_json"]["spread_steps"] == 6
    events = list(iter_trace(band["tmp"] / "goldens" / "band.json"))
    assert events[0]["golden"] == {**events[0]["golden"], "runs": 2, "band": True}
    steps = [e for e in events if "step" in e]
    assert len(steps) == 6 and all("loss" in s["band"] for s in steps)
    lo, hi = (steps[0]["band"]["loss"][k]["value"] for k in ("min", "max"))
    assert hi - lo == pytest.approx(1e-4, rel=0.01)  # runs 1 and 2 offset by 1e-4 and 2e-4


@pytest.mark.slow
def test_verify_accepts_values_inside_the_band(band: dict[str, Any]) -> None:
    """A run's losses between those of the recorded runs (a trace made from them) pass."""
    res, report = band["inside"], band["inside_json"]
    assert res.code == 0, res.stdout + res.stderr
    assert report["judged"]["band"] == 6
    assert report["divergence"] is None


@pytest.mark.slow
def test_verify_rejects_values_outside_the_band(band: dict[str, Any]) -> None:
    res, report = band["outside"], band["outside_json"]
    assert res.code == 1
    assert report["first_divergent_step"] == 1
    assert "band [" in report["divergence"]["policy"]


@pytest.mark.slow
def test_a_widened_band_accepts_them(band: dict[str, Any]) -> None:
    trace = band["outside_json"]["run_results"][1]["trace"]
    golden = str(band["tmp"] / "goldens" / "band.json")
    narrow = cli("diff", golden, trace, "--band-widen", "1.5", cwd=band["tmp"])
    assert narrow.code == 1  # offset 6e-4 is outside [0.75e-4, 2.25e-4]
    wide = cli("diff", golden, trace, "--band-widen", "20", cwd=band["tmp"])
    assert wide.code == 0, wide.stdout  # [-8.5e-4, 11.5e-4]
    assert "6 by band" in wide.stdout


def test_verify_refuses_a_golden_that_is_not_a_trace(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"reproducible": True}, indent=2))
    res = cli("verify", "tiny:main", "--golden", str(report), cwd=FIXTURES)
    assert res.code == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "not a trace" in res.stderr and "started" not in res.stderr
    stub = tmp_path / "header-only.json"
    stub.write_text(dumps(header_line({"target": "tiny:main"})) + dumps({"end": {}}))
    res = cli("verify", "tiny:main", "--golden", str(stub), cwd=FIXTURES)
    assert res.code == 2 and "nothing to verify against" in res.stderr


# ---- a golden for each argument list (--across 'args=A|B') ---------------------------------------
def test_goldens_of_argument_lists_are_named_by_them() -> None:
    from repro_check.errors import UsageError
    from repro_check.run import axes

    cells = axes.golden_cells("goldens/train.json", ["args=|--checkpointing|--approximate tanh"])
    assert [(c.label, path) for c, path in cells] == [
        ("args=(none)", "goldens/train.none.json"),
        ("args=--checkpointing", "goldens/train.checkpointing.json"),
        ("args=--approximate tanh", "goldens/train.approximate_tanh.json")]
    with pytest.raises(UsageError, match="would share the golden goldens/t.lr_0.1.json"):
        axes.golden_cells("goldens/t.json", ["args=--lr 0.1|--lr=0.1"])
    with pytest.raises(UsageError, match="take --across args=A|B only"):
        axes.golden_cells("t.json", ["threads=1,2"])


def test_record_and_verify_refuse_other_axes_before_any_run(tmp_path: Path) -> None:
    for argv in (["record", "flags.py:main", "-o", str(tmp_path / "g.json")],
                 ["verify", "flags.py:main", "--golden", str(tmp_path / "g.json")]):
        res = cli(*argv, "--across", "threads=1,2", cwd=FIXTURES)
        assert res.code == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert "take --across args=A|B only" in res.stderr and "started" not in res.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_each_argument_list_is_recorded_and_verified_against_its_own_golden(
        tmp_path: Path) -> None:
    """record writes a golden per list; verify passes each against its own, and a golden
    recorded from the other list fails at the step where the lists part."""
    golden = tmp_path / "g.json"
    rec = cli("record", "flags.py:main", "--across", "args=|--approximate tanh", "-o",
              str(golden), "--junit", str(tmp_path / "rec.xml"), "--", "--steps", "3",
              cwd=FIXTURES)
    assert rec.code == 0, rec.stdout + rec.stderr
    none, tanh = tmp_path / "g.none.json", tmp_path / "g.approximate_tanh.json"
    assert none.exists() and tanh.exists() and not golden.exists()
    assert "recording flags.py:main (args=--approximate tanh) -> " in rec.stderr
    junit = tmp_path / "ver.xml"
    ver = cli("verify", "flags.py:main", "--across", "args=|--approximate tanh", "--golden",
              str(golden), "--junit", str(junit), "--no-control", cwd=FIXTURES)
    assert ver.code == 0, ver.stdout + ver.stderr
    assert ver.stdout.count("MATCHES GOLDEN") == 2
    names = [c.get("name") for c in ET.parse(junit).getroot().iter("testcase")]
    assert names == ["flags.py:main -- --steps 3", "flags.py:main -- --steps 3 --approximate tanh"]
    plain = none.read_bytes()
    shutil.copy(tanh, none)  # the plain list now meets the tanh list's golden
    ver = cli("verify", "flags.py:main", "--across", "args=|--approximate tanh", "--golden",
              str(golden), "--no-control", "--", "--steps", "3", cwd=FIXTURES)
    assert ver.code == 1 and ver.stdout.count("MATCHES GOLDEN") == 1, ver.stdout
    assert "NOT REPRODUCIBLE" in ver.stdout or "DIFFERS" in ver.stdout.upper()
    tanh.write_bytes(plain)  # the tanh list's golden recorded without --approximate tanh
    ver = cli("verify", "flags.py:main", "--across", "args=|--approximate tanh", "--golden",
              str(golden), cwd=FIXTURES)
    assert ver.code == 2 and len(ver.stderr.strip().splitlines()) == 1, ver.stderr
    assert "which do not end with args=--approximate tanh's" in ver.stderr
