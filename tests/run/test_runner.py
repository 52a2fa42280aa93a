"""The runner: parallel runs give the same bits as sequential ones; bounded output tail, line
splitting, and a run that will not exit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import repro_check
from repro_check.run import runner
from repro_check import targets
from repro_check.run.procs import Tail, is_alive
from repro_check.trace.format import MAX_LINE_BYTES, load_trace
from repro_check.trace.protocol import RunConfig

from ..conftest import FIXTURES


#: fixtures/tiny.py's training (random data, an MLP, 25 steps of SGD on random batches) with the
#: update written out: torch.optim's first use imports torch._dynamo, seconds a run
SGD_BY_HAND = """
import torch
import torch.nn as nn


def main():
    x = torch.randn(256, 8)
    y = x @ torch.randn(8, 1) + 0.1 * torch.randn(256, 1)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    for step in range(1, 26):
        idx = torch.randint(0, 256, (32,))
        loss = nn.functional.mse_loss(model(x[idx]), y[idx])
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.05 * p.grad
                p.grad = None
    with torch.no_grad():
        return {"mse": nn.functional.mse_loss(model(x), y).item()}
"""


def test_parallel_runs_give_the_same_bits_as_sequential(tmp_path: Path) -> None:
    target = tmp_path / "sgd_by_hand.py"
    target.write_text(SGD_BY_HAND)
    # the sequential reference is one run (a record makes one, alone); a check's two runs go
    # side by side (jobs=2)
    settings: dict[str, Any] = dict(seed=3, threads=2)
    reports = {
        1: repro_check.record(f"{target}:main", tmp_path / "golden.json", runs=1,
                              trace_dir=tmp_path / "jobs1", **settings),
        2: repro_check.check(f"{target}:main", jobs=2, trace_dir=tmp_path / "jobs2", **settings),
    }
    steps = {}
    for jobs, report in reports.items():
        assert report.exit_code == 0 and len(report.results) == jobs
        traces = [load_trace(r.trace_path) for r in report.results]
        steps[jobs] = [[s.signals for s in t.steps] for t in traces]
        assert all(t.header["environment"]["threads"] == 2 for t in traces)
        assert [len(t.steps) for t in traces] == [25] * jobs
    assert steps[1][0] == steps[2][0] == steps[2][1]


def test_tail_keeps_the_last_bytes_in_bounded_memory() -> None:
    tail = Tail(limit=1000)
    for i in range(10_000):
        tail.add(f"line {i}\n".encode())
        assert tail.size <= 1000 + 16 and len(tail.chunks) <= 257
    text = tail.text()
    assert text.endswith("line 9999\n") and "earlier bytes not kept" in text.splitlines()[0]


def test_lines_are_split_across_chunks_and_oversized_ones_dropped_and_said() -> None:
    got: list[bytes] = []
    long: list[None] = []
    lines = runner._Lines(got.append, lambda: long.append(None))
    lines.add(b'{"a"')
    lines.add(b': 1}\n{"b": 2}\n{"c"')
    assert got == [b'{"a": 1}', b'{"b": 2}'] and long == []
    lines.add(b"x" * (MAX_LINE_BYTES + 10))  # a runaway line is dropped, not kept in memory
    assert len(lines.partial) == 0 and len(long) == 1
    lines.add(b"still the same line\nnext\n")
    assert got[2:] == [b"next"] and len(long) == 1  # said once per line
    lines.add(b"y" * (MAX_LINE_BYTES + 1) + b"\nafter\n")  # over the limit in one chunk
    assert got[3:] == [b"after"] and len(long) == 2


class _Events:
    def __init__(self) -> None:
        self.finished: list[runner.RunResult] = []

    def run_started(self, index: int) -> None:
        pass

    def event(self, index: int, event: dict[str, Any]) -> None:
        pass

    def run_finished(self, result: runner.RunResult) -> None:
        self.finished.append(result)


@pytest.mark.slow
def test_a_run_that_does_not_exit_after_returning_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A non-daemon thread keeps the interpreter alive after the target returned: what it
    recorded is complete, so it is stopped after a grace period and reported as completed."""
    monkeypatch.setattr(runner, "FINISH_GRACE", 1.0)
    pid_file = tmp_path / "pids.txt"
    spec = runner.RunSpec(
        RunConfig(run=1, target=targets.parse(f"{FIXTURES / 'failures' / 'leaky.py'}:main"),
                  args=("--linger", "--pid-file", str(pid_file))), timeout=120,
        trace_path=tmp_path / "run-1.jsonl",
    )
    events = _Events()
    [result] = runner.run_all([spec], events)
    assert result.status == "completed" and result.steps == 3
    assert any("did not exit within 1 s after the target returned" in w for w in result.warnings)
    assert events.finished == [result]
    pids = [int(line.split()[-1]) for line in pid_file.read_text().splitlines()]
    assert len(pids) == 3 and not any(is_alive(p) for p in pids)


