"""The JSON report as other tools read it: the public keys and their types, for the reports of a
check, a verify, a record and a diff.

The keys ``reproducible``, ``first_divergent_step``, ``divergent_signal``, ``steps``, ``metrics``,
``runs``, ``seed`` and ``error`` are a public API; ``exit_code``, ``divergence``, ``components``,
``threads``, ``tolerance``, ``run_results``, ``environment``, ``replay``, ``identical_groups`` and
``judged`` are documented beside them (docs/json-report.md). Diff reports are built from trace
files written here by hand: nothing is run.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

import repro_check

from ..api_targets import (
    DIVERGE_AT,
    SEED,
    STEPS,
    Golden,
)
from ..synthetic_traces import LOSSES, as_f32, f32, write_trace

# the shared runs (same_check, golden, verify_same, ...): computed once a session
pytest_plugins = ["tests.api_runs"]

EXIT_CODES = {0, 1, 2, 3, 130}


def is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def assert_public_types(d: dict[str, Any]) -> None:
    """The documented keys of every report, with their documented types and invariants."""
    assert isinstance(d["reproducible"], bool)
    assert d["first_divergent_step"] is None or (is_int(d["first_divergent_step"])
                                                 and d["first_divergent_step"] >= 1)
    signal = d["divergent_signal"]
    assert signal is None or (isinstance(signal, str) and signal)
    assert is_int(d["runs"]) and d["runs"] >= 1
    assert isinstance(d["steps"], list) and all(is_int(s) and s >= 0 for s in d["steps"])
    assert len(d["steps"]) == d["runs"]
    assert isinstance(d["metrics"], list) and len(d["metrics"]) == d["runs"]
    for m in d["metrics"]:
        assert isinstance(m, dict)
        # plain JSON numbers, or a string for NaN and infinities
        assert all(isinstance(k, str) and (is_number(v) or v in ("nan", "inf", "-inf"))
                   for k, v in m.items())
    assert d["seed"] is None or is_int(d["seed"])
    assert d["error"] is None or (isinstance(d["error"], str) and d["error"])
    assert is_int(d["exit_code"]) and d["exit_code"] in EXIT_CODES
    assert d["replay"] is None or (isinstance(d["replay"], str) and "\n" not in d["replay"])
    assert isinstance(d["components"], list) and all(isinstance(c, str) for c in d["components"])
    assert d["threads"] is None or is_int(d["threads"])
    assert isinstance(d["tolerance"], str) and d["tolerance"]
    assert isinstance(d["identical_groups"], list)
    assert isinstance(d["judged"], dict) and all(is_int(v) for v in d["judged"].values())
    assert set(d["judged"]) <= {"exact", "tolerance", "band"}
    assert isinstance(d["run_results"], list)
    for rr in d["run_results"]:
        assert isinstance(rr["status"], str)
        assert rr["trace"] is None or isinstance(rr["trace"], str)
    assert d["environment"] is None or isinstance(d["environment"], dict)
    # the documented relations between the keys
    if d["reproducible"]:
        assert d["exit_code"] == 0 and d["error"] is None
    if d["exit_code"] == 1:
        assert d["reproducible"] is False
    if d["first_divergent_step"] is not None or d["divergent_signal"] is not None:
        assert d["reproducible"] is False
    if d["error"] is not None:
        assert d["exit_code"] == 3
    if d["seed"] is None:
        assert d["components"] == []
    div = d["divergence"]
    if div is not None:
        assert isinstance(div, dict)
        assert {"abs_diff", "rel_diff", "later_divergent_steps"} <= set(div)
        assert div["abs_diff"] is None or (is_number(div["abs_diff"]) and div["abs_diff"] >= 0)
        assert div["rel_diff"] is None or is_number(div["rel_diff"])
        assert is_int(div["later_divergent_steps"]) and div["later_divergent_steps"] >= 0
        assert isinstance(div.get("policy"), str)


def round_trip(report: Any) -> dict[str, Any]:
    """``to_json`` is strict JSON (no NaN) and says what ``to_dict`` says."""
    text = report.to_json()

    def no_constants(name: str) -> Any:
        raise AssertionError(f"bare {name} in the JSON report")

    data = json.loads(text, parse_constant=no_constants)
    assert data == report.to_dict()
    return data


# ---- reports of runs ---------------------------------------------------------------------------
def test_check_report_reproducible(same_check: Any) -> None:
    d = round_trip(same_check)
    assert_public_types(d)
    assert d["reproducible"] is True and d["exit_code"] == 0 and d["seed"] == SEED
    assert d["divergence"] is None and d["replay"] is None and d["error"] is None
    assert d["runs"] == 2 and d["steps"][0] == d["steps"][1]
    assert d["identical_groups"] == [[1, 2]]
    assert sum(d["judged"].values()) > 0 and set(d["judged"]) == {"exact"}
    assert d["tolerance"] == "exact bits"
    assert d["threads"] == 1 and {"torch", "threads"} <= set(d["components"])
    assert [rr["status"] for rr in d["run_results"]] == ["completed", "completed"]
    assert all(Path(rr["trace"]).is_file() for rr in d["run_results"])
    assert {"python", "torch", "device"} <= set(d["environment"])


def test_check_report_not_reproducible(diverging_check: Any) -> None:
    d = round_trip(diverging_check)
    assert_public_types(d)
    assert d["exit_code"] == 1 and d["first_divergent_step"] == DIVERGE_AT
    assert d["divergent_signal"] == "loss" and d["error"] is None
    assert isinstance(d["replay"], str)
    assert d["identical_groups"] == [[1], [2]]
    div = d["divergence"]
    assert div["later_divergent_steps"] == STEPS - DIVERGE_AT
    assert div["abs_diff"] > 0 and div["rel_diff"] > 0


def test_verify_report(verify_other_seed: Any) -> None:
    d = round_trip(verify_other_seed)
    assert_public_types(d)
    # the golden and this run: two runs, compared like a check's
    assert d["runs"] == 2 and d["steps"] == [STEPS, STEPS]
    assert d["exit_code"] == 1 and d["first_divergent_step"] == 1
    assert d["seed"] == SEED + 1 and isinstance(d["replay"], str)
    assert d["divergence"]["later_divergent_steps"] == STEPS - 1
    assert len(d["metrics"]) == 2 and set(d["metrics"][0]) == set(d["metrics"][1]) == {"mse"}


def test_record_report(golden: Golden) -> None:
    d = round_trip(golden.report)
    assert_public_types(d)
    assert d["exit_code"] == 0 and d["error"] is None and d["replay"] is None
    assert d["runs"] == 1 and d["steps"] == [STEPS] and d["seed"] == SEED
    assert len(d["metrics"]) == 1 and set(d["metrics"][0]) == {"mse"}
    assert d["run_results"][0]["status"] == "completed"


def test_record_report_of_a_failing_target(failed_record: tuple[Any, Path]) -> None:
    report, _ = failed_record
    d = round_trip(report)
    assert_public_types(d)
    assert d["exit_code"] == 3 and d["reproducible"] is False
    assert "RuntimeError" in d["error"] and isinstance(d["replay"], str)
    assert d["replay"].startswith("repro-check record ")


# ---- reports of diff, on traces written here -----------------------------------------------------
def test_diff_report_same(tmp_path: Path) -> None:
    a = write_trace(tmp_path / "a.jsonl", LOSSES, metrics={"acc": 0.875})
    b = write_trace(tmp_path / "b.jsonl", LOSSES, metrics={"acc": 0.875}, seed=11)
    d = round_trip(repro_check.diff(a, b))
    assert_public_types(d)
    assert d["reproducible"] is True and d["exit_code"] == 0
    assert d["first_divergent_step"] is None and d["divergent_signal"] is None
    assert d["steps"] == [len(LOSSES)] * 2 and d["runs"] == 2
    assert d["metrics"] == [{"acc": 0.875}, {"acc": 0.875}]
    assert d["seed"] == 11  # the seed of B, the trace compared with the reference
    assert d["divergence"] is None and d["replay"] is None
    # every step's loss and the metric were judged on their exact bits
    assert d["judged"] == {"exact": len(LOSSES) + 1}


def test_diff_report_divergent_loss(tmp_path: Path) -> None:
    at = 7
    changed = LOSSES[:at - 1] + [x * 1.5 for x in LOSSES[at - 1:]]
    a = write_trace(tmp_path / "a.jsonl", LOSSES, metrics={"acc": 0.5})
    b = write_trace(tmp_path / "b.jsonl", changed, metrics={"acc": 0.5})
    d = round_trip(repro_check.diff(a, b))
    assert_public_types(d)
    assert d["exit_code"] == 1 and d["first_divergent_step"] == at
    assert d["divergent_signal"] == "loss"
    div = d["divergence"]
    assert div["later_divergent_steps"] == len(LOSSES) - at
    ref, val = as_f32(LOSSES[at - 1]), as_f32(changed[at - 1])
    assert div["abs_diff"] == pytest.approx(abs(ref - val), rel=1e-12)
    bits = {v.get("bits") for v in div.values() if isinstance(v, dict)}
    assert bits == {f32(LOSSES[at - 1])["bits"], f32(changed[at - 1])["bits"]}
    assert d["replay"].startswith("repro-check verify train.py:main")
    assert f"--max-steps {at}" in d["replay"]


def test_diff_report_of_a_shorter_trace(tmp_path: Path) -> None:
    a = write_trace(tmp_path / "a.jsonl", LOSSES)
    b = write_trace(tmp_path / "b.jsonl", LOSSES[:12])
    d = round_trip(repro_check.diff(a, b))
    assert_public_types(d)
    # a run that recorded fewer steps diverges at its first missing step
    assert d["exit_code"] == 1 and d["first_divergent_step"] == 13
    assert d["divergent_signal"] == "steps" and d["steps"] == [len(LOSSES), 12]


def test_diff_report_metrics_only(tmp_path: Path) -> None:
    a = write_trace(tmp_path / "a.jsonl", LOSSES, metrics={"acc": 0.5, "loss": 0.1})
    b = write_trace(tmp_path / "b.jsonl", LOSSES, metrics={"acc": 0.625, "loss": 0.1})
    d = round_trip(repro_check.diff(a, b))
    assert_public_types(d)
    assert d["exit_code"] == 1 and d["reproducible"] is False
    assert d["first_divergent_step"] is None and d["divergent_signal"] == "metric:acc"
    assert d["metrics"] == [{"acc": 0.5, "loss": 0.1}, {"acc": 0.625, "loss": 0.1}]


def test_diff_report_nan_and_inf_survive_as_strings(tmp_path: Path) -> None:
    losses = LOSSES[:4] + [math.nan, math.inf]
    a = write_trace(tmp_path / "a.jsonl", losses, metrics={"acc": math.nan, "top": -math.inf})
    b = write_trace(tmp_path / "b.jsonl", losses, metrics={"acc": math.nan, "top": -math.inf})
    d = round_trip(repro_check.diff(a, b))  # strict JSON: no bare NaN
    assert_public_types(d)
    assert d["reproducible"] is True and d["exit_code"] == 0
    assert d["metrics"][0] == {"acc": "nan", "top": "-inf"}


def test_diff_report_of_a_trace_that_records_a_failed_run(tmp_path: Path) -> None:
    a = write_trace(tmp_path / "a.jsonl", LOSSES)
    b = write_trace(tmp_path / "b.jsonl", LOSSES[:3], status="failed",
                    error={"kind": "raised", "type": "RuntimeError", "message": "boom",
                           "traceback": "Traceback ...\nRuntimeError: boom\n"})
    d = round_trip(repro_check.diff(a, b))
    assert_public_types(d)
    assert d["exit_code"] == 3 and isinstance(d["error"], str) and "b.jsonl" in d["error"]
    assert d["run_results"][1]["status"] == "failed"


def test_diff_report_of_unseeded_traces(tmp_path: Path) -> None:
    a = write_trace(tmp_path / "a.jsonl", LOSSES, seed=None)
    b = write_trace(tmp_path / "b.jsonl", LOSSES, seed=None)
    d = round_trip(repro_check.diff(a, b))
    assert_public_types(d)
    assert d["seed"] is None and d["components"] == [] and d["exit_code"] == 0


def test_diff_report_with_an_unknown_signal(tmp_path: Path) -> None:
    # readers accept keys they do not know; a fingerprint signal is compared for equality
    a = write_trace(tmp_path / "a.jsonl", LOSSES[:5], extra_signals=["custom.fingerprint"])
    b = write_trace(tmp_path / "b.jsonl", LOSSES[:5], extra_signals=["custom.fingerprint"])
    lines = b.read_text().splitlines()
    step3 = json.loads(lines[3])
    assert step3["step"] == 3
    step3["signals"]["custom.fingerprint"] = "f" * 32
    lines[3] = json.dumps(step3)
    b.write_text("\n".join(lines) + "\n")
    d = round_trip(repro_check.diff(a, b))
    assert_public_types(d)
    assert d["first_divergent_step"] == 3 and d["divergent_signal"] == "custom.fingerprint"
    assert d["divergence"]["abs_diff"] is None  # no number to subtract


def test_diff_report_of_a_failed_run_names_no_divergence(tmp_path: Path) -> None:
    a = write_trace(tmp_path / "a.jsonl", LOSSES)
    b = write_trace(tmp_path / "b.jsonl", LOSSES[:3], status="failed",
                    error={"kind": "raised", "type": "RuntimeError", "message": "boom",
                           "traceback": "RuntimeError: boom\n"})
    d = repro_check.diff(a, b).to_dict()
    assert d["exit_code"] == 3
    assert d["first_divergent_step"] is None and d["divergent_signal"] is None
