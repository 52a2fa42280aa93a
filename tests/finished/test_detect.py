"""Which format ``diff`` takes a path for: conservative, so that every trace and golden (and
every file ``diff`` refused before) is still read as a trace; logs and checkpoints by their name,
suffix, folder contents or first line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import repro_check
from repro_check.errors import TraceFileError, UsageError
from repro_check.finished.detect import detect, formats_of

from ..synthetic_traces import write_trace
from .test_logs import LOSSES, write_csv, write_jsonl, write_lightning, write_trainer_state


def test_traces_and_unknown_files_stay_traces(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", [1.0, 0.5])
    assert detect(str(trace)) == "trace"
    headless = tmp_path / "h.jsonl"  # a trace whose header a fuzzer bent: still a trace
    headless.write_text(json.dumps({"format": "something", "version": 2}) + "\n")
    assert detect(str(headless)) == "trace"
    golden = tmp_path / "golden.json"
    golden.write_text(trace.read_text())
    assert detect(str(golden)) == "trace"
    for name, text in (("notes.txt", "hello"), ("empty.jsonl", ""), ("x.json", "{}")):
        (tmp_path / name).write_text(text)
        assert detect(str(tmp_path / name)) == "trace", name
    (tmp_path / "empty").mkdir()
    assert detect(str(tmp_path / "empty")) == "trace"
    assert detect(str(tmp_path / "missing.pt")) == "torch"
    assert detect("/dev/null") == "trace"


def test_logs_and_checkpoints_by_name_suffix_and_contents(tmp_path: Path) -> None:
    assert detect(str(write_csv(tmp_path / "m.csv", LOSSES))) == "csv"
    assert detect(str(write_jsonl(tmp_path / "m.jsonl", LOSSES))) == "jsonl"
    state = write_trainer_state(tmp_path / "hf" / "checkpoint-30", LOSSES)
    assert detect(str(state)) == "trainer-state"
    assert detect(str(state.parent)) == "trainer-state"
    (state.parent / "model.safetensors").write_bytes(b"")
    assert detect(str(state.parent)) == "checkpoint-folder"  # an HF checkpoint: its tensors
    version = write_lightning(tmp_path / "lightning_logs" / "version_0", LOSSES)
    assert detect(str(version)) == "lightning"
    assert detect(str(version / "metrics.csv")) == "lightning"
    for name, fmt in (("a.pt", "torch"), ("a.ckpt", "torch"), ("pytorch_model.bin", "torch"),
                      ("a.safetensors", "safetensors"), ("events.out.tfevents.1.h", "tensorboard"),
                      ("run-x.wandb", "wandb")):
        assert detect(str(tmp_path / name)) == fmt, name


def test_lightning_and_csv_read_together_and_format_overrides(tmp_path: Path) -> None:
    version = write_lightning(tmp_path / "v" / "version_0", LOSSES)
    plain = tmp_path / "plain.csv"
    plain.write_text((version / "metrics.csv").read_text())
    assert formats_of(str(version), str(plain), None) == "lightning"
    assert formats_of("x", "y", "jsonl") == "jsonl"
    with pytest.raises(UsageError, match="--format 'xml'"):
        formats_of("x", "y", "xml")


def test_the_api_diffs_finished_runs_and_traces(tmp_path: Path) -> None:
    a = write_csv(tmp_path / "a.csv", LOSSES)
    b = write_csv(tmp_path / "b.csv", LOSSES[:-1] + [0.0])
    report = repro_check.diff(a, b)
    assert report.finished is not None and not report.reproducible
    assert report.first_divergent_step == len(LOSSES) and report.divergent_signal == "loss"
    assert report.exit_code == 1 and report.verdict.word == "differs"
    assert repro_check.diff(a, a).reproducible
    trace = write_trace(tmp_path / "t.jsonl", [1.0, 0.5])
    assert repro_check.diff(trace, trace).finished is None
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"format": "repro-check-trace", "version": 99}) + "\n")
    with pytest.raises(TraceFileError):
        repro_check.diff(bad, trace)
