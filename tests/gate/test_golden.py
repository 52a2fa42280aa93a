"""Golden files and diff on saved traces: nothing is run, so every case is quick."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from repro_check import cli
from repro_check.trace import values
from repro_check.errors import TraceFileError
from repro_check.api import diff
from repro_check.gate.golden import write_golden
from repro_check.compare.tolerances import ToleranceOptions, from_cli
from repro_check.trace.format import TraceWriter, dumps, header_line, iter_trace, load_trace

from ..conftest import FIXTURES

ENV = {"python": "3.11.7", "torch": "2.14.1", "threads": 1, "device": "cpu",
       "target_sha256": "ab" * 32}


def f32(x: float) -> dict[str, Any]:
    import numpy as np

    return values.encode(np.float32(x))  # type: ignore[return-value]


def write(path: Path, losses: list[float], *, metrics: dict[str, float] | None = None,
          env: dict[str, Any] | None = None, seed: int = 3, end: bool = True,
          version: int | None = None) -> Path:
    head = header_line({"target": "train.py:main", "args": ["--epochs", "1"], "seed": seed,
                        "components": ["python", "torch", "threads"], "threads": 1,
                        "max_steps": None, "environment": {**ENV, **(env or {})}})
    if version is not None:
        head["version"] = version
    w = TraceWriter(path)
    w.write(head)
    for i, x in enumerate(losses, 1):
        w.write({"step": i, "signals": {"loss": f32(x)}})
    w.write({"metrics": {k: values.encode_float64(v) for k, v in (metrics or {}).items()}})
    if end:
        w.write({"end": {"status": "completed", "steps": len(losses)}})
    w.close()
    return path


LOSSES = [2.0 / s for s in range(1, 41)]


def test_identical_traces_are_the_same(tmp_path: Path) -> None:
    a = write(tmp_path / "a.jsonl", LOSSES, metrics={"acc": 0.9})
    b = write(tmp_path / "b.jsonl", LOSSES, metrics={"acc": 0.9})
    report = diff(a, b)
    assert report.reproducible and report.exit_code == 0
    assert report.to_dict()["steps"] == [40, 40] and report.comparison.judged == {"exact": 41}
    assert report.replay is None and report.gate.environment_differences == []


def test_first_divergent_step_environment_and_replay(tmp_path: Path) -> None:
    changed = LOSSES[:16] + [x * 1.001 for x in LOSSES[16:]]
    a = write(tmp_path / "a.jsonl", LOSSES, env={"torch": "2.13.0"})
    b = write(tmp_path / "b.jsonl", changed)
    report = diff(a, b)
    d = report.to_dict()
    assert report.exit_code == 1
    assert d["first_divergent_step"] == 17 and d["divergent_signal"] == "loss"
    assert d["divergence"]["later_divergent_steps"] == 40 - 17
    assert [e["text"] for e in d["environment_differences"]] == [
        "a.jsonl recorded with torch 2.13.0, b.jsonl 2.14.1"]
    assert "the divergence comes with 1 environment difference(s)" in d["environment_note"]
    assert d["replay"] == (f"repro-check verify train.py:main --golden {a} --seed 3 "
                           "--without hashseed,numpy,cuda,cudnn,deterministic_algorithms,dataloader "
                           "--max-steps 17 -- --epochs 1")


def test_a_shorter_trace_diverges_at_its_first_missing_step(tmp_path: Path) -> None:
    a = write(tmp_path / "a.jsonl", LOSSES)
    b = write(tmp_path / "b.jsonl", LOSSES[:25])
    d = diff(a, b).to_dict()
    assert d["first_divergent_step"] == 26 and d["divergent_signal"] == "steps"
    assert "b.jsonl recorded 25 steps and stopped; a.jsonl went on" in d["divergence"]["detail"]


def test_tolerances_per_signal_and_metric(tmp_path: Path) -> None:
    a = write(tmp_path / "a.jsonl", LOSSES, metrics={"acc": 0.90})
    b = write(tmp_path / "b.jsonl", [x + 1e-6 for x in LOSSES], metrics={"acc": 0.9005})
    assert diff(a, b).first_divergent_step == 1
    only_loss = diff(a, b, tolerances=from_cli(atol=["loss=1e-5"]))
    assert only_loss.first_divergent_step is None
    assert only_loss.divergent_signal == "metric:acc"
    assert only_loss.comparison.divergence.policy == "exact bits"
    both = diff(a, b, tolerances=from_cli(atol=["loss=1e-5"], rtol=["metric:acc=1e-3"]))
    assert both.reproducible and both.comparison.judged == {"tolerance": 41}
    assert both.to_dict()["tolerance"] == \
        "exact bits; loss: atol=1e-05, rtol=0; metric:acc: atol=0, rtol=0.001"


def test_ulps(tmp_path: Path) -> None:
    import numpy as np

    base = [np.float32(x) for x in LOSSES]
    a = write(tmp_path / "a.jsonl", [float(x) for x in base])
    b = write(tmp_path / "b.jsonl", [float(np.nextafter(np.nextafter(x, np.float32(9)),
                                                        np.float32(9))) for x in base])
    assert not diff(a, b, tolerances=from_cli(ulps=["1"])).reproducible
    two = diff(a, b, tolerances=from_cli(ulps=["loss=2"]))
    assert two.reproducible and two.comparison.judged == {"tolerance": 40}


def test_write_golden_stores_the_spread_of_repeated_runs(tmp_path: Path) -> None:
    runs = [write(tmp_path / f"run-{k}.jsonl", [x + k * 1e-3 for x in LOSSES], metrics={"acc": 0.9 + k / 100})
            for k in (1, 2, 3)]
    stored = write_golden(tmp_path / "golden.json", runs)
    assert stored["steps"] == 40 and stored["spread_steps"] == 40
    golden = load_trace(tmp_path / "golden.json")
    assert golden.header["golden"]["runs"] == 3
    first = golden.steps[0]
    assert values.to_float(first.signals["loss"]) == pytest.approx(2.0 + 1e-3)  # run 1's value
    assert values.to_float(first.band["loss"]["min"]) == pytest.approx(2.0 + 1e-3)
    assert values.to_float(first.band["loss"]["max"]) == pytest.approx(2.0 + 3e-3)
    assert values.to_float(golden.metrics_band["acc"]["max"]) == pytest.approx(0.93)

    inside = write(tmp_path / "inside.jsonl", [x + 2e-3 for x in LOSSES], metrics={"acc": 0.925})
    report = diff(tmp_path / "golden.json", inside)
    assert report.reproducible and report.comparison.judged == {"band": 41}
    outside = write(tmp_path / "outside.jsonl", [x + 4e-3 for x in LOSSES], metrics={"acc": 0.92})
    report = diff(tmp_path / "golden.json", outside)
    assert report.first_divergent_step == 1 and "band [" in report.comparison.divergence.policy
    assert diff(tmp_path / "golden.json", outside,
                tolerances=ToleranceOptions(band_widen=3.0)).reproducible
    assert not diff(tmp_path / "golden.json", inside,
                    tolerances=ToleranceOptions(use_band=False)).reproducible


def test_write_golden_refuses_runs_of_different_length(tmp_path: Path) -> None:
    a = write(tmp_path / "a.jsonl", LOSSES)
    b = write(tmp_path / "b.jsonl", LOSSES[:-1])
    with pytest.raises(Exception, match="different numbers of steps"):
        write_golden(tmp_path / "golden.json", [a, b])
    assert not (tmp_path / "golden.json").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_version_1_trace_still_reads(tmp_path: Path) -> None:
    old = tmp_path / "v1.jsonl"
    old.write_text(
        json.dumps({"format": "repro-check-trace", "version": 1,
                    "header": {"target": "train.py:main", "seed": 3, "seeding": {"threads": 4}}})
        + "\n" + dumps({"step": 1, "signals": {"loss": f32(2.0)}})
        + dumps({"metrics": {}}) + dumps({"end": {"status": "completed"}})
    )
    tr = load_trace(old)
    assert tr.header["threads"] == 4 and tr.header["golden"] is None and len(tr.steps) == 1
    new = write(tmp_path / "v2.jsonl", [2.0])
    assert json.loads(new.read_text().splitlines()[0])["version"] == 2
    assert diff(old, new).first_divergent_step is None


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.console_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("content, message", [
    (b"", "empty file"),
    (b"\x89PNG\r\n\x1a\n\x00\xff\xfe", "not UTF-8"),
    (b"PK\x03\x04\x00\x00zip", "not JSON"),
    (b'{"format": "something-else", "version": 1}\n', "no repro-check header"),
    (b'{\n  "reproducible": true\n}\n', "a JSON document such as a --json report"),
    (b'{"format": "repro-check-trace", "version": 2, "header": {}}\n{"step": 1, "signals": {}}\n',
     "truncated trace"),
    (b'{"format": "repro-check-trace", "version": 2, "header": {}}\n{"step": 1, "sig',
     "truncated, its last line is incomplete"),
    (b'{"format": "repro-check-trace", "version": 7, "header": {}}\n', "version 7 is not supported"),
    (b'{"format": "repro-check-trace", "version": 2, "header": {"seed": "x"}}\n{"end": {}}\n',
     "malformed seed in header"),
    (b'{"format": "repro-check-trace", "version": 2, "header": {}}\n'
     b'{"step": 1, "signals": {}, "band": {"loss": {"min": 1}}}\n{"end": {}}\n', "malformed band"),
])
def test_a_bad_file_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           content: bytes, message: str) -> None:
    good = write(tmp_path / "good.jsonl", LOSSES[:3])
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    for argv in (["diff", str(good), str(bad)], ["diff", str(bad), str(good)]):
        code, out, err = run_cli(capsys, *argv)
        assert code == 2 and out == ""
        assert len(err.strip().splitlines()) == 1 and message in err, err


def test_diff_cli_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write(tmp_path / "a.jsonl", LOSSES)
    b = write(tmp_path / "b.jsonl", LOSSES[:5] + [9.0] * 35)
    code, out, err = run_cli(capsys, "diff", str(a), str(b), "--json", str(tmp_path / "r.json"),
                             "--junit", str(tmp_path / "j.xml"))
    assert code == 1 and "First divergence: step 6, signal loss, b.jsonl vs a.jsonl" in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["first_divergent_step"] == 6 and report["a"] == str(a)
    assert "first divergent step 6" in (tmp_path / "j.xml").read_text()


def test_diff_streams_both_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison never holds more than a step or two of either file."""
    from repro_check.compare import steps as compare

    a = write(tmp_path / "a.jsonl", [1.0 + s for s in range(3000)])
    b = write(tmp_path / "b.jsonl", [1.0 + s for s in range(3000)])
    held: list[int] = []
    original = compare.Comparison.add_step

    def spy(self: Any, run: int, step: int, signals: Any, band: Any = None) -> None:
        original(self, run, step, signals, band)
        held.append(len(self.ref) + sum(len(p.pending) for p in self.pairs.values()))

    monkeypatch.setattr(compare.Comparison, "add_step", spy)
    assert diff(a, b).reproducible
    assert len(held) == 6000 and max(held) <= 1


