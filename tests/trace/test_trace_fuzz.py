"""The trace reader on hostile input: any bytes give a Trace or one TraceFileError line, in bounded
memory, and reading never executes anything from the file."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from repro_check.trace import values
from repro_check.compare.steps import compare_traces
from repro_check.errors import TraceFileError
from repro_check.trace.format import MAX_LINE_BYTES, Trace, iter_trace, load_trace

from ..conftest import cli_env
from .trace_fuzz_tiers import fuzz, tiers

HEADER = b'{"format": "repro-check-trace", "version": 1, "header": {}}\n'


def read(path: Path) -> Trace | TraceFileError:
    """load_trace's answer: a Trace, or the TraceFileError (anything else fails the test)."""
    try:
        return load_trace(path)
    except TraceFileError as e:
        message = str(e)
        assert message and "\n" not in message and len(message) < 500, message
        assert str(path) in message
        return e


def check_usable(trace: Trace) -> None:
    """What later stages do with a trace they were given must not fail either."""
    compare_traces([trace, trace])
    for step in trace.steps:
        for value in step.signals.values():
            if isinstance(value, dict):
                values.readable(value)
                values.to_float(value)
    for value in trace.metrics.values():
        values.readable(value)


@pytest.fixture(scope="module")
def spot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "trace.jsonl"


FUZZ = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(data=st.binary(max_size=2000))
def test_any_bytes(spot: Path, data: bytes) -> None:
    spot.write_bytes(data)
    result = read(spot)
    if isinstance(result, Trace):
        check_usable(result)


@FUZZ
@given(data=st.binary(max_size=2000))
def test_any_bytes_after_a_valid_header(spot: Path, data: bytes) -> None:
    spot.write_bytes(HEADER + data)
    result = read(spot)
    if isinstance(result, Trace):
        check_usable(result)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
HEX = "0123456789abcdefABCDEF"
WIDTH = {"float16": 4, "bfloat16": 4, "float32": 8, "float64": 16}


@st.composite
def scalar(draw: st.DrawFn) -> dict:
    """An encoded scalar, often with bits of exactly the length its dtype needs (or one off),
    with and without a sign or prefix."""
    dtype = draw(st.sampled_from([*WIDTH, "int64", "bool", "complex64", "x"]))
    length = WIDTH.get(dtype) or draw(st.integers(0, 20))
    length = draw(st.sampled_from([length, length, length - 1, length + 1, 70]))
    prefix = draw(st.sampled_from(["", "", "-", "+", " ", "0x", "_"]))
    size = max(length - len(prefix), 0)
    bits = prefix + draw(st.text(alphabet=HEX, min_size=size, max_size=size))
    if draw(st.integers(0, 9)) == 0:
        bits = draw(json_values)
    return {"dtype": dtype, "bits": bits, "value": draw(json_values)}


record = st.one_of(
    st.fixed_dictionaries({"step": st.integers(min_value=-2, max_value=5) | json_values,
                           "signals": st.dictionaries(st.text(max_size=8),
                                                      scalar() | json_values, max_size=3)}),
    st.fixed_dictionaries({"metrics": st.dictionaries(st.text(max_size=8), scalar() | json_values,
                                                      max_size=3)}),
    st.fixed_dictionaries({"warning": json_values}),
    st.fixed_dictionaries({"end": json_values}),
    st.dictionaries(st.text(max_size=8), json_values, max_size=3),
)


@tiers(full=200)
def test_trace_shaped_json(spot: Path, examples: int) -> None:
    @fuzz(examples)
    @given(header=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
           version=st.sampled_from([1, 1, 1, 2, 0, "1", None, 1.0]),
           records=st.lists(record, max_size=8))
    def prop(header: dict, version: object, records: list) -> None:
        lines = [json.dumps({"format": "repro-check-trace", "version": version,
                             "header": header})]
        lines += [json.dumps(r) for r in records]
        spot.write_text("\n".join(lines) + "\n")
        result = read(spot)
        if isinstance(result, Trace):
            check_usable(result)

    prop()


