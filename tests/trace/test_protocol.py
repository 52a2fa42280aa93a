"""The parent/child protocol: one typed configuration a run is told, typed records of what it
tells back, and the trace format's version checked at both ends (in-process: no run started)."""

from __future__ import annotations

import json

import pytest

from repro_check.trace.payloads import Location, SeedOverride
from repro_check import targets
from repro_check.run.options import RunOptions
from repro_check.trace import format as trace_format
from repro_check.trace.protocol import (VERSION, ErrorRecord, FlaggedRecord, HeaderRecord,
                                        InfoRecord, MetricsRecord, OtherRecord, ProbeRecord,
                                        ProtocolError, ResumeSettings, RunConfig, StepRecord,
                                        WarningRecord, record_of)


def _config() -> RunConfig:
    return RunConfig(run=3, target=targets.parse("train.py:main"), args=("--lr", "0.1"), seed=7,
                     components=("python", "torch"), threads=2, max_steps=5, warn_only=True,
                     probe_step=4, printed_metrics=(("acc", r"acc=(\S+)"),), event_fd=9,
                     distributed="/tmp/ranks", processes=None, pin_plan="/tmp/plan.json")


def test_a_configuration_is_read_back_as_it_was_written() -> None:
    config = _config()
    assert RunConfig.from_json(config.to_json()) == config
    assert RunConfig.from_json(config.to_json().encode()) == config  # as read from a descriptor


def test_a_resume_run_is_told_its_part_and_reads_it_back() -> None:
    """A run of ``repro-check resume`` learns its role, where to stop and where its copy goes
    through the configuration, typed, as everything else it is told."""
    told = _config().replace(resume=ResumeSettings("interrupted", stop_at=4, copy_dir="/tmp/c",
                                                   checkpoint="out/*.pkl", lock="/tmp/l"))
    back = RunConfig.from_json(told.to_json())
    assert back == told and back.resume is not None and back.resume.stop_at == 4
    assert RunConfig.from_json(_config().to_json()).resume is None  # a plain run: none


def test_lists_given_to_a_configuration_become_tuples() -> None:
    config = RunConfig(run=1, target=targets.parse("m:f"), args=["a"],  # type: ignore[arg-type]
                       components=["python"], printed_metrics=[["n", "r"]])  # type: ignore[list-item]
    assert config.args == ("a",) and config.components == ("python",)
    assert config.printed_metrics == (("n", "r"),)
    hash(config)  # frozen, of tuples: hashable


def test_the_configuration_is_made_from_the_run_options() -> None:
    options = RunOptions("train.py:main", args=("--x",), seed=5, without=("threads",),
                         max_steps=3, printed_metrics=(("acc", r"acc=(\S+)"),))
    told = options.told(2, targets.parse("train.py:main"))
    assert (told.run, told.args, told.seed, told.max_steps) == (2, ("--x",), 5, 3)
    assert told.components == tuple(options.components) and "threads" not in told.components
    assert told.threads is None  # the threads component is off: no fixed count
    assert told.printed_metrics == options.printed_metrics
    unseeded = RunOptions("train.py:main", no_seed=True).told(1, targets.parse("train.py:main"))
    assert unseeded.seed is None and unseeded.components == ()


@pytest.mark.parametrize("change, why", [
    ({"version": VERSION + 1}, f"version {VERSION + 1}"),
    ({"version": None}, "version None"),
    ({"target": None}, "names no target"),
    ({"seed": "7"}, "'seed' is not a whole number"),
    ({"args": "--lr"}, "'args' is not a list of strings"),
    ({"printed_metrics": [["only-a-name"]]}, "are not pairs"),
    ({"resume": {"role": "paused"}}, "names no role of a resume"),
    ({"resume": {"role": "interrupted", "stop_at": "4"}}, "'stop_at' is not a whole number"),
])
def test_a_run_refuses_a_configuration_of_another_version_or_a_broken_one(
        change: dict[str, object], why: str) -> None:
    data = json.loads(_config().to_json())
    data.update(change)
    with pytest.raises(ProtocolError, match=why):
        RunConfig.from_json(json.dumps(data))


@pytest.mark.parametrize("text", ["not json", "[1, 2]", "null"])
def test_a_configuration_that_is_no_json_object_is_refused(text: str) -> None:
    with pytest.raises(ProtocolError):
        RunConfig.from_json(text)


def test_every_kind_of_record_is_read_into_its_type() -> None:
    header = record_of(trace_format.header_line({"target": "t.py"}))
    assert isinstance(header, HeaderRecord) and header.header == {"target": "t.py"}
    step = record_of({"step": 2, "signals": {"loss": 1}, "proc": 3})
    assert isinstance(step, StepRecord) and (step.step, step.signals, step.proc) == (2, {"loss": 1}, 3)
    assert step.rank is None
    metrics = record_of({"metrics": {"acc": 1}, "rank": 1})
    assert isinstance(metrics, MetricsRecord) and metrics.metrics == {"acc": 1} and metrics.rank == 1
    override = record_of({"warning": "seeded again", "component": "torch", "key": "torch",
                          "value": 3, "where": "t.py:4", "unrelated": 1})
    assert isinstance(override, WarningRecord) and not override.incomplete
    assert override.override == SeedOverride("torch", "torch", 3, has_value=True,
                                             where=Location("t.py", 4))
    dropped = record_of(trace_format.dropped_warning("not JSON"))
    assert isinstance(dropped, WarningRecord) and dropped.incomplete and dropped.override is None
    error = record_of({"error": {"kind": "raised", "message": "boom"}})
    assert isinstance(error, ErrorRecord) and error.error["message"] == "boom"
    info = record_of({"info": {"status": "completed", "steps": 3}})
    assert isinstance(info, InfoRecord) and info.status == "completed"
    assert record_of({"info": {"expected_steps": 4}}).status is None  # type: ignore[attr-defined]
    assert isinstance(record_of({"probe": {"op": "mm"}}), ProbeRecord)
    assert isinstance(record_of({"flagged": {"op": "index_add_"}}), FlaggedRecord)
    assert isinstance(record_of({"something": "new"}), OtherRecord)


def test_the_parent_refuses_a_header_of_another_version() -> None:
    line = json.dumps({"format": trace_format.FORMAT, "version": VERSION + 1, "header": {}})
    with pytest.raises(ProtocolError, match=f"version {VERSION + 1}"):
        trace_format.read_record(line)
    assert isinstance(trace_format.read_record(json.dumps(trace_format.header_line({}))),
                      HeaderRecord)


def test_a_line_is_validated_before_it_is_typed() -> None:
    rec = trace_format.read_record(b'{"step": 1, "signals": {}}', proc=2)
    assert isinstance(rec, StepRecord) and rec.proc == 2
    with pytest.raises(trace_format.TraceFileError):
        trace_format.read_record(b'{"step": 0, "signals": {}}')  # no step 0


def test_the_samples_of_step_1_are_read_into_their_record() -> None:
    from repro_check.trace.protocol import BatchSamplesInfo

    got = record_of({"info": {"batch_samples": 16}, "rank": 1})
    assert isinstance(got, BatchSamplesInfo) and (got.samples, got.rank) == (16, 1)
    for bad in (-1, "16", 1.5, True, None):  # not a count: a plain info record no reader uses
        assert not isinstance(record_of({"info": {"batch_samples": bad}}), BatchSamplesInfo)
