"""Shared helpers: run the CLI as a user would, in a subprocess, against fixtures/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
#: the full MNIST set (gzip IDX) for the slow tier: REPRO_CHECK_MNIST, else shared/ beside the checkout
SHARED_MNIST = Path(os.environ.get("REPRO_CHECK_MNIST") or ROOT.parent / "shared" / "data" / "mnist")


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str
    report: dict[str, Any] | None


def cli_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["NO_COLOR"] = "1"
    env["COLUMNS"] = "120"
    # tests that want them say so (REPRO_CHECK_MNIST would swap the embedded subset's 157 steps)
    for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "REPRO_CHECK_MNIST"):
        env.pop(name, None)
    env.update(extra)
    return env


def with_options(args: tuple[str, ...], options: list[str]) -> list[str]:
    """Insert repro-check options before the ``--`` that starts the target's own arguments."""
    argv = list(args)
    at = argv.index("--") if "--" in argv else len(argv)
    return argv[:at] + options + argv[at:]


def run_cli(*args: str, tmp: Path, cwd: Path = FIXTURES, traces: bool = True,
            timeout: float = 300) -> CliResult:
    """``python -m repro_check ARGS --json <tmp>/report.json [--trace-dir <tmp>/traces]``."""
    tmp.mkdir(parents=True, exist_ok=True)
    report_path = tmp / f"report-{len(list(tmp.glob('report-*.json')))}.json"
    options = ["--json", str(report_path)]
    if traces:
        options += ["--trace-dir", str(tmp / "traces")]
    argv = [sys.executable, "-m", "repro_check", *with_options(args, options)]
    proc = subprocess.run(argv, cwd=cwd, env=cli_env(), capture_output=True, text=True,
                          timeout=timeout)
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    return CliResult(proc.returncode, proc.stdout, proc.stderr, report)


def run_plain(*args: str, cwd: Path = FIXTURES, timeout: float = 300) -> CliResult:
    """``python -m repro_check ARGS`` exactly as given."""
    proc = subprocess.run([sys.executable, "-m", "repro_check", *args], cwd=cwd, env=cli_env(),
                          capture_output=True, text=True, timeout=timeout)
    return CliResult(proc.returncode, proc.stdout, proc.stderr, None)