def test_iter_trace_reads_a_golden_lazily(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl", LOSSES)
    events = iter_trace(path, require_end=True)
    assert next(events)["seed"] == 3
    assert next(events) == {"step": 1, "signals": {"loss": f32(2.0)}}
    truncated = write(tmp_path / "t.jsonl", LOSSES, end=False)
    with pytest.raises(TraceFileError, match="truncated"):
        list(iter_trace(truncated, require_end=True))
    assert len(list(iter_trace(truncated))) == 42


# ---- a golden's header is never trusted alone --------------------------------------------------
def craft(path: Path, header: dict[str, Any], lines: list[dict[str, Any]]) -> Path:
    """A trace written line by line as given (a hand-edited or hostile golden)."""
    w = TraceWriter(path)
    w.write(header_line({"target": "tiny.py:main", "seed": 3, **header}))
    for line in lines:
        w.write(line)
    w.close()
    return path


def steps(n: int, band: bool = False) -> list[dict[str, Any]]:
    out = []
    for s in range(1, n + 1):
        line: dict[str, Any] = {"step": s, "signals": {"loss": f32(1.0 / s)}}
        if band:
            line["band"] = {"loss": {"min": f32(1.0 / s - 0.5), "max": f32(1.0 / s + 0.5)}}
        out.append(line)
    return out


METRIC = {"metrics": {"acc": values.encode_float64(0.9)}}
END = {"end": {"status": "completed"}}
STOPPED = {"end": {"status": "stopped"}}
BANDED = {"golden": {"runs": 3, "band": True}}
CONTRADICTIONS = {
    "stopped at step 1, holds 3 steps and a metric": ({"max_steps": 1}, [*steps(3), METRIC, END]),
    "stopped at step 1, holds 3 steps": ({"max_steps": 1}, [*steps(3), END]),
    "stopped at its last step, holds a metric": ({"max_steps": 3}, [*steps(3), METRIC, STOPPED]),
    "a band without repeated runs": ({}, [*steps(2, band=True), END]),
    "a band of one run": ({"golden": {"runs": 1, "band": True}}, [*steps(2, band=True), END]),
    "a band that misses the golden's value": (BANDED, [
        {"step": 1, "signals": {"loss": f32(1.0)},
         "band": {"loss": {"min": f32(2.0), "max": f32(3.0)}}}, END]),
    "a band of a value the golden lacks": (BANDED, [
        {"step": 1, "signals": {"loss": f32(1.0)},
         "band": {"acc": {"min": f32(2.0), "max": f32(3.0)}}}, END]),
    "a metric band without repeated runs": ({}, [
        *steps(1), {**METRIC, "band": {"acc": {"min": values.encode_float64(0.0),
                                               "max": values.encode_float64(1.0)}}}, END]),
}


@pytest.mark.parametrize("case", list(CONTRADICTIONS))
def test_a_golden_whose_header_contradicts_its_body_is_refused(
        case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """verify would take max_steps from the header and compare step 1 only (MATCHES GOLDEN for
    a model that differs from step 2); a band would accept what no recorded run gave."""
    header, lines = CONTRADICTIONS[case]
    golden = craft(tmp_path / "golden.json", header, lines)
    monkeypatch.chdir(FIXTURES)
    traces = tmp_path / "traces"
    code, out, err = run_cli(capsys, "verify", "tiny.py:main", "--golden", str(golden),
                             "--trace-dir", str(traces))
    assert code == 2, out + err
    assert "header and body disagree" in err and len(err.strip().splitlines()) == 1
    assert not traces.exists(), "refused before any run"
    other = write(tmp_path / "other.jsonl", [1.0, 0.5, 1 / 3])
    for argv in (["diff", str(golden), str(other)], ["diff", str(other), str(golden)]):
        code, out, err = run_cli(capsys, *argv)
        assert code == 2 and "header and body disagree" in err, out + err


def test_a_header_that_agrees_with_its_body_is_accepted(tmp_path: Path) -> None:
    from repro_check.gate.golden import check_golden

    for header, lines in (({"max_steps": 3}, [*steps(3), STOPPED]),        # stopped at its end
                          ({"max_steps": 5}, [*steps(3), METRIC, END]),    # ended before it
                          # the script's own end fell on max_steps: completed, with its metrics
                          ({"max_steps": 3}, [*steps(3), METRIC, END]),
                          (BANDED, [*steps(3, band=True), METRIC, END])):
        assert check_golden(craft(tmp_path / "g.json", header, lines)).steps == 3


def test_a_user_max_steps_says_what_was_not_compared() -> None:
    from repro_check.commands.verify import _not_compared  # noqa: PLC2701 - the rule itself
    from repro_check.run.options import RunOptions
    from repro_check.run.runner import RunResult
    from repro_check.trace.format import TraceStream

    class Golden:
        steps, metrics = 40, {"acc": values.encode_float64(0.9)}

    run = RunResult(2, status="stopped", steps=2)
    text = _not_compared(RunOptions("t.py", max_steps=2), Golden(), run)  # type: ignore[arg-type]
    assert text == ("--max-steps 2 stopped this run: the golden's steps 3 to 40 and its final "
                    "metrics were not compared")
    assert _not_compared(RunOptions("t.py"), Golden(), RunResult(2, status="completed")) is None
    assert TraceStream  # the golden is a stream in verify


@pytest.mark.parametrize("header, field", [({"threads": 5000}, "threads"),
                                           ({"max_steps": 10**13}, "max_steps"),
                                           ({"args": ["x" * 4000] * 60}, "args")])
def test_an_out_of_range_header_field_is_the_goldens_fault(
        header: dict[str, Any], field: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Blamed on --threads before; args too long to pass to a run were an internal error."""
    golden = craft(tmp_path / "g.json", header, [*steps(2), END])
    monkeypatch.chdir(FIXTURES)
    code, out, err = run_cli(capsys, "verify", "tiny.py:main", "--golden", str(golden),
                             "--trace-dir", str(tmp_path / "traces"))
    assert code == 2 and f"the header's {field}" in err and str(golden) in err, err
    assert "--threads" not in err and "--max-steps" not in err


def test_verify_runs_no_metric_rule_from_the_golden(tmp_path: Path) -> None:
    """A regex in a golden's header would run on every line the run prints (a catastrophic one
    hangs verify past --timeout): the rules come from the command line and config only."""
    from repro_check.errors import UsageError
    from repro_check.commands.verify import prepare
    from repro_check.run.options import RunOptions

    evil = "(a+)+$"
    printed_acc = {"dtype": "printed", "bits": "30", "value": 0, "text": "0"}
    golden = craft(tmp_path / "g.json", {"printed_metrics": [["acc", evil], ["unused", evil]]},
                   [*steps(2), {"metrics": {"printed:acc": printed_acc}}, END])
    with pytest.raises(UsageError, match=r"holds printed:acc, .* never runs a regex taken from "
                                         r"a file: give the rule yourself \(--metric "):
        prepare(RunOptions("tiny.py:main"), golden)
    mine = ("acc", r"acc=(\d+)")
    assert prepare(RunOptions("tiny.py:main", printed_metrics=[mine]), golden
                   ).options.printed_metrics == (mine,)
    plain = craft(tmp_path / "p.json", {"printed_metrics": [["unused", evil]]}, [*steps(2), END])
    assert prepare(RunOptions("tiny.py:main"), plain).options.printed_metrics == ()


def test_bits_written_another_way_are_the_same_value(tmp_path: Path) -> None:
    a = craft(tmp_path / "a.json", {}, [
        {"step": 1, "signals": {"loss": {"dtype": "float32", "bits": "3F800000", "value": 1.0},
                                "n": {"dtype": "int", "bits": "00FF", "value": 255}}},
        {"metrics": {"acc": {"dtype": "float64", "bits": "3FE0000000000000", "value": 0.5}}},
        END])
    b = craft(tmp_path / "b.json", {}, [
        {"step": 1, "signals": {"loss": f32(1.0), "n": values.encode(255)}},
        {"metrics": {"acc": values.encode_float64(0.5)}}, END])
    report = diff(a, b)
    assert report.reproducible and report.comparison.judged == {"exact": 3}
    assert not diff(a, write(tmp_path / "c.jsonl", [2.0])).reproducible


def test_many_metrics_show_the_differing_ones_and_a_count(tmp_path: Path) -> None:
    from repro_check.report.ci import plain_summary

    same = {f"m{i}": float(i) for i in range(3000)}
    a = write(tmp_path / "a.jsonl", [1.0], metrics=same)
    b = write(tmp_path / "b.jsonl", [1.0], metrics={**same, **{f"m{i}": -1.0 for i in range(30)}})
    report = diff(a, b)
    assert len(report.comparison.metric_divergences) == 30
    text = plain_summary(report)
    assert sum(line.lstrip().startswith("≠") for line in text.splitlines()) == 20
    assert "3000 metrics compared, 30 differ; the first 20 shown" in " ".join(text.split())
    assert "m2999" not in text  # an agreeing metric has no row


def test_a_band_judges_the_bits_not_the_readable_value(tmp_path: Path) -> None:
    golden = craft(tmp_path / "g.json", BANDED, [*steps(1, band=True), END])
    for loss in ({"dtype": "weird", "bits": "ff", "value": 1.0},
                 {"dtype": "int", "bits": "ff", "value": 1.0},
                 {"dtype": "float32", "bits": "42c80000", "value": 1.0}):  # bits of 100.0
        other = craft(tmp_path / "o.json", {}, [{"step": 1, "signals": {"loss": loss}}, END])
        assert diff(golden, other).first_divergent_step == 1, loss
    inside = craft(tmp_path / "i.json", {}, [{"step": 1, "signals": {"loss": f32(1.2)}}, END])
    assert diff(golden, inside).comparison.judged == {"band": 1}


def test_a_golden_swapped_during_the_run_is_refused(tmp_path: Path) -> None:
    """verify reads the golden twice (checked whole, then fed as the run goes): the second read
    gets the same checks and must hold what the first did."""
    from repro_check.compare.steps import Comparison
    from repro_check.gate.golden import check_golden
    from repro_check.commands.verify import GoldenFeed
    from repro_check.run.runner import RunResult
    from repro_check.trace.format import TraceStream
    from repro_check.trace.protocol import record_of

    checked = check_golden(craft(tmp_path / "g.json", {}, [*steps(3), END]))
    for name, lines, why in (("longer", [*steps(4), END], "changed while verify read it"),
                             ("banded", [*steps(3, band=True), END], "header and body disagree")):
        swapped = craft(tmp_path / f"{name}.json", {}, lines)
        feed = GoldenFeed(Comparison(2), TraceStream(swapped), None, checked)
        with pytest.raises(TraceFileError, match=why):
            feed.event(2, record_of({"step": 1, "signals": {"loss": f32(1.0)}}))
            feed.run_finished(RunResult(2, status="completed", steps=1))


def test_diff_names_the_gpu_numerics_environment(tmp_path: Path) -> None:
    """Two traces whose headers differ in NCCL's algorithm, Transformer Engine's switch and the
    NCCL version: diff lists each as an environment difference and names them as the cause."""
    from ..synthetic_traces import LOSSES, write_trace

    a = write_trace(tmp_path / "a.jsonl", LOSSES,
                    environment={"NCCL_ALGO": "Ring", "nccl": "2.27.3"})
    changed = [*LOSSES[:2], LOSSES[2] + 1e-3, *LOSSES[3:]]
    b = write_trace(tmp_path / "b.jsonl", changed,
                    environment={"NCCL_ALGO": "Tree", "nccl": "2.30.7",
                                 "NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0"})
    report = diff(str(a), str(b))
    assert report.exit_code == 1 and report.gate is not None
    texts = [d.text for d in report.gate.environment_differences]
    assert [d.key for d in report.gate.environment_differences] == [
        "nccl", "NCCL_ALGO", "NVTE_ALLOW_NONDETERMINISTIC_ALGO"]
    assert texts[1] == "a.jsonl recorded with NCCL_ALGO Ring, b.jsonl Tree"
    assert "NCCL_ALGO" in (report.gate.environment_note or "")
