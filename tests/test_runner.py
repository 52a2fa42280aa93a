"""The runner: parallel runs give the same bits as sequential ones, and streams are bounded."""

from __future__ import annotations

from pathlib import Path

import pytest

import repro_check
from repro_check.runner import _Tail
from repro_check.trace import load_trace

from .conftest import FIXTURES


def test_parallel_runs_give_the_same_bits_as_sequential(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(FIXTURES)
    reports = {
        jobs: repro_check.check("tiny:main", seed=3, threads=2, jobs=jobs, args=["--steps", "25"],
                                trace_dir=tmp_path / f"jobs{jobs}")
        for jobs in (1, 2)
    }
    steps = {}
    for jobs, report in reports.items():
        assert report.exit_code == 0
        traces = [load_trace(r.trace_path) for r in report.results]
        steps[jobs] = [[s.signals for s in t.steps] for t in traces]
        assert all(t.header["environment"]["threads"] == 2 for t in traces)
    assert steps[1][0] == steps[2][0] == steps[2][1]


def test_output_tail_is_bounded() -> None:
    tail = _Tail(limit=1000)
    for i in range(10_000):
        tail.add(f"line {i}\n".encode())
    text = tail.text()
    assert text.endswith("line 9999\n")
    assert "earlier bytes not kept" in text
    assert len(text) < 1100
