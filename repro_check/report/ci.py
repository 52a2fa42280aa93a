"""CI outputs: JUnit XML (a testcase a target), and under GitHub Actions an ``::error``
annotation a failing target plus a Markdown step summary (kept under GitHub's 1 MiB limit).

JUnit is written with the standard library's ElementTree, atomically like every file we write.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from typing import IO, Any

from repro_check.trace.atomic import write_text_atomic
from repro_check.errors import ExitCode
from repro_check.report.model import Report
from repro_check.report.part import Kind
from repro_check.report.bisect import bisect_failure
from repro_check.report.controlpart import ControlView
from repro_check.report.evidencepart import evidence_ci
from repro_check.report.failedpart import failed_runs_failure
from repro_check.report.text import visible

#: GitHub refuses a step summary file larger than this
STEP_SUMMARY_LIMIT = 1024 * 1024
_TRUNCATED = ("\n\n_(repro-check summary truncated to stay under the 1 MiB step summary "
              "limit; see the JSON or JUnit report for the rest)_\n")
#: characters XML 1.0 cannot hold (the tail of a target's output may contain them)
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def verdict(report: Report) -> str:
    return report.verdict.word


def failure_message(report: Report) -> str | None:
    """One line naming the first divergent step (None when the report passes), with the control
    characters of anything that came from the target or a file made visible."""
    text = _failure_text(report)
    return None if text is None else visible(text)


def _failure_text(report: Report) -> str | None:
    if report.exit_code == ExitCode.REPRODUCIBLE:
        return None
    if report.interrupted:
        return f"{report.target}: interrupted"
    if report.error is not None:
        return failed_runs_failure(report, f"{report.target}: target failed: {report.error}")
    if report.bisect is not None and report.bisect.first_bad is not None:
        return bisect_failure(report.target, report.bisect)
    if report.unverified and report.control is not None:
        return f"{report.target}: unverified: {report.control.detail}"
    if report.finished is not None:  # no step comparison: the kind names the first difference
        return _kind(report).failure_text(report, None)
    cmp = report.comparison
    div = cmp.divergence if cmp else None
    if div is None:
        warn = "; ".join(report.warnings[-1:])
        return f"{report.target}: {verdict(report)}{': ' + warn if warn else ''}"
    return _kind(report).failure_text(report, div)


def _kind(report: Report) -> Kind:
    """The report's kind (:mod:`repro_check.report.kinds`)."""
    from repro_check.report.kinds import kind_of

    return kind_of(report)


def plain_summary(report: Report, width: int = 100) -> str:
    """The terminal summary as plain text (for the body of a JUnit failure)."""
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, highlight=False, soft_wrap=False)
    # with rich: only when a summary is written
    from repro_check.report.render import summary

    console.print(summary(report), crop=False)
    return buf.getvalue()


def _xml_text(text: str) -> str:
    return _XML_BAD.sub("\ufffd", _ANSI.sub("", text))


