"""CI outputs: JUnit XML, GitHub annotations and the step summary, from real reports of diff."""

from __future__ import annotations

import dataclasses
import io
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from repro_check.report import ci
from repro_check.api import diff
from repro_check.report.model import Report
from repro_check.trace.format import TraceWriter, header_line

from ..gate.test_golden import LOSSES, f32, write


@pytest.fixture
def reports(tmp_path: Path) -> list[Report]:
    a = write(tmp_path / "a.jsonl", LOSSES)
    same = diff(a, write(tmp_path / "same.jsonl", LOSSES))
    changed = diff(a, write(tmp_path / "b.jsonl", LOSSES[:9] + [5.0] * 31))
    changed.target = "train.py:main,100%"
    broken = tmp_path / "broken.jsonl"
    w = TraceWriter(broken)
    w.write(header_line({"target": "bad.py:main", "seed": 1}))
    w.write({"step": 1, "signals": {"loss": f32(2.0)}})
    w.write({"error": {"kind": "raised", "type": "RuntimeError", "message": "boom \x00\x1b[31m"}})
    w.write({"end": {"status": "failed", "returncode": 98}})
    w.close()
    failed = diff(a, broken)
    return [same, changed, failed]


def test_junit_has_a_testcase_per_target(reports: list[Report], tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    ci.write_junit(path, reports, "verify")
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites" and root.get("tests") == "3"
    assert root.get("failures") == "1" and root.get("errors") == "1"
    cases = root.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == ["train.py:main", "train.py:main,100%", "bad.py:main"]
    assert all(c.get("classname") == "repro-check.verify" for c in cases)
    assert cases[0].find("failure") is None and cases[0].find("error") is None
    failure = cases[1].find("failure")
    assert failure is not None and "first divergent step 10 (signal loss)" in failure.get("message", "")
    assert "First divergence: step 10" in (failure.text or "")
    assert "replay: repro-check verify" in (cases[1].findtext("system-out") or "")
    error = cases[2].find("error")
    assert error is not None and "target failed" in error.get("message", "")
    assert "boom" in error.get("message", "") and "\x00" not in path.read_text()


def test_annotation_escapes_workflow_command_syntax(reports: list[Report]) -> None:
    assert ci.annotation(reports[0], "verify") is None
    line = ci.annotation(reports[1], "verify")
    assert line is not None and line.startswith("::error title=repro-check verify::")
    assert "\n" not in line and "train.py:main,100%25" in line and "%0AReplay: " in line


def test_emit_only_under_github_actions(reports: list[Report], tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    out = io.StringIO()
    ci.emit(reports, "verify", environ={}, stdout=out)
    assert out.getvalue() == "" and summary.read_text() == "# earlier step\n"
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    ci.emit(reports, "verify", environ=env, stdout=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and all(line.startswith("::error ") for line in lines)
    text = summary.read_text()
    assert text.startswith("# earlier step\n## repro-check verify")
    assert "| `train.py:main` | ✅ reproducible |" in text
    assert "| `train.py:main,100%` | ❌ not reproducible | 10 | loss |" in text
    assert "❌ target failed" in text and "```sh\nrepro-check verify" in text


def test_step_summary_stays_under_the_limit(tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    summary.write_bytes(b"x" * 900)
    text = "".join(f"| line {i} | ✅ |\n" for i in range(200))
    assert ci.append_step_summary(summary, text, limit=2000)
    data = summary.read_bytes()
    assert len(data) < 2000 and data.startswith(b"x" * 900)
    assert b"truncated to stay under the 1 MiB" in data
    data.decode("utf-8")  # never cut inside a character
    before = summary.read_bytes()
    assert not ci.append_step_summary(summary, text, limit=len(before) + 10)
    assert summary.read_bytes() == before


HOSTILE_TEXT = ("x\n::stop-commands::TOKEN\r::warning::y\n  ::error::z ##[error]w\n"
                "<img src=x onerror=alert(1)> **b** [l](http://e) | `c` &amp;")


def test_text_from_a_file_reaches_the_step_summary_as_text(reports: list[Report]) -> None:
    changed = reports[1]
    changed.target = HOSTILE_TEXT
    changed.comparison.divergence.detail = HOSTILE_TEXT
    text = ci.markdown([changed], "diff")
    outside_code = re.sub(r"`[^`\n]*`", "", text)  # inside a code span, text shows as written
    assert "<img" not in outside_code and "&lt;img" in outside_code
    assert "**b**" not in outside_code and "[l](http" not in outside_code
    assert "&amp;amp" in outside_code  # an entity in the file shows as written
    assert text.count("\n| ") == 1 + 1  # the header row and one target row: no line break got in
    assert text.count("\n### ") == 1


def test_the_step_summary_lists_the_environment_differences_of_a_failure(tmp_path: Path) -> None:
    a = write(tmp_path / "a.jsonl", LOSSES)
    other = diff(a, write(tmp_path / "b.jsonl", LOSSES[:9] + [5.0] * 31, env={"torch": "9.9"}))
    texts = [d.text for d in other.gate.environment_differences]
    assert texts and any("9.9" in t for t in texts)
    text = ci.markdown([other], "diff")
    assert texts == ["a.jsonl recorded with torch 2.14.1, b.jsonl 9.9"]
    assert ("\n\nEnvironment differences:\n\n"
            "- a\\.jsonl recorded with torch 2\\.14\\.1\\, b\\.jsonl 9\\.9\n") in text
    # a report without a gate (a check) has no sides whose environments differ
    assert "Environment differences" not in ci.markdown(
        [dataclasses.replace(other, gate=None)], "check")


def test_nothing_printed_can_act_as_a_workflow_command() -> None:
    raw = io.StringIO()
    out = ci.CommandSafe(raw)
    for chunk in (HOSTILE_TEXT, "\n", ":", ":set-output name=x::1\n", "a ##", "[group]\n"):
        out.write(chunk)
    text = raw.getvalue()
    assert [line for line in text.replace("\r", "\n").splitlines()
            if line.lstrip().startswith("::") or "##[" in line] == []
    assert text.replace("\u200b", "") == (HOSTILE_TEXT + "\n::set-output name=x::1\n"
                                          "a ##[group]\n")
    assert ci.command_stream(out) is raw  # where repro-check's own annotations go


def test_junit_time_is_the_wall_time_not_the_sum_of_parallel_runs() -> None:
    from repro_check.run.runner import RunResult

    runs = [RunResult(k, status="completed", steps=5, seconds=10.0) for k in (1, 2)]
    report = Report(target="train:main", args=[], seed=1, components=[], runs=2, results=runs,
                    comparison=None, wall_seconds=10.5)  # the two runs went side by side
    root = ET.fromstring(ci.junit_xml([report], "check").split("?>", 1)[1])
    assert root.find("./testsuite/testcase").get("time") == "10.500"
    assert root.get("time") == "10.500"
