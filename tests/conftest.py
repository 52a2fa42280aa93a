"""Shared helpers: run the CLI as a user would, in a subprocess, against fixtures/."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

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
    # checks in parallel test workers must not remove each other's traces before a test reads
    # them (tests/run/test_retention.py sets a limit of its own)
    env["REPRO_CHECK_KEEP_RUNS"] = "0"
    env.update(extra)
    return env


def with_options(args: tuple[str, ...], options: list[str]) -> list[str]:
    """Insert repro-check options before the ``--`` that starts the target's own arguments."""
    argv = list(args)
    at = argv.index("--") if "--" in argv else len(argv)
    return argv[:at] + options + argv[at:]


class _ForkServer:
    """The client of tests/forkserver.py: ``python -m repro_check ARGS`` forked from an
    interpreter that has imported the command line already (see that module for why this
    measures the same thing). Started on first use, ended with the session."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.buffer = b""

    def start(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            self.buffer = b""
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("forkserver.py"))], cwd=ROOT,
                env=cli_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        return self.proc

    def _reply(self, proc: subprocess.Popen[bytes], deadline: float | None) -> dict[str, Any]:
        """The server's next line (read off the descriptor: select sees no buffered lines)."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while b"\n" not in self.buffer:
            if deadline is not None:
                left = max(0.0, deadline - time.monotonic())
                if not select.select([fd], [], [], left)[0]:
                    raise TimeoutError
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError("the tests' fork server ended")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        reply: dict[str, Any] = json.loads(line)
        return reply

    def run(self, argv: list[str], cwd: Path, env: dict[str, str],
            timeout: float) -> tuple[int, str, str]:
        proc = self.start()
        assert proc.stdin is not None
        with tempfile.TemporaryDirectory(prefix="cli-out-") as folder:
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            request = {"argv": argv, "cwd": str(cwd), "env": env, "stdout": str(out),
                       "stderr": str(err)}
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            pid = self._reply(proc, None)["pid"]
            try:
                status = self._reply(proc, time.monotonic() + timeout)["status"]
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                self._reply(proc, None)
                raise subprocess.TimeoutExpired(["repro_check", *argv], timeout) from None
            return (os.waitstatus_to_exitcode(status), out.read_text(),
                    err.read_text())

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()


FORK_SERVER = _ForkServer()


def pytest_configure(config: pytest.Config) -> None:
    """A suite started in the background (``make test &`` in a script) inherits SIGINT ignored,
    and every process it starts would too: the tests that press Ctrl-C need it handled as in a
    terminal (an ignored signal stays ignored through exec; a handled one is reset)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_sessionfinish(session: pytest.Session) -> None:
    FORK_SERVER.stop()  # waited for: its CPU time (and its children's) counts in ours


def repro_check_cli(argv: list[str], cwd: Path = FIXTURES, timeout: float = 300,
                    env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m repro_check ARGV`` in ``cwd`` with ``env`` (default :func:`cli_env`), its
    output captured as text. Forked from the fork server; a fresh process when
    REPRO_CHECK_TEST_FRESH_CLI=1 (to compare the two)."""
    env = cli_env() if env is None else env
    if os.environ.get("REPRO_CHECK_TEST_FRESH_CLI") == "1":
        return subprocess.run([sys.executable, "-m", "repro_check", *argv], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=timeout)
    code, out, err = FORK_SERVER.run(argv, cwd, env, timeout)
    return subprocess.CompletedProcess(["repro_check", *argv], code, out, err)


def run_cli(*args: str, tmp: Path, cwd: Path = FIXTURES, traces: bool = True,
            timeout: float = 300, env: dict[str, str] | None = None) -> CliResult:
    """``python -m repro_check ARGS --json <tmp>/report.json [--trace-dir <tmp>/traces]``
    (``env``: the environment, default :func:`cli_env`)."""
    tmp.mkdir(parents=True, exist_ok=True)
    report_path = tmp / f"report-{len(list(tmp.glob('report-*.json')))}.json"
    options = ["--json", str(report_path)]
    if traces:
        options += ["--trace-dir", str(tmp / "traces")]
    proc = repro_check_cli(with_options(args, options), cwd=cwd, timeout=timeout, env=env)
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    return CliResult(proc.returncode, proc.stdout, proc.stderr, report)


def run_plain(*args: str, cwd: Path = FIXTURES, timeout: float = 300) -> CliResult:
    """``python -m repro_check ARGS`` exactly as given."""
    proc = repro_check_cli(list(args), cwd=cwd, timeout=timeout)
    return CliResult(proc.returncode, proc.stdout, proc.stderr, None)


def _dispatch_modes() -> int:
    """Torch dispatch modes on this thread's stack (0 before torch is imported)."""
    if "torch" not in sys.modules:
        return 0
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    return len(_get_current_dispatch_mode_stack())


@pytest.fixture(autouse=True)
def no_dispatch_mode_left() -> Iterator[None]:
    """A test that leaves a dispatch mode entered fails itself: under one, torch.compile runs
    every later test's compiled model eagerly, far from the test that caused it."""
    before = _dispatch_modes()
    yield
    left = _dispatch_modes()
    assert left <= before, f"the test left {left - before} torch dispatch mode(s) entered"
