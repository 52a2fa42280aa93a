from __future__ import annotations

import json
from pathlib import Path

import pytest

from repro_check.trace import values
from repro_check.errors import TraceFileError
from repro_check.trace.format import TraceWriter, dumps, header_line, load_trace


def write_trace(path: Path, steps: int = 3) -> Path:
    w = TraceWriter(path)
    w.write(header_line({"target": "t:main", "seed": 1}))
    for s in range(1, steps + 1):
        w.write({"step": s, "signals": {"loss": values.encode_float64(1.0 / s)}})
    w.write({"metrics": {"accuracy": values.encode_float64(float("nan"))}})
    w.write({"end": {"status": "completed"}})
    w.close()
    return path


def test_round_trip_keeps_nan_and_steps(tmp_path: Path) -> None:
    tr = load_trace(write_trace(tmp_path / "t.jsonl"))
    assert [s.step for s in tr.steps] == [1, 2, 3]
    assert tr.header["target"] == "t:main"
    assert values.to_float(tr.metrics["accuracy"]) != values.to_float(tr.metrics["accuracy"])
    assert tr.end == {"status": "completed"}


def test_writer_leaves_nothing_under_the_name_until_closed(tmp_path: Path) -> None:
    w = TraceWriter(tmp_path / "t.jsonl")
    w.write(header_line({}))
    assert not (tmp_path / "t.jsonl").exists()
    w.abort()
    assert list(tmp_path.iterdir()) == []


def test_nan_is_never_a_bare_json_number() -> None:
    with pytest.raises(ValueError):
        dumps({"x": float("nan")})


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty"),
        (b"not json at all\n", "not JSON"),
        (b'{"hello": 1}\n', "no repro-check header"),
        (b'{"format": "repro-check-trace", "version": 99, "header": {}}\n', "version 99"),
        (b'{"format": "repro-check-trace", "version": 1, "header": {}}\n{"step": -4, "signals": {}}\n',
         "out of range"),
        (b'{"format": "repro-check-trace", "version": 1, "header": {}}\n{"step": 1, "signals": {"loss": {"dtype": "float32", "bits": "zz"}}}\n',
         "malformed signals"),
        (b'{"format": "repro-check-trace", "version": 1, "header": {}}\n{"step": 1, "signals": {}}\n{"step": 3, "signals": {}}\n',
         "step 3 where step 2"),
        (b'{"format": "repro-check-trace", "version": 1, "header": {}}\n{"step": 1, "sig',
         "not JSON"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
    ],
)
def test_corrupt_files_are_one_clear_error(tmp_path: Path, content: bytes, message: str) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_bytes(content)
    with pytest.raises(TraceFileError, match=message):
        load_trace(p)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(TraceFileError, match="no such file"):
        load_trace(tmp_path / "nope.jsonl")
    with pytest.raises(TraceFileError, match="directory"):
        load_trace(tmp_path)


def test_reader_never_evaluates_content(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps({"format": "repro-check-trace", "version": 1,
                             "header": {"target": "__import__('os').system('false')"}}) + "\n")
    assert load_trace(p).header["target"].startswith("__import__")


def test_the_file_readers_give_typed_records(tmp_path: Path) -> None:
    """``iter_records`` and ``TraceStream`` read a file as the live readers read a run: typed
    records, the header first (``iter_trace`` stays the plain-dict reader for other tools)."""
    from repro_check.trace.format import TraceStream, iter_records, iter_trace
    from repro_check.trace.protocol import EndRecord, HeaderRecord, MetricsRecord, StepRecord

    path = write_trace(tmp_path / "t.jsonl")
    records = list(iter_records(path, require_end=True))
    assert isinstance(records[0], HeaderRecord) and records[0].header["target"] == "t:main"
    assert [type(r) for r in records[1:]] == [StepRecord] * 3 + [MetricsRecord, EndRecord]
    assert [r.step for r in records[1:4]] == [1, 2, 3]  # type: ignore[attr-defined]
    assert [r.raw for r in records[1:]] == list(iter_trace(path))[1:]
    stream = TraceStream(path)
    first = stream.next_step()
    assert isinstance(first, StepRecord) and first.step == 1 and first.band is None
    stream.drain()
    assert stream.steps == 3 and stream.end == {"status": "completed"} and stream.done
