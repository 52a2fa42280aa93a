"""A value the trace format cannot hold as it is (an int wider than 256 bits) is still recorded and
compared, and a line a run writes is never dropped without a warning."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import pytest

import repro_check
from repro_check.trace import values
from repro_check.trace.format import dumps, loads, parse_event
from repro_check.trace.values import Tolerance

from ..conftest import CliResult, run_cli
from ..synthetic_traces import LOSSES, read_lines, write_trace

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
    for _ in range(2):  # no torch.optim: a step is a backward call (the optimizer is not tested)
        loss = (w * w).sum()
        loss.backward()
        with torch.no_grad():
            w -= 0.1 * w.grad
        w.grad = None
    mode = sys.argv[1]
    if mode == "wide-differs":
        return {"tokens_seen": 2**300 + run, "acc": 1.0}
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


def bigint(x: int) -> dict[str, Any]:
    """A ``bigint`` record written by hand as docs/trace-format.md describes it."""
    digest = hashlib.blake2b(format(x, "x").encode("ascii"), digest_size=16).hexdigest()
    return {"dtype": "bigint", "bits": digest, "value": f"~{float(x):.6e} [{digest[:8]}]"}


def with_metrics(path: Path, metrics: dict[str, Any]) -> Path:
    """A synthetic trace whose metrics line is ``metrics`` (records as they are)."""
    write_trace(path, LOSSES[:3], metrics={})
    lines = [{"metrics": metrics} if "metrics" in line else line for line in read_lines(path)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture(scope="module")
def wide_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[CliResult, Path]:
    """One check whose runs return an int wider than the format holds, different in each run."""
    tmp = tmp_path_factory.mktemp("wide")
    (tmp / "wide.py").write_text(TARGET)
    return run_cli("wide.py:main", "--", "wide-differs", tmp=tmp / "out", cwd=tmp), tmp / "out"


@pytest.mark.slow
def test_a_real_run_records_and_compares_a_wide_metric(wide_run: tuple[CliResult, Path]) -> None:
    """End to end: the run's wide int reaches the trace as the documented ``bigint`` record (the
    one the synthetic traces below are written as), and the check compares it."""
    res, out = wide_run
    assert res.report is not None, res.stderr
    assert res.code == 1, res.stdout + res.stderr
    assert res.report["divergent_signal"] == "metric:tokens_seen"
    for run in (1, 2):
        trace = next((out / "traces").rglob(f"run-{run}.jsonl"))
        metrics = [json.loads(line)["metrics"] for line in trace.read_text().splitlines()
                   if line.startswith('{"metrics"')]
        assert metrics and metrics[0]["tokens_seen"] == bigint(2**300 + run)
    assert not any("dropped" in w for w in res.report.get("warnings", []))


@pytest.mark.parametrize("mode, divergent", [("wide-differs", "metric:tokens_seen"),
                                             ("other-differs", "metric:acc"),
                                             ("same", None)])
def test_a_wide_metric_is_compared_and_keeps_its_line(tmp_path: Path, mode: str,
                                                      divergent: str | None) -> None:
    """Traces holding a ``bigint`` metric (see the real run above) read and compare: the wide
    value parts the runs only where it differs, and its line is never dropped."""
    runs, wide = [], []
    for run in (1, 2):
        tokens = 2**300 + (run if mode == "wide-differs" else 0)
        acc = float(run) if mode == "other-differs" else 1.0
        wide.append(bigint(tokens))
        runs.append(with_metrics(tmp_path / f"run-{run}.jsonl",
                                 {"tokens_seen": bigint(tokens), "acc": values.encode(acc)}))
    report = repro_check.diff(runs[0], runs[1])
    d = report.to_dict()
    assert report.exit_code == (0 if divergent is None else 1), d
    assert d["divergent_signal"] == divergent
    assert [m["tokens_seen"] for m in d["metrics"]] == [w["value"] for w in wide]  # read back
    assert not any("dropped" in w for w in d.get("warnings", []))
    assert not report.incomplete


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
