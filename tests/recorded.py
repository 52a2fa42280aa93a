"""Checks replayed from recorded runs: everything a check does after its runs' records arrive
(the runner's loop, the comparison, the cause, the report) on what real runs of a fixture
recorded, with no process started, so a test of those layers costs no torch import.

``tests/data/recorded/<scenario>/run-N.jsonl`` are the traces of one real check of each
scenario in :data:`SCENARIOS`, written by ``python -m tests.recorded [NAME ...]`` with this
checkout's path stored as ``{ROOT}`` (put back on reading, so the files serve any clone). The
slow tier records every scenario again and checks that the fresh check and the replay of the
stored traces give the same verdict, step, signal and cause (``tests/test_recorded.py``), so a
stored trace cannot drift from what the code records now.

The negative control is not replayed: a check whose runs come from a launcher starts no process
of its own, so a replayed check that agrees reports its control as not run (and why); the live
twins and ``tests/run/test_control.py`` run it.
"""

from __future__ import annotations

import io
import json
import queue
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from repro_check.report.model import Report
from repro_check.report.terminal import make_console, print_summary
from repro_check.run.exitstatus import status_of
from repro_check.run.options import CHECK_RUNS, RunOptions, build_options, keyword_values
from repro_check.run.runner import RunSpec, apply_event
from repro_check.trace.format import TraceWriter, dumps, read_record
from repro_check.trace.protocol import Record
from repro_check.trace.results import RunResult
from repro_check.commands.check import run_check

from .conftest import CliResult

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "recorded"
PLACEHOLDER = "{ROOT}"


@dataclass(frozen=True)
class Scenario:
    """A fixture's TARGET and the check options it is recorded (and replayed) with."""

    target: str
    options: dict[str, Any] = field(default_factory=dict)

    def run_options(self, trace_dir: Path) -> RunOptions:
        target = self.target.replace(PLACEHOLDER, str(ROOT))
        given = {**self.options, "trace_dir": str(trace_dir)}
        return build_options(target, given=keyword_values(given), base=None,
                             defaults={"runs": CHECK_RUNS})


ZOO = f"{PLACEHOLDER}/fixtures/zoo"
CLI_TINY = f"{PLACEHOLDER}/tests/cli/cli_tiny.py:main"
SAVED = f"{PLACEHOLDER}/fixtures/saved"

#: every recorded scenario: the tests that read one say which
SCENARIOS: dict[str, Scenario] = {
    "clock_seeded": Scenario(f"{ZOO}/clock_seeded.py:main", {"jobs": 2}),
    "model_before_seed": Scenario(f"{ZOO}/model_before_seed.py:main", {"no_seed": True}),
    "randint_seed": Scenario(f"{ZOO}/randint_seed.py:main", {"no_seed": True}),
    "worker_reseed_fork": Scenario(f"{ZOO}/worker_reseed.py:main", {"max_steps": 2}),
    "worker_reseed_spawn": Scenario(f"{ZOO}/worker_reseed.py:spawned",
                                    {"max_steps": 2, "without": ["dataloader"]}),
    "clock_hour_seed": Scenario(f"{ZOO}/clock_hour_seed.py:main", {"jobs": 2}),
    "early_exit": Scenario(f"{PLACEHOLDER}/fixtures/failures/early_exit.py:main",
                           {"runs": 3, "jobs": 2, "args": ["--at", "4", "--sys-exit-in-run", "2",
                                                           "--os-exit-in-run", "3"]}),
    # the packaged workload unseeded, and tiny.py with a planted difference in run 2 of 3
    "mnist_unseeded": Scenario("repro_check.workloads.mnist:main",
                               {"no_seed": True, "max_steps": 3}),
    # tests/cli/cli_tiny.py (tests/cli/test_cli.py's checks). It updates by hand: its steps
    # record no parameters, and a 1-ulp change in one weight after step 1 does not reach its
    # loss or gradients at step 2, so the agreeing checks would be UNVERIFIED; what they test is
    # NaN, --max-steps and tolerances, with the control off
    "cli_planted": Scenario(CLI_TINY, {"seed": 5, "args": ["--diverge-at", "7"]}),
    "cli_nan": Scenario(CLI_TINY, {"max_steps": 5, "control": False, "args": ["--nan-at", "3"]}),
    "cli_metric_shifted": Scenario(CLI_TINY, {"max_steps": 5, "rtol": 0.01, "args": [
        "--steps", "5", "--metric-shift-in-run", "2"]}),
    "cli_tolerated": Scenario(CLI_TINY, {"atol": 0.06, "control": False, "args": [
        "--steps", "5", "--metric-shift-in-run", "2"]}),
    # what the runs leave (fixtures/saved): every step agrees, a saved file or the end state
    # differs, and the twins whose saves and state agree (timestamps and pids in them)
    "saved_ema_entropy": Scenario(f"{SAVED}/ema.py", {"args": ["--decay-from-entropy"]}),
    "saved_ema_twin": Scenario(f"{SAVED}/ema.py"),
    "savers_differ": Scenario(f"{SAVED}/savers.py:main", {"args": ["--differ"]}),
    "savers_twin": Scenario(f"{SAVED}/savers.py:main"),
    "bn_perturbed": Scenario(f"{SAVED}/bn_buffers.py:main", {"args": ["--perturb"]}),
    "bn_twin": Scenario(f"{SAVED}/bn_buffers.py:main"),
    "tiny_clean": Scenario(f"{PLACEHOLDER}/fixtures/tiny.py:main", {"seed": 5}),
    "tiny_three_runs": Scenario(f"{PLACEHOLDER}/fixtures/tiny.py:main",
                                {"seed": 5, "runs": 3, "args": ["--diverge-at", "7",
                                                                "--diverge-in-run", "2"]}),
}


