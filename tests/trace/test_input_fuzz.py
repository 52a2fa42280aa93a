"""Every file given to us, fuzzed: trace headers with hostile nested fields, numbers out of range
(inf, nan, 1e999, huge integers) anywhere in a trace, goldens as ``verify`` reads them, ``diff``
inputs, and ``[tool.repro-check]`` in pyproject.toml. Reading never raises anything but
TraceFileError or UsageError, and the CLI never reaches exit 4 (internal error)."""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from repro_check import config
from repro_check.trace import environment
from repro_check.cli.main import console_main
from repro_check.compare.steps import compare_traces
from repro_check.errors import TraceFileError, UsageError
from repro_check.gate.golden import header_settings
from repro_check.trace import values
from repro_check.trace.format import HEADER_CHECKS, Trace, load_trace

from .trace_fuzz_tiers import fuzz, tiers

#: number literals a file may hold, in range or not (written into the JSON text as they are)
LITERALS = ["1e999", "-1e999", "1E+400", "2e308", "NaN", "Infinity", "-Infinity",
            "1" + "0" * 400, "-" + "9" * 150, "1" + "0" * 400 + ".5", "1e-999", "4.9e-324",
            "1.7976931348623157e308", "-0.0", "0", "1" + "0" * 99, "9" * 101, "1.5", "-3"]


class Literal:
    """A number written into the file as this exact text."""

    def __init__(self, text: str) -> None:
        self.text = text


numbers = st.one_of(
    st.sampled_from(LITERALS).map(Literal),
    st.integers(min_value=-(2**400), max_value=2**400),
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(min_value=-2, max_value=5),
)
scalars = st.none() | st.booleans() | numbers | st.text(max_size=12)
wild = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=12)
#: values of the right type for a header key, often enough that the key after it is reached
RIGHT = {
    "target": st.sampled_from(["t.py", "pkg.mod:main", ""]),
    "args": st.lists(st.text(max_size=5), max_size=3),
    "run": st.integers(-1, 3), "seed": st.integers(-1, 2**33) | st.none(),
    "components": st.lists(st.sampled_from(["python", "torch", "threads", "bogus"]), max_size=3),
    "threads": st.integers(-1, 4) | st.none(), "max_steps": st.integers(-1, 4) | st.none(),
    "environment": st.dictionaries(st.sampled_from(["python", "torch", "seed", "threads", "x"]),
                                   wild, max_size=4),
    "golden": st.fixed_dictionaries({}, optional={"runs": wild, "band": wild,
                                                  "recorded": wild, "repro_check": wild}),
    "distributed": st.dictionaries(st.sampled_from(["rank", "world_size"]), wild, max_size=2),
}
header = st.fixed_dictionaries({}, optional={k: RIGHT.get(k, wild) | wild for k in HEADER_CHECKS}
                               | {"extra": wild})
#: a header whose keys usually have their own type, so the records after it are reached
near_header = st.fixed_dictionaries({}, optional={**RIGHT, "extra": wild})


@st.composite
def scalar(draw: st.DrawFn) -> dict[str, Any]:
    """An encoded scalar, usually well formed, with a readable ``value`` from anywhere."""
    dtype = draw(st.sampled_from(["float32", "float64", "int", "int64", "bool", values.BIGINT]))
    width = {"float32": 8, "float64": 16}.get(dtype)
    bits = draw(st.text(alphabet="0123456789abcdef", min_size=width or 1,
                        max_size=width or 32)) if draw(st.integers(0, 7)) else draw(wild)
    return {"dtype": dtype, "bits": bits, "value": draw(wild)}


record = st.one_of(
    st.fixed_dictionaries({"signals": st.dictionaries(st.sampled_from(["loss", "params"]),
                                                      scalar() | wild, max_size=2)}),
    st.fixed_dictionaries({"metrics": st.dictionaries(st.sampled_from(["acc", "n"]),
                                                      scalar() | wild, max_size=2)},
                          optional={"band": wild}),
    st.fixed_dictionaries({"warning": wild}),
    st.fixed_dictionaries({"error": st.dictionaries(st.sampled_from(
        ["kind", "type", "message", "traceback", "limit", "time"]), wild, max_size=3) | wild}),
    st.fixed_dictionaries({"info": st.dictionaries(st.sampled_from(
        ["status", "steps", "seconds"]), wild, max_size=3) | wild}),
    st.fixed_dictionaries({"probe": wild}),
)
end = st.fixed_dictionaries({}, optional={k: wild for k in ("status", "returncode", "signal",
                                                            "seconds", "steps", "output_tail")})


