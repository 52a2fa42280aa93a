"""A value the trace format cannot hold as it is (an int wider than 256 bits) is still recorded and
compared, and a line a run writes is never dropped without a warning."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import repro_check
from repro_check.trace import values
from repro_check.trace.format import dumps, loads, parse_event
from repro_check.trace.values import Tolerance

from ..conftest import run_cli

WIDE = [2**256, 2**300, -(2**255), 2**300 + 1, 10**4400, -(2**100_000) + 7]


@pytest.mark.parametrize("x", WIDE, ids=lambda x: f"{x.bit_length()} bits")
def test_a_wide_int_is_encoded_as_a_valid_comparable_value(x: int) -> None:
    enc = values.encode(x)
    assert enc is not None and enc["dtype"] == values.BIGINT and values.is_valid(enc)
    assert enc == values.encode(x)  # the same number, the same record, in every run
    assert enc["bits"] != values.encode(x + 1)["bits"]
    line = dumps({"metrics": {"n": enc}})
    assert parse_event(loads(line)) == {"metrics": {"n": enc}}  # what the parent reads back
    assert math.isnan(values.to_float(enc)) and values.readable(enc).startswith("~")
    assert values.differences(enc, values.encode(x + 1)) == (None, None)


def test_a_wide_int_is_equal_only_to_itself_whatever_the_tolerance() -> None:
    a, b = values.encode(2**300), values.encode(2**300 + 1)
    assert values.equal(a, dict(a), Tolerance())
    for tol in (Tolerance(), Tolerance(rtol=1.0), Tolerance(atol=1e300), Tolerance(ulps=10**6)):
        assert not values.equal(a, b, tol)
        assert not values.equal(a, values.encode(float(2**300)), tol)
    assert values.band_limits({"min": a, "max": b}) is None


@pytest.mark.parametrize("x", [2**256 - 1, -(2**251), 0, -1, 2**64])
def test_ints_that_fit_keep_their_exact_hex(x: int) -> None:
    enc = values.encode(x)
    assert enc is not None and enc["dtype"] == "int" and int(enc["bits"], 16) == x
    assert values.is_valid(enc)


TARGET = """
import os, sys

import torch


def main():
    run = int(os.environ["REPRO_CHECK_RUN_INDEX"])
    w = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([w], lr=0.1)
    for _ in range(2):
        loss = (w * w).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    mode = sys.argv[1]
    if mode == "wide-differs":
        return {"tokens_seen": 2**300 + run, "acc": 1.0}
    if mode == "other-differs":
        return {"tokens_seen": 2**300, "acc": float(run)}
    if mode == "garbled-line":
        # a line the format refuses, written where the run's records go
        import fcntl

        for fd in map(int, os.listdir("/proc/self/fd")):
            try:
                pipe = fd > 2 and os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:")
            except OSError:
                continue
            if pipe and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:
                os.write(fd, b'{"metrics": {"x": {"dtype": "float32", "bits": "zz"}}}\\n' * 30)
        return {"acc": 1.0}
    return {"tokens_seen": 2**300, "acc": 1.0}
"""


@pytest.mark.parametrize("mode, divergent", [("wide-differs", "metric:tokens_seen"),
                                             ("other-differs", "metric:acc"),
                                             ("same", None)])
def test_a_wide_metric_is_compared_and_keeps_its_line(tmp_path: Path, mode: str,
                                                      divergent: str | None) -> None:
    (tmp_path / "wide.py").write_text(TARGET)
    res = run_cli("wide.py:main", "--", mode, tmp=tmp_path / "out", cwd=tmp_path)
    assert res.report is not None, res.stderr
    assert res.code == (0 if divergent is None else 1), res.stdout + res.stderr
    assert res.report["divergent_signal"] == divergent
    trace = next((tmp_path / "out" / "traces").rglob("run-1.jsonl"))
    metrics = [json.loads(line)["metrics"] for line in trace.read_text().splitlines()
               if line.startswith('{"metrics"')]
    assert metrics and metrics[0]["tokens_seen"]["dtype"] == values.BIGINT
    assert not any("dropped" in w for w in res.report.get("warnings", []))


def test_a_line_the_parent_cannot_take_becomes_a_warning(tmp_path: Path) -> None:
    (tmp_path / "wide.py").write_text(TARGET)
    res = run_cli("wide.py:main", "--", "garbled-line", tmp=tmp_path / "out", cwd=tmp_path)
    # a record left out: the comparison is incomplete, never reproducible
    assert res.report is not None and res.code == 1, res.stdout + res.stderr
    assert "INCOMPLETE" in res.stdout and not res.report["reproducible"]
    said = "a line the run wrote was dropped (malformed metrics): the comparison is incomplete"
    assert res.report["incomplete"][0] == f"run 1: {said}"
    dropped = [w for w in res.report["warnings"] if "a line the run wrote was dropped" in w]
    assert dropped == [said, f"{said}; later ones are dropped unnamed"], dropped
    for run in res.report["run_results"]:  # 30 lines dropped: the first 10 named, in bounded memory
        assert len([w for w in run["warnings"] if "dropped" in w]) == 10
    trace = next((tmp_path / "out" / "traces").rglob("run-1.jsonl"))
    assert said in trace.read_text()
    # the saved traces say so too: diff of them is not SAME
    runs = [r["trace"] for r in res.report["run_results"]]
    diffed = repro_check.diff(runs[0], runs[1])
    assert not diffed.reproducible and diffed.incomplete