class _RecordedRun:
    """One run replayed from its recorded trace: its records go on the runner's queue from a
    thread (the queue is bounded, as for a live run), its end is the recorded end."""

    scan_error = None

    def __init__(self, spec: RunSpec, events: queue.Queue[tuple[Any, ...]], path: Path) -> None:
        self.spec = spec
        self.result = RunResult(spec.index)
        self.open_streams = 1
        self.end: dict[str, Any] = {}
        self.writer = TraceWriter(spec.trace_path) if spec.trace_path else None
        lines = path.read_text().replace(PLACEHOLDER, str(ROOT)).splitlines()
        self.thread = threading.Thread(target=self._pump, args=(lines, events), daemon=True)
        self.thread.start()

    def _pump(self, lines: Sequence[str], events: queue.Queue[tuple[Any, ...]]) -> None:
        for line in lines:
            obj = json.loads(line)
            if "end" in obj:
                self.end = obj["end"]
                continue
            events.put(("event", self.spec.index, read_record(line), line.encode("utf-8")))
        events.put(("eof", self.spec.index))

    @property
    def ready(self) -> bool:
        return self.open_streams == 0 and not self.thread.is_alive()

    def handle(self, event: Record, raw: bytes) -> None:
        apply_event(self.result, event)
        if self.writer is not None:
            self.writer.write_raw(raw.decode("utf-8"))

    def stop(self, reason: Any, graceful: bool = True) -> None:
        """A stop (fail-fast) cannot shorten what was recorded: the records stand."""

    def tick(self, now: float) -> None:
        pass

    def kill_now(self) -> None:
        pass

    def give_up(self) -> None:
        pass

    def finish(self) -> RunResult:
        self.thread.join()
        res, end = self.result, self.end
        res.status = status_of(end.get("status", "completed"))
        res.returncode = end.get("returncode")
        res.signal = end.get("signal")
        res.seconds = float(end.get("seconds", 0.0))
        res.output_tail = str(end.get("output_tail", ""))
        if self.writer is not None:
            self.writer.write_raw(dumps({"end": end}))
            res.trace_path = str(self.writer.close())
        return res


class Recorded:
    """A launcher (:class:`repro_check.run.runner.Launcher`) that replays run N from
    ``folder/run-N.jsonl`` instead of starting it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def start(self, spec: RunSpec, events: queue.Queue[tuple[Any, ...]]) -> _RecordedRun:
        return _RecordedRun(spec, events, self.folder / f"run-{spec.index}.jsonl")


def replay(name: str, trace_dir: Path) -> Report:
    """The report of a check of scenario ``name`` replayed from its stored traces."""
    return run_check(SCENARIOS[name].run_options(trace_dir), launcher=Recorded(DATA / name))


def live(name: str, trace_dir: Path) -> Report:
    """A real check of scenario ``name``, with the options it is recorded with."""
    return run_check(SCENARIOS[name].run_options(trace_dir))


#: a fixture's params for a test asserted on both: the replay in the fast tier, the real
#: check in the slow one (``request.param``, given to :func:`replayed_or_live`)
BOTH = [pytest.param("replayed"), pytest.param("live", marks=pytest.mark.slow)]


def replayed_or_live(how: str, name: str, tmp: Path) -> Report:
    """The check of scenario ``name`` replayed or run for real, as ``how`` (a param of
    :data:`BOTH`) says."""
    if how == "live":
        return live(name, tmp / f"{name}-live")
    return replay(name, tmp / f"{name}-replayed")


def cli_result(report: Report) -> CliResult:
    """The check as the command line shows it: its exit status, its summary as printed and its
    JSON report (no stderr: nothing here writes one)."""
    return CliResult(report.exit_code, terminal(report), "", report.to_dict())


def terminal(report: Report) -> str:
    """What the check's summary prints in a terminal 120 columns wide, without colour."""
    out = io.StringIO()
    print_summary(report, make_console(file=out, width=120))
    return out.getvalue()


def record(name: str, folder: Path) -> Report:
    """Check scenario ``name`` for real and store its traces in ``folder`` (paths under this
    checkout written as the placeholder)."""
    with tempfile.TemporaryDirectory(prefix="recorded-") as tmp:
        report = live(name, Path(tmp))
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("run-*.jsonl"):
            old.unlink()
        for r in report.results:
            assert r.trace_path is not None, f"{name}: run {r.index} kept no trace"
            text = Path(r.trace_path).read_text().replace(str(ROOT), PLACEHOLDER)
            (folder / f"run-{r.index}.jsonl").write_text(text)
    return report


def main(names: Sequence[str]) -> int:
    for name in names or list(SCENARIOS):
        report = record(name, DATA / name)
        print(f"{name}: reproducible={report.reproducible} step={report.first_divergent_step} "
              f"signal={report.divergent_signal} cause={report.cause}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