def junit_xml(reports: Sequence[Report], command: str = "check") -> str:
    """A JUnit XML document with one testcase a target."""
    suites = ET.Element("testsuites", name="repro-check")
    suite = ET.SubElement(suites, "testsuite", name=f"repro-check {command}",
                          timestamp=time.strftime("%Y-%m-%dT%H:%M:%S"))
    failures = errors = 0
    total_time = 0.0
    targets = [r.target for r in reports]
    for report in reports:
        # the wall time of the target, not the sum of runs that went in parallel
        seconds = report.wall_seconds if report.wall_seconds is not None \
            else sum(r.seconds for r in _kind(report).timed_runs(report))
        total_time += seconds
        # one target with several argument lists (--across 'args=A|B'): a testcase each
        name = report.target if targets.count(report.target) == 1 else \
            f"{report.target} -- {shlex.join(report.args)}" if report.args else \
            f"{report.target} (no arguments)"
        case = ET.SubElement(suite, "testcase", classname=f"repro-check.{command}",
                             name=name, time=f"{seconds:.3f}")
        evidence = report.evidence
        props = ET.SubElement(case, "properties")
        for name, value in (("steps_compared", evidence.steps),
                            ("metrics_compared", evidence.metrics),
                            ("saved_tensors_compared", evidence.saved_tensors)):
            ET.SubElement(props, "property", name=name, value=str(value))
        message = failure_message(report)
        if message is not None:
            body = plain_summary(report)
            kind = "failure" if report.exit_code == ExitCode.NOT_REPRODUCIBLE else "error"
            failures += kind == "failure"
            errors += kind == "error"
            failure_type = "Unverified" if report.unverified else "NotReproducible"
            el = ET.SubElement(case, kind, message=_xml_text(message),
                               type=failure_type if kind == "failure" else
                               ExitCode(report.exit_code).name.title().replace("_", ""))
            el.text = _xml_text(body)
        out = evidence_ci(report)
        if report.replay:
            out.append(f"replay: {report.replay}\n")
        control = ControlView.of(report)
        if control is not None:  # what the verdict stands on: the negative control
            out.append(control.ci())
        if out:
            ET.SubElement(case, "system-out").text = _xml_text("".join(out))
    for el in (suites, suite):
        el.set("tests", str(len(reports)))
        el.set("failures", str(failures))
        el.set("errors", str(errors))
        el.set("time", f"{total_time:.3f}")
    suite.set("skipped", "0")
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def write_junit(path: str | os.PathLike[str], reports: Sequence[Report], command: str) -> None:
    write_text_atomic(path, junit_xml(reports, command))


# ---- GitHub Actions ----------------------------------------------------------------------------
#: what the Actions runner takes for a workflow command in a line of a step's output: ``::`` at
#: the start of a line (after any blank) and the older ``##[`` anywhere; lines end at \r or \n
_COMMAND = re.compile(r"(?:^|(?<=[\r\n]))([^\S\r\n]*):(?=:)|#(?=#\[|#vso\[)")
#: written inside a command's marker, it leaves the text as read and makes it no command
_BREAK = "\u200b"


def inert(text: str, line_start: bool = True) -> str:
    """``text`` that no line of can act as a workflow command: a zero-width space goes inside
    each command marker. ``line_start`` says whether ``text`` starts a line."""
    def cut(m: re.Match[str]) -> str:
        if m.group(0).startswith("#"):
            return "#" + _BREAK
        if m.start() == 0 and not line_start:
            return m.group(0)
        return f"{m.group(1)}:{_BREAK}"
    return _COMMAND.sub(cut, text)


_LAST_LINE_BLANK = re.compile(r"(?:^|[\r\n])[^\S\r\n]*\Z")
_LAST_LINE_COLON = re.compile(r"(?:^|[\r\n])[^\S\r\n]*:\Z")
_HASH_MARK = re.compile(r"##\[|##vso\[")


class CommandSafe:
    """A text stream (stdout, stderr) whose output cannot act as a workflow command under GitHub
    Actions: everything repro-check prints (summaries with text from traces, goldens, the
    target's source and output) goes through it; its own annotations go to ``raw``. A marker
    split between two writes is caught too."""

    def __init__(self, raw: IO[str]) -> None:
        self.raw = raw
        self._tail = ""  # what was written last: enough to tell where the line stands

    def write(self, text: str) -> int:
        if not text:
            return 0
        tail = self._tail
        line_start = bool(_LAST_LINE_BLANK.search(tail)) if tail else True
        safe = inert(text, line_start)
        if (_LAST_LINE_COLON.search(tail) and safe.startswith(":")) or any(
                m.start() < len(tail[-5:]) < m.end()
                for m in _HASH_MARK.finditer(tail[-5:] + safe[:6])):
            safe = _BREAK + safe  # a marker split between two writes
        self.raw.write(safe)
        self._tail = (tail + text)[-64:]
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, ...
        return getattr(self.raw, name)


def command_stream(out: IO[str]) -> IO[str]:
    """Where repro-check's own workflow commands go: past :class:`CommandSafe`."""
    return out.raw if isinstance(out, CommandSafe) else out


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(report: Report, command: str) -> str | None:
    """The ``::error`` workflow command for a failing report (None when it passes)."""
    message = failure_message(report)
    if message is None:
        return None
    if report.replay:
        message += f"\nReplay: {visible(report.replay)}"
    props = [f"title={_escape_property(f'repro-check {command}')}"]
    path = report.target.rpartition(":")[0] if ".py:" in report.target else report.target
    if path.endswith(".py") and os.path.isfile(path) and not os.path.isabs(path):
        props.insert(0, f"file={_escape_property(path)}")
    return f"::error {','.join(props)}::{_escape_data(message)}"


