"""A run's final metrics: no source overwrites another's (returned, ``log_metric``, the logging
libraries, printed), and a metric set too large for one trace line is folded into digests that
are still compared; a record over the line limit is never dropped silently."""

from __future__ import annotations

import json
import os
from typing import Any

from repro_check.child.observe import capture, metric_hooks, metricset
from repro_check.child.process.emit import Emitter
from repro_check.compare.steps import Comparison
from repro_check.trace import format as trace_format
from repro_check.trace import values


def recorder() -> tuple[capture.Recorder, list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    return capture.Recorder(events.append), events


def warnings(events: list[dict[str, Any]]) -> list[str]:
    return [e["warning"] for e in events if "warning" in e]


def test_no_source_overwrites_another() -> None:
    rec, events = recorder()
    sink = metric_hooks.Sink(rec)
    capture_log = rec.metric  # what repro_check.log_metric calls
    capture_log("accuracy", 0.5)
    capture_log("accuracy", 0.75)  # the same name again from the same source: the last counts
    capture_log("tb:loss", 1.0)  # a name in a library's namespace
    sink.record("tb:", "loss", 2.0)
    sink.record_all("wandb:", {"eval": {"acc": 0.25}, "eval.acc": 0.5})  # one name after joining
    rec.metrics_from_return({"accuracy": 0.625, "printed:accuracy": 0.125,
                             "a": {"b": 1}, "a.b": 2})
    m = {name: values.to_float(enc) for name, enc in rec.metrics.items()}
    assert m == {
        "accuracy": 0.75, "log_metric:tb:loss": 1.0, "tb:loss": 2.0,
        "wandb:eval.acc": 0.25, "wandb:eval.acc#2": 0.5,
        "return:accuracy": 0.625, "return:printed:accuracy": 0.125, "a.b": 1.0, "a.b#2": 2.0,
    }
    said = " | ".join(warnings(events))
    assert "'accuracy' was both logged with repro_check.log_metric and returned" in said
    assert "'printed:accuracy' (returned) is recorded as 'return:printed:accuracy'" in said
    assert "the second is compared as a.b#2" in said


def test_a_returned_metric_and_a_printed_one_of_the_same_name_are_both_compared() -> None:
    """The run's own metrics line never holds a ``printed:`` name, so the line repro-check adds
    from the output cannot overwrite a value of the run (both are compared)."""
    metrics: dict[int, dict[str, Any]] = {}
    for run, acc in ((1, 0.5), (2, 0.75)):
        rec, _ = recorder()
        rec.metrics_from_return({"printed:accuracy": acc})
        metrics[run] = rec.final_metrics()
        assert not any(name.startswith("printed:") for name in metrics[run])
    cmp = Comparison(2)
    for run in (1, 2):
        cmp.end(run, 0)
        cmp.set_metrics(run, metrics[run])
        cmp.set_metrics(run, {"printed:accuracy": values.encode(0.5)})  # what both printed
    res = cmp.result()
    assert not res.reproducible
    assert res.divergent_signal == "metric:return:printed:accuracy"


def test_a_large_metric_set_is_folded_into_compared_digests() -> None:
    def final(shift: float, item: int = -1) -> dict[str, Any]:
        rec, events = recorder()
        scores = {f"item{i}": float(i) + (0.5 if i == item else 0.0) for i in range(5000)}
        rec.metrics_from_return({"accuracy": 0.5 + shift, "per_item": scores,
                                 **{f"score_{i}": float(i) for i in range(400)}})
        out = rec.final_metrics()
        assert len(out) <= metricset.MAX_METRICS
        assert any("5000 metrics ('per_item.item0', ...) are compared together" in w
                   for w in warnings(events))
        return out

    same, other_acc, other_item = final(0.0), final(0.25), final(0.0, item=4321)
    assert set(same) == {"accuracy", "per_item.*", "score_#"}
    assert same["per_item.*"]["dtype"] == metricset.DIGEST and values.is_valid(same["per_item.*"])
    line = trace_format.dumps({"metrics": same})
    assert len(line) < 10_000 and trace_format.parse_event(json.loads(line))
    assert same == final(0.0)
    assert other_acc["accuracy"] != same["accuracy"]
    assert other_item["per_item.*"] != same["per_item.*"]  # one item of 5000 differs: compared
    assert other_item["accuracy"] == same["accuracy"]


def test_flat_names_without_groups_still_fit() -> None:
    names = {f"{chr(97 + i % 26)}{'x' * (i % 7)}{chr(97 + i // 26 % 26)}": float(i)
             for i in range(600)}
    out = metricset.fold({n: values.encode(v) for n, v in names.items()}, lambda text: None)
    assert len(out) <= metricset.MAX_METRICS and any(v["dtype"] == "digest" for v in out.values())
    long = metricset.short_name("n" * 10_000)
    assert len(long) <= metricset.MAX_NAME and long != metricset.short_name("n" * 10_001)


def test_a_record_over_the_line_limit_becomes_a_warning_that_marks_the_run_incomplete() -> None:
    read, write = os.pipe()
    try:
        emit = Emitter(write, high=False)  # the test closes ``write`` itself
        emit.max_bytes = 1000
        emit({"metrics": {f"m{i}": values.encode(float(i)) for i in range(100)}})
        emit({"info": {"status": "completed"}})
        os.close(write)
        with os.fdopen(read, "rb") as fh:
            lines = [json.loads(line) for line in fh.read().splitlines()]
    finally:
        for fd in (read, write):
            try:
                os.close(fd)
            except OSError:
                pass
    assert lines[0]["incomplete"] is True and "a metrics record of" in lines[0]["warning"]
    assert "the comparison is incomplete" in lines[0]["warning"]
    assert lines[1] == {"info": {"status": "completed"}}
