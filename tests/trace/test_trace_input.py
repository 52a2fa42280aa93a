"""Trace files given to us (diff inputs, goldens): every malformed header field and out-of-range
number is one TraceFileError line found when the file is read; what is not a regular file is
refused without blocking; what the reader keeps stays flat however many lines the file has."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from repro_check.errors import TraceFileError
from repro_check.gate.golden import header_settings
from repro_check.trace.format import (
    KEPT_ERRORS,
    KEPT_WARNINGS,
    TraceStream,
    check_header,
    dumps,
    header_line,
    load_trace,
    scan,
)

from ..conftest import FIXTURES, cli_env, repro_check_cli

STEP = {"step": 1, "signals": {"loss": {"dtype": "float32", "bits": "3f800000", "value": 1.0}}}
END = {"end": {"status": "completed", "returncode": 0, "seconds": 1.5, "steps": 1}}
GOOD_HEADER = {
    "target": "tiny.py", "args": ["--steps", "3"], "run": 1, "seed": 0,
    "components": ["python", "torch"], "seeding": {"python": 0, "cudnn": {"benchmark": False}},
    "threads": 1, "max_steps": None, "probe_step": None, "started": 1.7e9,
    "environment": {"python": "3.11.7", "threads": 1, "seed_components": ["python"],
                    "device_capability": None, "future_key": [1, "a", None]},
    "golden": {"runs": 2, "band": True, "recorded": "2026-01-01", "repro_check": "0.1"},
    "distributed": {"rank": 0, "world_size": 2}, "a_key_from_a_newer_version": {"x": 1},
}


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line if line.endswith("\n") else line + "\n" for line in lines))
    return path


def trace_text(header: Any, *records: Any, version: Any = 2) -> list[str]:
    head = json.dumps({"format": "repro-check-trace", "version": version, "header": header})
    return [head, *(r if isinstance(r, str) else json.dumps(r) for r in records)]


def run_cli(*argv: str, cwd: Path = FIXTURES) -> subprocess.CompletedProcess[str]:
    return repro_check_cli(list(argv), cwd=cwd, timeout=120)


def test_a_complete_header_with_unknown_keys_reads(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "t.jsonl", trace_text(GOOD_HEADER, STEP, END))
    trace = load_trace(path, require_end=True)
    assert trace.header == GOOD_HEADER and len(trace.steps) == 1
    assert header_settings(trace.header, str(path)).args == ["--steps", "3"]


BAD_HEADERS: list[tuple[str, Any, str]] = [
    ("not an object", [1, 2], "header is not an object"),
    ("environment a number", {"environment": 1}, "malformed environment"),
    ("environment a list", {"environment": [["python", "3"]]}, "malformed environment"),
    ("environment nested", {"environment": {"x": {"y": {"z": 1}}}}, "malformed environment"),
    ("args a string", {"args": "--steps 3"}, "malformed args"),
    ("args of numbers", {"args": [1, 2]}, "malformed args"),
    ("args nested", {"args": [["a"]]}, "malformed args"),
    ("seed a bool", {"seed": True}, "malformed seed"),
    ("seed too big", {"seed": 2**40}, "malformed seed"),
    ("components unknown", {"components": ["torch", "bogus"]}, "malformed components"),
    ("threads zero", {"threads": 0}, "malformed threads"),
    ("max_steps a float", {"max_steps": 3.0}, "malformed max_steps"),
    ("run negative", {"run": -1}, "malformed run"),
    ("started a string", {"started": "now"}, "malformed started"),
    ("seeding a list", {"seeding": [1]}, "malformed seeding"),
    ("golden runs a string", {"golden": {"runs": "2"}}, "malformed golden"),
    ("golden band a number", {"golden": {"runs": 2, "band": 1}}, "malformed golden"),
    ("distributed rank negative", {"distributed": {"rank": -1}}, "malformed distributed"),
    ("target empty", {"target": ""}, "malformed target"),
]


@pytest.mark.parametrize("header, message", [(h, m) for _, h, m in BAD_HEADERS],
                         ids=[name for name, _, _ in BAD_HEADERS])
def test_a_malformed_header_field_is_found_when_read(tmp_path: Path, header: Any,
                                                     message: str) -> None:
    path = write_lines(tmp_path / "t.jsonl", trace_text(header, STEP, END))
    for read in (lambda: load_trace(path), lambda: TraceStream(path)):
        with pytest.raises(TraceFileError, match="not a valid repro-check trace") as caught:
            read()
        assert message in str(caught.value) and str(path) in str(caught.value)
    if isinstance(header, dict):
        with pytest.raises(TraceFileError, match=message):
            header_settings(header, str(path))  # the same checks for headers made in memory
        with pytest.raises(TraceFileError, match=message):
            check_header(header, str(path))


OUT_OF_RANGE: list[tuple[str, list[str]]] = [
    ("end seconds 1e999", trace_text({}, STEP, '{"end": {"status": "ok", "seconds": 1e999}}')),
    ("end seconds -1e999", trace_text({}, STEP, '{"end": {"seconds": -1E+999}}')),
    ("environment value", trace_text({"environment": "ENV"}, STEP, END)),
    ("started", trace_text({"started": "START"}, STEP, END)),
    ("metric value", trace_text({}, STEP, '{"metrics": {"acc": {"dtype": "float64", "bits": '
                                          '"3ff0000000000000", "value": 1e999}}}', END)),
    ("signal value", trace_text({}, '{"step": 1, "signals": {"loss": {"dtype": "float32", '
                                    '"bits": "3f800000", "value": 2e308}}}', END)),
    ("huge int", trace_text({}, STEP, '{"end": {"seconds": 1' + "0" * 400 + '}}')),
    ("huge int in info", trace_text({}, STEP, '{"info": {"steps": ' + "9" * 150 + '}}', END)),
    ("long float", trace_text({}, STEP, '{"end": {"seconds": 1' + "0" * 400 + '.5}}')),
]


@pytest.mark.parametrize("lines", [lines for _, lines in OUT_OF_RANGE],
                         ids=[name for name, _ in OUT_OF_RANGE])
def test_a_number_out_of_range_is_not_a_valid_trace(tmp_path: Path, lines: list[str]) -> None:
    text = [line.replace('"ENV"', '{"x": 1e999}').replace('"START"', "1e999") for line in lines]
    path = write_lines(tmp_path / "t.jsonl", text)
    with pytest.raises(TraceFileError, match=r"not a valid repro-check trace \(number .* out "
                                             r"of range\)"):
        load_trace(path)


def test_tiny_numbers_and_the_largest_float_still_read(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "t.jsonl", trace_text(
        {"started": 1.7976931348623157e308}, STEP,
        '{"end": {"seconds": 1e-999, "returncode": -' + "9" * 99 + "}}"))
    trace = load_trace(path, require_end=True)
    assert trace.header["started"] == 1.7976931348623157e308 and trace.end is not None
    assert trace.end["seconds"] == 0.0


@pytest.mark.parametrize("version", ["2.0", "true", '"2"', "null", "1.0", "[2]"])
def test_only_an_int_version_we_know_is_accepted(tmp_path: Path, version: str) -> None:
    path = write_lines(tmp_path / "t.jsonl", [
        '{"format": "repro-check-trace", "version": ' + version + ', "header": {}}',
        json.dumps(STEP), json.dumps(END)])
    with pytest.raises(TraceFileError, match=r"not a valid repro-check trace \(version .* is "
                                             r"not an integer\)"):
        load_trace(path)


BAD_RECORDS: list[tuple[str, Any, str]] = [
    ("error message a number", {"error": {"kind": "raised", "message": 5}}, "malformed message"),
    ("error traceback a list", {"error": {"traceback": ["a"]}}, "malformed traceback"),
    ("end returncode a string", {"end": {"returncode": "0"}}, "malformed returncode"),
    ("end steps negative", {"end": {"steps": -1}}, "malformed steps"),
    ("end status a dict", {"end": {"status": {}}}, "malformed status"),
    ("end seconds a bool", {"end": {"seconds": True}}, "malformed seconds"),
    ("info seconds a string", {"info": {"seconds": "1"}}, "malformed info"),
    ("info not an object", {"info": 3}, "malformed info"),
    ("metric value a list", {"metrics": {"acc": {"dtype": "int", "bits": "1", "value": [1]}}},
     "malformed metrics"),
    ("metric value a long text", {"metrics": {"acc": {"dtype": "int", "bits": "1",
                                                      "value": "x" * 300}}}, "malformed metrics"),
    ("signal value an object", {"step": 1, "signals": {"loss": {
        "dtype": "float32", "bits": "3f800000", "value": {"a": 1}}}}, "malformed signals"),
]


@pytest.mark.parametrize("record, message", [(r, m) for _, r, m in BAD_RECORDS],
                         ids=[name for name, _, _ in BAD_RECORDS])
def test_a_malformed_nested_field_is_not_a_valid_trace(tmp_path: Path, record: Any,
                                                       message: str) -> None:
    records = [record, END] if "step" in record else [STEP, record, END]
    path = write_lines(tmp_path / "t.jsonl", trace_text({}, *records))
    with pytest.raises(TraceFileError, match="not a valid repro-check trace") as caught:
        load_trace(path)
    assert message in str(caught.value)


def test_the_cli_says_one_line_and_exit_2_before_anything_runs(tmp_path: Path) -> None:
    good = write_lines(tmp_path / "good.jsonl", trace_text({}, STEP, END))
    bad = write_lines(tmp_path / "bad.jsonl", trace_text({"environment": 1}, STEP, END))
    inf = write_lines(tmp_path / "inf.jsonl", trace_text(
        {}, STEP, '{"end": {"status": "completed", "seconds": 1e999}}'))
    for argv in (["diff", str(good), str(bad)], ["diff", str(inf), str(good)],
                 ["verify", "tiny.py", "--golden", str(bad), "--trace-dir", str(tmp_path / "t")],
                 ["verify", "tiny.py", "--golden", str(inf), "--trace-dir", str(tmp_path / "t")]):
        proc = run_cli(*argv)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and "not a valid repro-check trace" in proc.stderr
        assert "started" not in proc.stderr and not (tmp_path / "t").exists()


# ---- what is not a regular file -------------------------------------------------------------
def no_block(read: Callable[[], Any]) -> BaseException | None:
    """Run ``read`` in a thread: it must finish (not block) and raise; what it raised."""
    caught: list[BaseException] = []

    def target() -> None:
        try:
            read()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            caught.append(e)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout=60)
    assert not t.is_alive(), "reading blocked"
    return caught[0] if caught else None


def test_a_fifo_device_socket_or_folder_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "folder").mkdir()
    sock_path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        for path, kind in ((fifo, "not a regular file (a FIFO)"),
                           (Path(os.devnull), "not a regular file (a device)"),
                           (Path("/dev/zero"), "not a regular file (a device)"),
                           (sock_path, "not a regular file (a socket)"),
                           (tmp_path / "folder", "is a directory")):
            for read in (partial(load_trace, path), partial(scan, path)):
                err = no_block(read)
                assert isinstance(err, TraceFileError) and str(err) == f"{path}: {kind}", err


def test_a_fifo_swapped_in_after_the_check_cannot_block(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """os.stat says regular file (the race), the open must still not wait for a writer."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    regular = os.stat(__file__)
    real_stat = os.stat

    def stat_as_if_regular(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        return regular if str(path) == str(fifo) else real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat_as_if_regular)
    err = no_block(lambda: load_trace(fifo))
    assert isinstance(err, TraceFileError) and "not a regular file (a FIFO)" in str(err)
    assert stat.S_ISFIFO(real_stat(fifo).st_mode)