def _md(text: Any) -> str:
    """Text for inline code (in a table cell too): no backtick to end it, no pipe to end the cell,
    no line break; inside a code span, Markdown and HTML are shown as written."""
    return visible(str(text)).replace("|", "\\|").replace("`", "'").replace("\n", " ")


#: every ASCII punctuation character: each may be backslash-escaped in Markdown
_MD_PUNCT = re.compile(r"[!-/:-@\[-`{-~]")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def _md_text(text: Any) -> str:
    """Text that came from a file or a target, for the summary's Markdown outside code: shown as
    written, never read as Markdown (links, emphasis, headings, tables) or HTML (tags, entities)
    nor autolinked, on one line."""
    one_line = visible(str(text)).replace("\r", " ").replace("\n", " ")
    return _MD_PUNCT.sub(lambda m: _HTML.get(m.group(0), "\\" + m.group(0)), one_line)


def markdown(reports: Sequence[Report], command: str) -> str:
    """The step summary: a table of targets, then the details of each failure."""
    lines = [f"## repro-check {command}", "",
             "| target | result | first divergent step | signal | steps |",
             "|---|---|---|---|---|"]
    for r in reports:
        mark = "✅" if r.exit_code == ExitCode.REPRODUCIBLE else "❌"
        step = r.first_divergent_step if r.first_divergent_step is not None else "—"
        steps = ", ".join(str(x.steps) for x in r.results)
        lines.append(f"| `{_md(r.target)}` | {mark} {verdict(r)} | {step} | "
                     f"{_md_text(r.divergent_signal or '—')} | {steps} |")
    for r in reports:
        message = failure_message(r)
        if message is None:
            continue
        lines += ["", f"### ❌ `{_md(r.target)}`", "", _md_text(message)]
        diffs = r.kind_answers.environment_lines()
        if diffs:
            lines += ["", "Environment differences:", ""]
            lines += [f"- {_md_text(text)}" for text in diffs]
        if r.replay:
            lines += ["", "Replay:", "", "```sh", visible(r.replay).replace("```", "'''"), "```"]
    return "\n".join(lines) + "\n"


def append_step_summary(path: str | os.PathLike[str], text: str,
                        limit: int = STEP_SUMMARY_LIMIT) -> bool:
    """Append ``text`` to the step summary file, cut so the file stays under ``limit`` bytes.

    Returns False when there was no room at all.
    """
    try:
        used = os.path.getsize(path)
    except OSError:
        used = 0
    room = limit - used - 1
    data = text.encode("utf-8", "backslashreplace")
    if len(data) > room:
        note = _TRUNCATED.encode("utf-8")
        if room <= len(note) + 64:
            return False
        cut = data[: room - len(note)]
        cut = cut[: cut.rfind(b"\n") + 1] or cut
        data = cut.decode("utf-8", errors="ignore").encode("utf-8") + note
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    return True


def on_github(environ: Mapping[str, str] | None = None) -> bool:
    return (environ if environ is not None else os.environ).get("GITHUB_ACTIONS") == "true"


def emit(
    reports: Sequence[Report],
    command: str,
    *,
    junit: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    stdout: IO[str] | None = None,
) -> None:
    """Every CI output that applies: JUnit when asked, GitHub's when running there."""
    env = environ if environ is not None else os.environ
    if junit:
        write_junit(junit, reports, command)
    if not on_github(env):
        return
    out = command_stream(stdout or sys.stdout)
    for r in reports:
        line = annotation(r, command)
        if line:
            out.write(line + "\n")
    out.flush()
    summary_path = env.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        try:
            append_step_summary(summary_path, markdown(reports, command))
        except OSError as e:
            sys.stderr.write(f"repro-check: warning: cannot write the step summary: {e}\n")