@tiers(full=200)
def test_fuzzed_values_in_a_well_formed_trace(spot: Path, examples: int) -> None:
    @fuzz(examples)
    @given(steps=st.lists(st.dictionaries(st.sampled_from(["loss", "grad_norm", "x"]), scalar(),
                                          min_size=1, max_size=3), max_size=6),
           metrics=st.dictionaries(st.text(max_size=6), scalar(), max_size=3))
    def prop(steps: list, metrics: dict) -> None:
        lines = [HEADER.decode().strip()]
        lines += [json.dumps({"step": n, "signals": signals})
                  for n, signals in enumerate(steps, 1)]
        lines.append(json.dumps({"metrics": metrics}))
        spot.write_text("\n".join(lines) + "\n")
        result = read(spot)
        if isinstance(result, Trace):
            check_usable(result)

    prop()


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty file"),
        (b"\n\n   \n", "empty file"),
        (HEADER[:30], "not JSON"),  # truncated in the header
        (HEADER + b'{"step": 1, "signals": {"loss": {"dtype": "float32", "bi', "not JSON"),
        (b"<html><body>502 Bad Gateway</body></html>\n", "not JSON"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "not UTF-8"),
        (b'{"reproducible": true, "steps": [3, 3]}\n', "no repro-check header"),
        (b'{"format": "repro-check-trace", "version": 99, "header": {}}\n', "version 99 is not supported"),
        (b'{"format": "repro-check-trace", "version": "1", "header": {}}\n', "version '1' is not"),
        (b'{"format": "repro-check-trace", "header": {}}\n', "version None is not"),
        (HEADER + b'{"step": 1000000000000000000000000000000, "signals": {}}\n', "out of range"),
        (HEADER + b'{"step": 1e400, "signals": {}}\n', "out of range"),
        (HEADER + b'{"step": 1.5, "signals": {}}\n', "out of range"),
        (HEADER + b'{"step": true, "signals": {}}\n', "out of range"),
        (HEADER + b'{"step": 1, "signals": {"loss": NaN}}\n', "not JSON"),
        (HEADER + b'{"step": 1, "signals": {"loss": {"dtype": "float32", "bits": "-0000001"}}}\n',
         "malformed signals"),
        (HEADER + b'{"step": 1, "signals": {"loss": {"dtype": "int64", "bits": "' + b"f" * 65
         + b'"}}}\n', "malformed signals"),
        (HEADER + b'{"step": 1, "signals": {}, "x": ' + b"9" * 5000 + b"}\n", "out of range"),
        (HEADER + b"[" * 100_000 + b"]" * 100_000 + b"\n", "not JSON"),
        (HEADER + b'{"metrics": {"acc": 0.5}}\n', "malformed metrics"),
        (HEADER + b'"just a string"\n', "not a JSON object"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_corrupt_or_foreign_file_is_one_line(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    result = read(path)
    assert isinstance(result, TraceFileError) and message in str(result), result


@pytest.mark.parametrize("prefix", [b"", HEADER], ids=["from-the-start", "after-the-header"])
def test_1_gb_file_fails_fast_in_bounded_memory(tmp_path: Path, prefix: bytes) -> None:
    path = tmp_path / "huge.jsonl"
    with open(path, "wb") as fh:
        fh.write(prefix)
        fh.truncate(2**30)  # sparse: a gigabyte of NUL bytes and no newline
    tracemalloc.start()
    try:
        result = read(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(result, TraceFileError) and "line too long" in str(result)
    assert peak < 4 * MAX_LINE_BYTES, f"peak {peak / 2**20:.0f} MiB"


def test_long_valid_trace_streams_in_bounded_memory(tmp_path: Path) -> None:
    """iter_trace holds one line at a time, however long the trace."""
    path = tmp_path / "long.jsonl"
    step = '{"step": %d, "signals": {"loss": {"dtype": "float32", "bits": "3f800000", "value": 1.0}}}\n'
    with open(path, "w") as fh:
        fh.write(HEADER.decode())
        for n in range(1, 20_001):
            fh.write(step % n)
    tracemalloc.start()
    try:
        count = sum(1 for _ in iter_trace(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == 20_001
    assert peak < 2**20, f"peak {peak / 2**20:.1f} MiB"


HOOK = r"""
import json, sys
from pathlib import Path
from repro_check.errors import TraceFileError
from repro_check.trace.format import load_trace

folder = Path(sys.argv[1])
load_trace(folder / "valid.jsonl")  # everything the reader needs is imported now
WATCH = ("exec", "compile", "pickle.", "marshal.", "os.system", "os.exec", "os.posix_spawn",
         "os.spawn", "os.fork", "subprocess.", "ctypes.", "code.__new__", "builtins.input")
seen = []
sys.addaudithook(lambda event, args: seen.append(event) if event.startswith(WATCH) else None)
for path in sorted(folder.glob("hostile-*")):
    try:
        load_trace(path)
    except TraceFileError:
        pass
print(json.dumps(seen))
"""


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


def test_reading_never_executes_anything(tmp_path: Path) -> None:
    import pickle

    marker = tmp_path / "EXECUTED"
    pickled = pickle.dumps(_Payload(marker))
    (tmp_path / "valid.jsonl").write_bytes(HEADER)
    hostile = {
        "pickle": pickled,
        "pickle-after-header": HEADER + pickled + b"\n",
        "pickle-in-json": HEADER + json.dumps({"step": 1, "signals": {
            "loss": pickled.decode("latin-1")}}).encode() + b"\n",
        "code-strings": json.dumps({"format": "repro-check-trace", "version": 1, "header": {
            "target": f"__import__('pathlib').Path({str(marker)!r}).touch()",
            "py/reduce": [{"py/function": "pathlib.Path.touch"}, {"py/tuple": [str(marker)]}],
            "__class__": "pathlib.Path"}}).encode() + b"\n" + json.dumps(
            {"metrics": {"eval('1')": {"dtype": "int64", "bits": "1", "value": "exec('x')"}}}
        ).encode() + b"\n",
    }
    for name, content in hostile.items():
        (tmp_path / f"hostile-{name}").write_bytes(content)
    proc = subprocess.run([sys.executable, "-c", HOOK, str(tmp_path)], capture_output=True,
                          text=True, env=cli_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
    assert not marker.exists()
