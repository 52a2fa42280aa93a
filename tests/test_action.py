"""The GitHub Action (action.yml): its steps run as a runner runs a composite action, in order,
on a sample project, with GitHub's files and variables set (GITHUB_STEP_SUMMARY, GITHUB_OUTPUT,
GITHUB_ACTIONS=true) and each input passed through ``${{ ... }}`` as GitHub substitutes it.

The ``uses:`` steps (actions/setup-python, actions/upload-artifact) are other repositories'
actions, not run here: the Python running the tests stands in for setup-python's, and the
reports the upload step would take are checked in the folder it names. Every ``run:`` step is
executed with bash as GitHub runs it (``bash --noprofile --norc -eo pipefail``). The install step
really installs repro-check from a copy of this checkout (the action's path), with
``--no-deps --no-build-isolation --target`` so that it needs no network and leaves the test's own
environment alone.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import ROOT

ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")

TRAIN = textwrap.dedent("""\
    import torch

    LR = {lr}


    def main():
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        x, y = torch.randn(16, 4), torch.randn(16, 1)
        for _ in range(4):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
        return {{"loss": loss.item()}}
    """)


@dataclass
class Runner:
    """A composite action's steps run one after the other, as a GitHub runner runs them."""

    workspace: Path
    action_path: Path
    inputs: dict[str, str]
    env: dict[str, str]
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    log: list[tuple[str, int, str]] = field(default_factory=list)

    def value(self, expr: str) -> str:
        """A context value, as ``${{ expr }}`` gives it."""
        parts = expr.split(".")
        if parts[0] == "inputs" and len(parts) == 2:
            declared = ACTION["inputs"][parts[1]]  # an undeclared input is a KeyError
            return self.inputs.get(parts[1], str(declared.get("default", "")))
        if expr == "github.action_path":
            return str(self.action_path)
        if parts[0] == "steps" and len(parts) == 4 and parts[2] == "outputs":
            return self.outputs.get(parts[1], {}).get(parts[3], "")
        raise AssertionError(f"action.yml uses an expression this test does not know: {expr}")

    def substitute(self, text: Any) -> str:
        return EXPRESSION.sub(lambda m: self.value(m.group(1)), str(text))

    def run_step(self, step: Mapping[str, Any]) -> int:
        assert "if" not in step, f"a run step with a condition: {step.get('name')}"
        assert step.get("shell") == "bash", "composite run steps must name their shell"
        files = {name: self.workspace.parent / f"{name.lower()}.txt" for name in
                 ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH")}
        for path in files.values():
            path.write_text("")
        env = {**self.env, **{k: str(v) for k, v in files.items()}}
        env.update({k: self.substitute(v) for k, v in (step.get("env") or {}).items()})
        cwd = self.workspace / self.substitute(step.get("working-directory", "."))
        script = self.workspace.parent / "step.sh"
        script.write_text(self.substitute(step["run"]))
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                              cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        self.log.append((step.get("name", ""), proc.returncode, proc.stdout + proc.stderr))
        if step.get("id"):
            self.outputs[step["id"]] = read_outputs(files["GITHUB_OUTPUT"].read_text())
        return proc.returncode

    def run(self) -> int:
        """Every step in order; the job fails at the first run step that fails."""
        assert ACTION["runs"]["using"] == "composite"
        for step in ACTION["runs"]["steps"]:
            if "uses" in step:
                self.skipped.append(step["uses"].split("@")[0])
                continue
            code = self.run_step(step)
            if code != 0:
                return code
        return 0


def read_outputs(text: str) -> dict[str, str]:
    """``name=value`` lines and ``name<<DELIM`` blocks, as GitHub reads GITHUB_OUTPUT."""
    out: dict[str, str] = {}
    lines = iter(text.splitlines())
    for line in lines:
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            body = []
            for more in lines:
                if more == delim:
                    break
                body.append(more)
            out[name] = "\n".join(body)
        elif "=" in line:
            name, value = line.split("=", 1)
            out[name] = value
    return out


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """The action's path (a copy of this checkout's package, as a runner checks the action
    out) and the folder its install step installs repro-check to."""
    base = tmp_path_factory.mktemp("action")
    action_path = base / "repro-check"
    action_path.mkdir()
    for name in ("action.yml", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, action_path / name)
    shutil.copytree(ROOT / "repro_check", action_path / "repro_check",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return action_path, base / "site"


def project(tmp: Path, name: str, golden_lr: float, run_lr: float) -> Path:
    """A sample project: train.py, and a golden recorded with ``golden_lr``; train.py then set
    to ``run_lr`` (the same: a reproducible golden; another: a change that moves the numbers)."""
    root = tmp / name / "workspace"
    root.mkdir(parents=True)
    (root / "train.py").write_text(TRAIN.format(lr=golden_lr))
    (root / "goldens").mkdir()
    record = subprocess.run([sys.executable, "-m", "repro_check", "record", "train.py:main",
                             "--seed", "1", "-o", "goldens/train.json"], cwd=root,
                            capture_output=True, text=True, timeout=300)
    assert record.returncode == 0, record.stdout + record.stderr
    (root / "train.py").write_text(TRAIN.format(lr=run_lr))
    return root


def github_env(root: Path, site: Path) -> dict[str, str]:
    """The environment of a step on a runner: GitHub's variables and files, the Python that
    setup-python would put first on PATH, after the folder the install step fills."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "REPRO_CHECK_"))}
    summary = root.parent / "step_summary.md"
    summary.write_text("")
    env.update(GITHUB_ACTIONS="true", CI="true", GITHUB_WORKSPACE=str(root),
               GITHUB_STEP_SUMMARY=str(summary), RUNNER_TEMP=str(root.parent),
               PATH=os.pathsep.join([str(site / "bin"), str(Path(sys.executable).parent),
                                     env.get("PATH", "")]),
               PYTHONPATH=str(site))
    return env


@dataclass
class Job:
    code: int
    runner: Runner
    root: Path

    @property
    def summary(self) -> str:
        return (self.root.parent / "step_summary.md").read_text()

    def output(self, step: str) -> str:
        return next(text for name, _, text in self.runner.log if name == step)


def run_job(root: Path, installed: tuple[Path, Path], **inputs: str) -> Job:
    action_path, site = installed
    inputs.setdefault("pip-args", f"--quiet --no-deps --no-build-isolation --upgrade "
                                  f"--target {site}")
    runner = Runner(root, action_path, inputs, github_env(root, site))
    return Job(runner.run(), runner, root)


@pytest.fixture(scope="module")
def good(tmp_path_factory, installed) -> Job:
    root = project(tmp_path_factory.mktemp("good"), "good", 0.05, 0.05)
    return run_job(root, installed, targets="train.py:main", goldens="goldens/train.json",
                   args="--max-steps 4")


@pytest.fixture(scope="module")
def bad(tmp_path_factory, installed, good) -> Job:
    root = project(tmp_path_factory.mktemp("bad"), "bad", 0.05, 0.2)
    return run_job(root, installed, targets="train.py:main", goldens="goldens/train.json")


def test_the_action_declares_its_inputs_and_outputs():
    inputs = ACTION["inputs"]
    for name in ("targets", "goldens", "command", "args", "python-version", "pip-args"):
        assert name in inputs and "description" in inputs[name]
    assert set(ACTION["outputs"]) == {"exit-code", "reports"}
    steps = ACTION["runs"]["steps"]
    assert [s.get("uses", "run").split("@")[0] for s in steps] == [
        "actions/setup-python", "run", "run", "actions/upload-artifact", "run"]
    # inputs reach the shell through the environment only, never pasted into a script
    for step in steps:
        assert not EXPRESSION.search(step.get("run", "")), step.get("name")


@pytest.mark.slow
def test_a_reproducible_golden_passes_the_job(good, installed):
    _, site = installed
    assert good.code == 0, good.runner.log
    assert good.runner.skipped == ["actions/setup-python", "actions/upload-artifact"]
    assert [(name, code) for name, code, _ in good.runner.log] == [
        ("Install repro-check", 0), ("Run repro-check", 0), ("Fail on exit codes 1-4", 0)]
    assert (site / "repro_check" / "__init__.py").is_file() and (site / "bin" / "repro-check").is_file()
    assert "exit 0" in good.output("Run repro-check")
    reports = Path(good.runner.outputs["verify"]["reports"])
    assert reports == good.root / "repro-check-reports"
    assert sorted(p.name for p in reports.iterdir()) == [
        "target-1.html", "target-1.json", "target-1.xml"]
    assert "| `train.py:main` | ✅ reproducible |" in good.summary
    assert "::error" not in good.output("Run repro-check")


@pytest.mark.slow
def test_a_golden_that_no_longer_reproduces_fails_the_job(bad):
    assert bad.code == 1
    assert bad.runner.outputs["verify"]["exit-code"] == "1"
    run = bad.output("Run repro-check")
    # repro-check's own annotation and summary, then the action's failing step
    assert "::error" in run and "exit 1" in run
    assert "| `train.py:main` | ❌ not reproducible |" in bad.summary
    assert "::error title=repro-check::not reproducible (exit 1)" in bad.output(
        "Fail on exit codes 1-4")
    assert (bad.root / "repro-check-reports" / "target-1.json").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("inputs, code", [
    ({"targets": "missing.py:main", "goldens": "goldens/train.json"}, 2),
    ({"targets": "train.py:main", "goldens": "a.json\nb.json"}, 2),
    ({"targets": "train.py:main", "command": "record"}, 2),
    ({"targets": "crash.py"}, 3),
])
def test_usage_errors_and_failing_targets_fail_the_job(inputs, code, good, installed, tmp_path):
    root = tmp_path / "workspace"
    shutil.copytree(good.root, root, ignore=shutil.ignore_patterns("repro-check-reports",
                                                                   ".repro-check"))
    (root / "crash.py").write_text("raise RuntimeError('boom')\n")
    job = run_job(root, installed, **{"command": "check", **inputs})
    assert job.code == code and job.runner.outputs["verify"]["exit-code"] == str(code)