def to_json(obj: Any) -> str:
    """JSON text with each :class:`Literal` written as its own text."""
    found: list[str] = []

    def default(o: Any) -> Any:
        if isinstance(o, Literal):
            found.append(o.text)
            return f"@@LITERAL{len(found) - 1}@@"
        raise TypeError(type(o).__name__)

    text = json.dumps(obj, default=default)
    for i, literal in enumerate(found):
        text = text.replace(f'"@@LITERAL{i}@@"', literal)
    return text


def trace_lines(head: Any, records: list[dict[str, Any]], end_record: Any,
                version: Any = 2) -> str:
    lines = [to_json({"format": "repro-check-trace", "version": version, "header": head})]
    step = 0
    for r in records:
        if "signals" in r:
            step += 1
            r = {"step": step, **r}
        lines.append(to_json(r))
    lines.append(to_json({"end": end_record}))
    return "\n".join(lines) + "\n"


def read(path: Path) -> Trace | TraceFileError:
    """load_trace's answer: a Trace or one TraceFileError line (anything else fails)."""
    try:
        return load_trace(path, require_end=True)
    except TraceFileError as e:
        assert "\n" not in str(e) and str(path) in str(e) and len(str(e)) < 600, str(e)
        return e


def use(trace: Trace, path: Path) -> None:
    """What later stages do with a trace that read: none of it may fail but with a UsageError."""
    try:
        header_settings(trace.header, str(path))
    except TraceFileError:
        pytest.fail("the reader passed a header that header_settings refuses")
    env = environment.run_settings(trace.header)
    for d in environment.differences(env, {}):
        d.describe()
        json.dumps(d.to_dict(), allow_nan=False)
    compare_traces([trace, trace])
    for value in [*trace.metrics.values(), *(v for s in trace.steps for v in s.signals.values())]:
        if isinstance(value, dict):
            values.readable(value)
            values.to_float(value)
    json.dumps([trace.header, trace.end, trace.errors, trace.warnings], allow_nan=False)


FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@pytest.fixture(scope="module")
def spot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("input-fuzz")


@tiers(full=150)
def test_hostile_headers_and_records_read_or_are_one_line(spot: Path, examples: int) -> None:
    @fuzz(examples)
    @given(head=header | wild, records=st.lists(record, max_size=4), end_record=end,
           version=st.sampled_from([2, 2, 2, 1, Literal("2.0"), True, Literal("1e999"), "2"]))
    def prop(head: Any, records: list, end_record: Any, version: Any) -> None:
        path = spot / "t.jsonl"
        path.write_text(trace_lines(head, records, end_record, version))
        result = read(path)
        if isinstance(result, Trace):
            use(result, path)

    prop()


@tiers(full=150)
def test_a_number_anywhere_reads_only_if_finite(spot: Path, examples: int) -> None:
    @fuzz(examples)
    @given(head=header, text=st.sampled_from(LITERALS), where=st.sampled_from(
        ["started", "env", "seconds", "metric", "signal", "info", "band"]))
    def prop(head: dict, text: str, where: str) -> None:
        a_number_anywhere(spot, head, text, where)

    prop()


def a_number_anywhere(spot: Path, head: dict, text: str, where: str) -> None:
    """A literal out of float range (or NaN, or an integer of 101+ digits) is never read."""
    n = Literal(text)
    enc = {"dtype": "float64", "bits": "3ff0000000000000", "value": n}
    head = {**head, "started": n} if where == "started" else \
        {**head, "environment": {"x": n}} if where == "env" else {}  # the header is read first
    records: list[dict[str, Any]] = [
        {"signals": {"loss": enc if where == "signal" else {"dtype": "int", "bits": "1"}}},
        {"metrics": {"acc": enc if where == "metric" else {"dtype": "int", "bits": "1"}},
         "band": {"acc": {"min": enc, "max": enc}} if where == "band" else {}},
        {"info": {"seconds": n if where == "info" else 1}},
    ]
    path = spot / "n.jsonl"
    path.write_text(trace_lines(head, records, {"seconds": n if where == "seconds" else 0}))
    result = read(path)
    bad = text.lstrip("-") in ("NaN", "Infinity") or len(text.lstrip("-")) > 100 \
        or (not text.lstrip("-").isdigit() and math.isinf(float(text)))
    if bad:
        assert isinstance(result, TraceFileError)
        assert "out of range" in str(result) or "not JSON" in str(result), result
    if isinstance(result, Trace):
        use(result, path)


@contextmanager
def no_internal_error(monkeypatch: pytest.MonkeyPatch, folder: Path) -> Iterator[None]:
    """A bug of ours raises here (REPRO_CHECK_DEBUG) instead of becoming exit 4; run where no
    pyproject.toml is found."""
    with monkeypatch.context() as m:
        m.setenv("REPRO_CHECK_DEBUG", "1")
        m.setenv("NO_COLOR", "1")
        m.chdir(folder)
        yield