def test_pacer_holds_a_run_that_gets_ahead_until_the_other_catches_up() -> None:
    import threading
    import time

    pacer = runner._Pacer(limit=2)
    pacer.start(1)
    pacer.start(2)
    abandon = threading.Event()
    done = threading.Event()

    def fast() -> None:
        for step in range(1, 6):
            pacer.advance(1, step, abandon)
        done.set()

    t = threading.Thread(target=fast, daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while pacer.steps.get(1) != 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pacer.steps[1] == 3 and not done.is_set()  # 3 steps ahead of run 2: it waits
    pacer.advance(2, 3, abandon)
    assert done.wait(10) and pacer.steps[1] == 5
    pacer.finish(2)  # an ended run holds nobody back
    pacer.advance(1, 100, abandon)
    assert pacer.steps[1] == 100


def test_a_plain_run_and_a_torchrun_job_are_both_what_the_runner_drives() -> None:
    """Both classes have every member of :class:`runner.LiveRun`, with the same parameters."""
    import inspect

    from repro_check.distributed.launch import Job

    members = [n for n in vars(runner.LiveRun) if not n.startswith("_")]
    assert {"ready", "handle", "stop", "tick", "finish", "kill_now", "give_up"} <= set(members)
    for cls in (runner._LiveRun, Job):
        for name in members:
            want, got = getattr(runner.LiveRun, name), getattr(cls, name)
            if isinstance(want, property):
                assert isinstance(got, property), (cls, name)
            else:
                assert list(inspect.signature(got).parameters) == \
                    list(inspect.signature(want).parameters), (cls, name)
        for name in runner.LiveRun.__annotations__:  # attributes set by the constructor
            assert f"self.{name} = " in inspect.getsource(cls.__init__), (cls, name)


def test_a_line_a_started_process_wrote_that_cannot_be_read_marks_the_run_incomplete(
        tmp_path: Path) -> None:
    import queue

    from repro_check.run import streams

    events: queue.Queue[Any] = queue.Queue()
    procs_ = streams.ProcessStreams(1, tmp_path / "run-1.jsonl", events)
    try:
        procs_._dispatch(3, b'{"step": 1, "signals": 5}')
        procs_._dispatch(3, b"{not json")
        taken = [events.get_nowait() for _ in range(2)]
        for _, _, ev, raw in taken:
            procs_.handle(ev, raw)
        result = runner.RunResult(1, status="completed")
        procs_.finish(result)
    finally:
        procs_.stop()
    assert [ev.incomplete for _, _, ev, _ in taken] == [True, True]
    assert len(result.incomplete) == 2 and result.incomplete[0].startswith(
        "process 3: a line the run wrote was dropped (step 1 has malformed signals)")


def test_a_removed_trace_folder_and_an_exit_status_after_returning(tmp_path: Path) -> None:
    """Run 1 removes its trace folder mid-run: its steps still count, the lost file is a warning
    (not an error of ours). Run 2 leaves with status 7 from an atexit handler after the target
    returned: a failed run, as ``python script.py`` would report it, never a completed one."""
    target = targets.parse(f"{FIXTURES / 'failures' / 'saboteur.py'}:main")
    folder = tmp_path / "gone"
    folder.mkdir()
    specs = [runner.RunSpec(RunConfig(run=1, target=target, args=("--remove", str(folder))),
                            timeout=240,
                            trace_path=folder / "run-1.jsonl"),
             runner.RunSpec(RunConfig(run=2, target=target, args=("--atexit-status", "7")),
                            timeout=240,
                            trace_path=tmp_path / "run-2.jsonl")]
    removed, exited = runner.run_all(specs, _Events(), jobs=2)
    assert removed.status == "completed" and removed.steps == 3 and removed.trace_path is None
    assert any("was removed while the run went" in w for w in removed.warnings)
    assert exited.status == "failed" and exited.returncode == 7 and exited.steps == 3
    assert exited.error is not None and "status 7 after the target returned" in \
        exited.error["message"]


def test_both_ends_refuse_another_version_of_the_trace_format(tmp_path: Path) -> None:
    """Run 1 is told another version: the run entry refuses it (before importing anything) and
    the run fails saying why. Run 2's entry (a stand-in interpreter) writes a header of another
    version: the runner takes nothing of it and the run fails saying why. Neither is a short run
    that would compare as reproducible."""
    import sys

    from repro_check.trace.protocol import VERSION

    other = tmp_path / "other-entry"
    other.write_text(
        f"#!{sys.executable}\n"
        "import json, os\n"
        "from repro_check.trace import runconfig\n"
        "config = runconfig.read_config(os.environ)\n"
        "out = os.fdopen(config.event_fd, 'w')\n"
        f"out.write(json.dumps({{'format': 'repro-check-trace', 'version': {VERSION + 1}, "
        "'header': {}}) + '\\n')\n"
        "out.write(json.dumps({'step': 1, 'signals': {}}) + '\\n')\n"
        "out.write(json.dumps({'info': {'status': 'completed'}}) + '\\n')\n")
    other.chmod(0o755)
    target = targets.parse(f"{FIXTURES / 'tiny.py'}:main")
    told = RunConfig(run=1, target=target, version=VERSION + 1)
    specs = [runner.RunSpec(told, timeout=120, trace_path=tmp_path / "run-1.jsonl"),
             runner.RunSpec(RunConfig(run=2, target=target), timeout=120,
                            trace_path=tmp_path / "run-2.jsonl", executable=str(other))]
    refused, foreign = runner.run_all(specs, _Events(), jobs=2)
    assert refused.failed and refused.error is not None, refused
    assert refused.error["kind"] == "protocol" and f"version {VERSION + 1}" in \
        refused.error["message"], refused.error
    assert foreign.failed and foreign.error is not None, foreign
    assert foreign.error["kind"] == "protocol" and f"version {VERSION + 1}" in \
        foreign.error["message"], foreign.error
    assert foreign.header is None and foreign.steps == 0  # nothing of it was taken
