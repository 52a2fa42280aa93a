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