GOOD = trace_lines({"target": "t.py"}, [{"signals": {"loss": {
    "dtype": "float32", "bits": "3f800000", "value": 1.0}}}], {"status": "completed"})


@tiers(full=60, fast=20)
def test_diff_and_verify_never_reach_an_internal_error(
        spot: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        examples: int) -> None:
    @fuzz(examples)
    @given(head=near_header | header, records=st.lists(record, max_size=3), end_record=end)
    def prop(head: dict, records: list, end_record: Any) -> None:
        diff_and_verify(spot, monkeypatch, capsys, head, records, end_record)

    prop()


def diff_and_verify(spot: Path, monkeypatch: pytest.MonkeyPatch,
                    capsys: pytest.CaptureFixture[str], head: dict, records: list,
                    end_record: Any) -> None:
    bad, good = spot / "bad.jsonl", spot / "good.jsonl"
    bad.write_text(trace_lines(head, records, end_record))
    good.write_text(GOOD)
    report = spot / "r.json"
    with no_internal_error(monkeypatch, spot):
        codes = [console_main(["diff", str(a), str(b), "--json", str(report)])
                 for a, b in ((bad, good), (good, bad))]
        # the golden is read (and refused, or accepted) before the target, which is missing
        codes.append(console_main(["verify", "no_such_target_here.py", "--golden", str(bad)]))
    err = capsys.readouterr().err
    assert all(c in (0, 1, 2) for c in codes), err
    assert codes[2] == 2 and "internal error" not in err
    if codes[0] != 2:
        json.loads(report.read_text())


# ---- pyproject.toml ----------------------------------------------------------------------------
def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, Literal):
        return v.text
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) \
            else repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v).__name__)


toml_scalars = st.one_of(
    st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), st.integers(-3, 5),
    st.floats(), st.text(max_size=10), st.sampled_from(["*", "loss", "metric:*", "tiny.py",
                                                        "python,torch", "bogus"]),
    st.dates(), st.sampled_from([Literal("1" + "0" * 400), Literal("1" + "0" * 5000),
                                 Literal("0x7fff"), Literal("1e999"), Literal("-inf")]),
)
toml_values = st.recursive(toml_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6) | st.sampled_from(
                               list(config.TARGET_KEYS)), inner, max_size=3), max_leaves=10)
#: literals that once got past the checks (a number too large for a float) come up often
hostile = st.sampled_from([Literal("1" + "0" * 400), Literal("-1" + "0" * 400), Literal("inf"),
                           Literal("nan"), Literal("1" + "0" * 5000)])
section = st.dictionaries(st.sampled_from([*config.KEYS, "bogus", "doctor"]),
                          hostile | toml_scalars | toml_values
                          | st.dictionaries(st.sampled_from(["loss", "metric:*", "*", "default"]),
                                            hostile | toml_scalars, max_size=2), max_size=5)
deep = st.sampled_from(["[" * 3000 + "]" * 3000, "{a = " * 2000 + "1" + "}" * 2000])


@tiers(full=150)
def test_any_pyproject_loads_or_is_one_usage_error(spot: Path, examples: int) -> None:
    @fuzz(examples)
    @given(table=section, raw=st.none() | st.text(max_size=60) | deep, where=st.booleans())
    def prop(table: dict, raw: str | None, where: bool) -> None:
        any_pyproject(spot, table, raw, where)

    prop()


def any_pyproject(spot: Path, table: dict, raw: str | None, where: bool) -> None:
    folder = spot / "project"
    folder.mkdir(exist_ok=True)
    path = folder / "pyproject.toml"
    body = "\n".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in table.items())
    if raw is not None and raw.startswith(("[[[", "{a =")):
        body += f"\nnested = {raw}"
    elif raw is not None:
        body += "\n" + raw
    path.write_text(f"[tool.repro-check]\n{body}\n", encoding="utf-8", errors="surrogatepass")
    try:
        cfg = config.load(path) if where else config.load(start=folder)
        cfg.tolerances.policy()
        for entry in cfg.targets:
            cfg.golden_for(entry.target, entry)
    except UsageError as e:
        assert "\n" not in str(e) and len(str(e)) < 600, str(e)


@FUZZ
@given(data=st.binary(max_size=300))
def test_any_bytes_as_pyproject(spot: Path, data: bytes) -> None:
    path = spot / "pyproject.toml"
    path.write_bytes(b"[tool.repro-check]\n" + data)
    try:
        config.load(path)
    except UsageError as e:
        assert "\n" not in str(e), str(e)