def test_the_cli_refuses_a_fifo_golden_and_diff_input(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    good = write_lines(tmp_path / "good.jsonl", trace_text({}, STEP, END))
    for argv in (["diff", str(fifo), str(good)], ["diff", str(good), "/dev/zero"],
                 ["verify", "tiny.py", "--golden", str(fifo)]):
        proc = run_cli(*argv)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert "not a regular file" in proc.stderr


# ---- bounded memory --------------------------------------------------------------------------
def many_lines(path: Path, record: Callable[[int], dict[str, Any]], count: int) -> Path:
    with open(path, "w") as fh:
        fh.write(trace_text({})[0] + "\n" + dumps(STEP))
        for i in range(count):
            fh.write(dumps(record(i)))
        fh.write(dumps(END))
    return path


def peak_of(read: Callable[[], Any]) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        result = read()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_error_and_warning_lines_are_kept_in_part_and_counted(tmp_path: Path) -> None:
    errors = many_lines(tmp_path / "e.jsonl", lambda i: {"error": {
        "kind": "raised", "type": "RuntimeError", "message": f"boom {i} " + "x" * 1000}}, 20_000)
    stream, peak = peak_of(lambda: scan(errors))
    assert stream.error_count == 20_000 and len(stream.errors) == KEPT_ERRORS
    assert stream.errors[0]["message"].startswith("boom 0 ")
    assert stream.errors[-1]["message"].startswith("boom 19999 ")  # the one that ended the run
    assert peak < 2**21, f"peak {peak / 2**20:.1f} MiB for 20 MB of error lines"
    warnings = many_lines(tmp_path / "w.jsonl", lambda i: {"warning": f"w{i} " + "y" * 1000},
                          20_000)
    stream, peak = peak_of(lambda: load_trace(warnings))
    assert len(stream.warnings) == KEPT_WARNINGS and stream.warnings[0].startswith("w0 ")
    assert peak < 2**21, f"peak {peak / 2**20:.1f} MiB for 20 MB of warning lines"


def test_long_texts_in_kept_lines_are_clipped(tmp_path: Path) -> None:
    path = many_lines(tmp_path / "t.jsonl", lambda i: {"error": {
        "message": "m" * 2**20, "traceback": "t" * 2**20 + "END"}} if i % 2 else
        {"warning": "w" * 2**20}, 24)
    stream, peak = peak_of(lambda: scan(path))
    kept = [len(e["message"]) + len(e["traceback"]) for e in stream.errors]
    assert max(kept) < 2**18 and all(e["traceback"].endswith("END") for e in stream.errors)
    assert max(len(w) for w in stream.warnings) < 2**13
    assert peak < 12 * 2**20, f"peak {peak / 2**20:.1f} MiB"  # a few lines of 1 MiB at a time


def test_a_second_metrics_line_is_not_a_valid_trace(tmp_path: Path) -> None:
    path = many_lines(tmp_path / "m.jsonl", lambda i: {"metrics": {
        f"m{i}": {"dtype": "int", "bits": "1", "value": 1}}}, 2)
    with pytest.raises(TraceFileError, match=r":4: .*\(more than one metrics line\)"):
        load_trace(path)


@pytest.mark.parametrize("after", [STEP, {**STEP, "step": 2}, END, {"warning": "w"}])
def test_nothing_follows_the_end_record(tmp_path: Path, after: dict[str, Any]) -> None:
    path = tmp_path / "spliced.jsonl"
    path.write_text("".join(dumps(x) for x in (header_line(GOOD_HEADER), STEP, END, after)))
    with pytest.raises(TraceFileError, match=r":4: .*\(a record after the end record\)"):
        scan(path)


def test_a_line_of_two_kinds_is_refused(tmp_path: Path) -> None:
    """A step that also carries ``end`` would end the file for one reader and not another."""
    path = tmp_path / "two.jsonl"
    path.write_text("".join(dumps(x) for x in (header_line(GOOD_HEADER), {**STEP, **END}, END)))
    with pytest.raises(TraceFileError, match=r":2: .*a line of more than one kind"):
        scan(path)


def test_lone_surrogates_are_kept_written_out(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(dumps(header_line({**GOOD_HEADER, "target": "t.py\udc80"}))
                    + '{"step": 1, "signals": {"loss\\ud800": {"dtype": "float32", "bits": '
                      '"3f800000", "value": 1.0}}}\n' + dumps({"warning": "w\ud83d\ude00"})
                    + dumps(END))
    trace = load_trace(path)
    assert trace.header["target"] == "t.py\\udc80" and list(trace.steps[0].signals) == [
        "loss\\ud800"]
    assert trace.warnings == ["w\U0001f600"]  # a pair is one character, kept as it is
    for text in (trace.header["target"], trace.warnings[0]):
        text.encode("utf-8")


def test_diff_peak_memory_does_not_grow_with_error_lines(tmp_path: Path) -> None:
    """Peak RSS of ``diff`` on a trace of 60,000 error lines against a trace of none."""
    small = many_lines(tmp_path / "small.jsonl", lambda i: {}, 0)
    big = many_lines(tmp_path / "big.jsonl", lambda i: {"error": {
        "kind": "raised", "type": "RuntimeError", "message": f"boom {i}" * 20,
        "traceback": "Traceback ...\n" * 20}}, 60_000)

    def peak_rss_kib(a: Path) -> int:
        proc = subprocess.Popen([sys.executable, "-m", "repro_check", "diff", str(a), str(small)],
                                env=cli_env(), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        assert proc.returncode == 0
        return usage.ru_maxrss

    base, grown = peak_rss_kib(small), peak_rss_kib(big)
    assert grown - base < 16 * 1024, f"{base} KiB for no error line, {grown} KiB for 60,000"


def test_the_run_s_metrics_and_the_printed_ones_are_two_lines_of_one_trace(tmp_path: Path) -> None:
    one = {"dtype": "int", "bits": "1", "value": 1}
    path = tmp_path / "t.jsonl"
    lines = [header_line({"target": "t:main"}), {"step": 1, "signals": {}},
             {"metrics": {"acc": one}}, {"metrics": {"printed:accuracy": one}},
             {"end": {"status": "completed"}}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert set(load_trace(path).metrics) == {"acc", "printed:accuracy"}
    lines.insert(4, {"metrics": {"printed:loss": one}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(TraceFileError, match="more than one metrics line"):
        load_trace(path)
