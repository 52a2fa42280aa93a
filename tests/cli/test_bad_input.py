"""Bad input from any door (flags, the config file, the Python API, the pytest plugin): one
line, exit 2, before any run; text from a target or a file never reaches a terminal raw; a
signal while the reports are written still leaves them whole."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from repro_check import cli
from repro_check.errors import UsageError
from repro_check.run.options import RunOptions

from ..conftest import FIXTURES, cli_env, repro_check_cli

BAD_FLAGS = [
    (["--threads", "2147483648"], "--threads must be at most"),
    (["--threads", "0"], "--threads must be at least 1"),
    (["--timeout", "nan"], "--timeout must be a positive number"),
    (["--timeout", "inf"], "--timeout must be a positive number"),
    (["--timeout", "-1"], "--timeout must be a positive number"),
    (["--jobs", "0"], "--jobs must be at least 1"),
    (["--jobs", "-1"], "--jobs must be at least 1"),
    (["--runs", "1"], "a check compares runs: --runs must be at least 2"),
    (["--runs", "0"], "a check compares runs: --runs must be at least 2, got 0"),
    (["--no-seed", "--seed", "5"], "--no-seed runs without any seed"),
    (["--atol", "los=1e-3"], "unknown signal 'los' (did you mean 'loss'?)"),
    (["--rtol", "gradz=1"], "unknown signal 'gradz'"),
    (["--max-steps", "0"], "--max-steps must be at least 1"),
    (["--seed", "-3"], "--seed must be between 0"),
    # sizes that would be allocated, waited on or started before any run
    (["--runs", "100000000"], "--runs must be at most 1000"),
    (["--jobs", "1000000000"], "--jobs must be at most"),
    (["--max-steps", "10000000000000000000000"], "--max-steps must be at most"),
    (["--timeout", "1e300"], "--timeout must be at most"),
    (["--nproc-per-node", "1000000"], "--nproc-per-node must be at most"),
    (["--across", "threads=1,2,3,4", "--runs", "300"], "at most 1000 runs in all"),
    # the target's arguments must fit a command line, as they would for python itself
    (["--", "x" * 200_000], "argument 1 of the target is 200000 bytes long"),
    (["--", "a\0b"], "argument 1 of the target holds a NUL character"),
    (["--", *["y" * 100_000] * 30], "more than a command line may hold"),
]


@pytest.mark.parametrize(("flags", "message"), BAD_FLAGS,
                         ids=[" ".join(f)[:40] for f, _ in BAD_FLAGS])
def test_bad_run_flags_are_one_line_and_exit_2_before_any_run(
        flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(FIXTURES)
    traces = tmp_path / "traces"
    code = cli.console_main(["tiny:main", "--trace-dir", str(traces), *flags])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not traces.exists() or not any(traces.iterdir()), "no run may start"


@pytest.mark.parametrize("target", ["ti\nny.py", "ti\nny.py:main", "no/such\nfile.py"])
def test_an_error_naming_a_target_with_a_line_break_is_one_line(
        target: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(FIXTURES)
    assert cli.console_main([target]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "\\n" in err, err


# a console script that sends itself SIG when the module NAME starts to be imported
_SIGNAL_WHILE_IMPORTING = """
import os, signal, sys
SIG, NAME = int(sys.argv.pop(1)), sys.argv.pop(1)
class Hook:
    def find_spec(self, name, path=None, target=None):
        if name == NAME:
            os.kill(os.getpid(), SIG)
        return None
sys.meta_path.insert(0, Hook())
from repro_check.cli import console_main
sys.exit(console_main(sys.argv[1:]))
"""


@pytest.mark.parametrize(("sig", "module"), [(signal.SIGTERM, "repro_check.cli.commands"),
                                             (signal.SIGINT, "repro_check.report.text")],
                         ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_repro_check_starts_is_exit_130_and_one_line(sig: int,
                                                                    module: str) -> None:
    proc = subprocess.run([sys.executable, "-c", _SIGNAL_WHILE_IMPORTING, str(int(sig)), module,
                           "tiny:main"], cwd=FIXTURES, env=cli_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == "repro-check: interrupted\n"


def test_record_and_verify_accept_one_run_and_a_check_does_not() -> None:
    RunOptions("x:main", runs=1)  # what record and verify make
    with pytest.raises(UsageError, match="--runs must be at least 2"):
        from repro_check.commands.check import run_check

        run_check(RunOptions("x:main", runs=1))


def test_the_config_file_and_the_api_meet_the_same_validation(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import repro_check

    for kwargs in ({"threads": 0}, {"runs": 0}, {"jobs": 0}, {"timeout": float("nan")},
                   {"seed": 2**40}, {"no_seed": True, "seed": 3}):
        with pytest.raises(UsageError):
            repro_check.check("tiny:main", **kwargs)
    (tmp_path / "pyproject.toml").write_text("[tool.repro-check]\nseed = 4\natol = { los = 1 }\n")
    monkeypatch.chdir(tmp_path)
    assert cli.console_main(["tiny:main"]) == 2
    assert "unknown signal 'los'" in capsys.readouterr().err


def test_a_flag_beats_the_config_on_seeding(tmp_path: Path) -> None:
    import argparse

    from repro_check.cli.plan import options_for
    from repro_check.config import load

    (tmp_path / "pyproject.toml").write_text("[tool.repro-check]\nseed = 4\n")
    cfg = load(start=tmp_path)
    ns = argparse.Namespace(seed=None, no_seed=True, without=None, max_steps=None, timeout=None,
                            threads=None)
    opts = options_for(ns, cfg, "x:main", None, None)
    assert opts.no_seed and opts.seed is None and opts.components == []


def test_a_package_without_main_is_a_usage_error_before_any_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert cli.console_main(["pkg", "--trace-dir", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert "'pkg' is a package without __main__.py" in err and "frozen runpy" not in err
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").iterdir())


def test_record_of_a_target_that_cannot_be_found_creates_no_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.console_main(["record", "nosuch:main", "-o", "goldens/deep/g.json"]) == 2
    assert "no module named 'nosuch'" in capsys.readouterr().err
    assert not (tmp_path / "goldens").exists()


def test_replay_of_a_run_with_a_timeout_keeps_the_timeout() -> None:
    from repro_check.run.replay import replay_line

    line = replay_line(RunOptions("train:main", seed=1, timeout=2.5), upto=3)
    assert "--timeout 2.5" in line and "--max-steps 3" in line


# ---- text from a target or a file ---------------------------------------------------------------
HOSTILE = "\x1b]0;owned\x07\x1b[2J\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\\u202e"


def test_control_characters_are_made_visible() -> None:
    from repro_check.report.text import visible

    shown = visible(f"a{HOSTILE}\tb\nc")
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown
    assert "\\x1b]0;owned\\x07" in shown and "\\u202e" in shown
    assert shown.endswith("\tb\nc")  # tab and newline stay


def test_a_hostile_target_cannot_drive_the_terminal_or_ci_log(tmp_path: Path) -> None:
    script = tmp_path / "hostile.py"
    script.write_text(
        "import sys\n"
        f"print({HOSTILE!r} * 3)\n"
        f"raise RuntimeError({HOSTILE!r})\n")
    env = cli_env(GITHUB_ACTIONS="true", GITHUB_STEP_SUMMARY=str(tmp_path / "summary.md"))
    proc = repro_check_cli([str(script), "--trace-dir", str(tmp_path / "t"), "--junit",
                            str(tmp_path / "j.xml")], cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 3, proc.stderr
    for where, text in (("stdout", proc.stdout), ("stderr", proc.stderr),
                        ("step summary", (tmp_path / "summary.md").read_text())):
        assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text, where
    assert "\\x1b]0;owned" in proc.stdout  # shown, not obeyed
    assert "::error" in proc.stdout


def test_a_hostile_golden_header_is_shown_escaped(tmp_path: Path) -> None:
    from repro_check.trace.format import TraceWriter, header_line

    paths = []
    for k, loss in ((1, 1.0), (2, 2.0)):
        path = tmp_path / f"t{k}.jsonl"
        w = TraceWriter(path)
        w.write(header_line({"target": f"x{HOSTILE}:main", "args": [HOSTILE], "seed": 1,
                             "environment": {"torch": f"2{HOSTILE}"}}))
        from repro_check.trace import values

        w.write({"step": 1, "signals": {"loss": values.encode_float64(loss)}})
        w.write({"end": {"status": "completed"}})
        w.close()
        paths.append(str(path))
    proc = repro_check_cli(["diff", *paths], cwd=tmp_path, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "\x1b" not in proc.stdout + proc.stderr and "\\x1b" in proc.stdout


def test_text_from_a_golden_cannot_issue_workflow_commands(tmp_path: Path) -> None:
    """A header field with a line break and ``::stop-commands::`` would switch off the
    annotation printed after it; raw HTML would land in the step summary."""
    from repro_check.trace import values
    from repro_check.trace.format import TraceWriter, header_line

    evil = "x.py:main\n::stop-commands::TOKEN\n##[group]<img src=x onerror=alert(1)>"
    paths = []
    for k, loss in ((1, 1.0), (2, 2.0)):
        path = tmp_path / f"t{k}.jsonl"
        w = TraceWriter(path)
        w.write(header_line({"target": evil, "seed": 1, "environment": {"torch": evil}}))
        w.write({"step": 1, "signals": {"loss": values.encode_float64(loss)}})
        w.write({"end": {"status": "completed"}})
        w.close()
        paths.append(str(path))
    summary = tmp_path / "summary.md"
    env = cli_env(GITHUB_ACTIONS="true", GITHUB_STEP_SUMMARY=str(summary))
    proc = repro_check_cli(["diff", *paths], cwd=tmp_path, env=env, timeout=60)
    assert proc.returncode == 1, proc.stderr
    commands = [line for line in (proc.stdout + proc.stderr).replace("\r", "\n").splitlines()
                if line.lstrip().startswith("::") or "##[" in line]
    assert len(commands) == 1 and commands[0].startswith("::error title=repro-check diff::")
    assert "stop-commands" in proc.stdout.replace("\u200b", "")  # shown, not obeyed
    outside_code = re.sub(r"```.*?```|`[^`\n]*`", "", summary.read_text(),
                          flags=re.DOTALL)  # code shows as written
    assert "<img" not in outside_code and "&lt;img" in outside_code


def test_text_no_terminal_or_file_can_take_is_written_out(tmp_path: Path) -> None:
    """A lone surrogate, from a trace (valid JSON) or an undecodable file name, was an internal
    error (exit 4) when printed or saved."""
    from repro_check.trace import values
    from repro_check.trace.format import TraceWriter, header_line

    folder = Path(os.fsdecode(bytes(tmp_path) + b"/d\xff"))
    folder.mkdir()
    paths = []
    for k, loss in ((1, 1.0), (2, 2.0)):
        path = folder / f"t{k}.jsonl"
        w = TraceWriter(path)
        w.write(header_line({"target": "t.py\udc80", "seed": 1, "environment": {"torch": "\ud800"}}))
        w.write({"step": 1, "signals": {"loss\udcff": values.encode_float64(loss)}})
        w.write({"warning": "w\ud800"})
        w.write({"end": {"status": "completed"}})
        w.close()
        paths.append(path)
    junit = folder / "j.xml"
    proc = subprocess.run([sys.executable, "-m", "repro_check", "diff", *map(str, paths),
                           "--junit", str(junit), "--json", str(folder / "r.json")],
                          cwd=tmp_path, env=cli_env(), capture_output=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert b"t.py\\udc80" in proc.stdout and b"d\\udcff" in proc.stdout
    assert "t.py\\udc80" in junit.read_text()
    assert json.loads((folder / "r.json").read_text())["first_divergent_step"] == 1


OVERLAPS = {
    "diff --json A": (["diff", "{a}", "{b}", "--json", "{a}"], "--json"),
    "diff --junit B": (["diff", "{a}", "{b}", "--junit", "{b}"], "--junit"),
    "diff --json a symlink to A": (["diff", "{a}", "{b}", "--json", "{link}"], "--json"),
    "diff --json a hard link to B": (["diff", "{a}", "{b}", "--json", "{hard}"], "--json"),
    "verify --junit the golden": (["verify", "tiny.py:main", "--golden", "{a}", "--junit", "{a}"],
                                  "--junit"),
    "verify --trace-dir the golden": (["verify", "tiny.py:main", "--golden", "{a}",
                                       "--trace-dir", "{a}"], "--trace-dir"),
    "--json and --junit one file": (["diff", "{a}", "{b}", "--json", "{out}", "--junit", "{out}"],
                                    "--junit"),
    "check --json the target": (["{script}", "--json", "{script}"], "--json"),
    "record -o the target": (["record", "{script}", "-o", "{script}"], "-o"),
    "record -o the config": (["record", "{script}", "-o", "{config}"], "-o"),
    "check --report the target": (["{script}", "--report", "{script}"], "--report"),
}


@pytest.mark.parametrize("case", list(OVERLAPS))
def test_an_output_is_never_an_input(case: str, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _two_traces(tmp_path)
    (tmp_path / "link.json").symlink_to(a)
    os.link(b, tmp_path / "hard.json")
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not run')\n")
    config = tmp_path / "pyproject.toml"
    config.write_text("[tool.repro-check]\nseed = 1\n")
    names = {"a": a, "b": b, "link": str(tmp_path / "link.json"), "script": str(script),
             "hard": str(tmp_path / "hard.json"), "out": str(tmp_path / "out.txt"),
             "config": str(config)}
    before = {p: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    monkeypatch.chdir(tmp_path)
    argv, flag = OVERLAPS[case]
    code = cli.console_main([arg.format(**names) for arg in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"repro-check: error: {flag} ") and "is the same file as" in err
    assert len(err.strip().splitlines()) == 1
    assert {p: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
    assert not (tmp_path / ".repro-check").exists(), "refused before any run"


# ---- signals while the reports are written ------------------------------------------------------
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_while_reports_are_written_leaves_them_whole_and_exits_130(
        signum: int, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from repro_check.cli import commands

    a, b = _two_traces(tmp_path)
    real = commands.printer

    def printer_then_signal(out: object = None) -> object:
        show = real(out)  # type: ignore[arg-type]

        def both(report: object) -> None:
            os.kill(os.getpid(), signum)  # arrives as the summary is printed
            show(report)
        return both

    monkeypatch.setattr(commands, "printer", printer_then_signal)
    out = tmp_path / "report.json"
    junit = tmp_path / "junit.xml"
    code = cli.console_main(["diff", a, b, "--json", str(out), "--junit", str(junit)])
    assert code == 130
    assert json.loads(out.read_text())["first_divergent_step"] == 1
    assert "<testsuites" in junit.read_text()
    assert "interrupted" in capsys.readouterr().err


def test_a_signal_before_the_runs_starts_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from repro_check import targets

    real = targets.check

    def check_then_signal(t: object) -> None:
        real(t)  # type: ignore[arg-type]
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(targets, "check", check_then_signal)
    monkeypatch.chdir(FIXTURES)
    out = tmp_path / "r.json"
    code = cli.console_main(["tiny:main", "--json", str(out), "--trace-dir", str(tmp_path / "t")])
    assert code == 130
    report = json.loads(out.read_text())
    assert report["interrupted"] is True and report["steps"] == []


def _two_traces(tmp_path: Path) -> tuple[str, str]:
    from repro_check.trace import values
    from repro_check.trace.format import TraceWriter, header_line

    out = []
    for k, loss in ((1, 1.0), (2, 1.5)):
        path = tmp_path / f"run-{k}.jsonl"
        w = TraceWriter(path)
        w.write(header_line({"target": "train:main", "args": [], "seed": 1}))
        w.write({"step": 1, "signals": {"loss": values.encode_float64(loss)}})
        w.write({"end": {"status": "completed"}})
        w.close()
        out.append(str(path))
    return out[0], out[1]


# ---- the pytest plugin ---------------------------------------------------------------------------
pytest_plugins = ["pytester"]
#: records a step, then hangs (fixtures/failures/hang.py without torch.optim or loader workers)
HANG = Path(__file__).with_name("cli_hang.py")


def test_plugin_rejects_zero_runs_and_threads_and_has_a_default_timeout(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plug=f'''
import sys
sys.path.insert(0, {str(FIXTURES)!r})


def test_zero_runs(assert_reproducible):
    assert_reproducible("tiny:main", runs=0)


def test_zero_threads(assert_reproducible):
    assert_reproducible("tiny:main", threads=0)


def test_hangs(assert_reproducible):
    assert_reproducible({str(HANG)!r}, runs=2)
''')
    # the target never ends: any limit is reached; a short one keeps the test short
    pytester.makeini("[pytest]\nrepro_check_timeout = 1\n")
    result = pytester.runpytest_subprocess("-p", "repro_check.pytest_plugin", "-q")
    out = result.stdout.str()
    assert "--runs must be at least 1" in out and "--threads must be at least 1" in out
    assert "timed out after 1 s" in out
    result.assert_outcomes(failed=3)


def test_plugin_turns_ctrl_c_into_an_interrupted_session(pytester: pytest.Pytester) -> None:
    pid_file = pytester.path / "pids.txt"
    pytester.makepyfile(test_int=f'''
import os, signal, threading, time


def interrupt_once_training_hangs():
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if os.path.exists({str(pid_file)!r}) and "ready" in open({str(pid_file)!r}).read():
            os.kill(os.getpid(), signal.SIGINT)
            return
        time.sleep(0.05)


def test_interrupted(assert_reproducible):
    threading.Thread(target=interrupt_once_training_hangs, daemon=True).start()
    assert_reproducible({str(HANG)!r}, runs=2, args=["--pid-file", {str(pid_file)!r}])


def test_never_reached():
    pass
''')
    result = pytester.runpytest_subprocess("-p", "repro_check.pytest_plugin", "-q")
    out = result.stdout.str()
    assert "KeyboardInterrupt" in out
    assert "not reproducible (exit 130)" not in out and "1 passed" not in out
    assert result.ret == 2  # pytest's exit code for an interrupted session


def test_json_dash_is_standard_output_and_the_summary_goes_to_stderr(tmp_path: Path) -> None:
    a, b = _two_traces(tmp_path)
    proc = repro_check_cli(["diff", a, b, "--json", "-"], cwd=tmp_path, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["first_divergent_step"] == 1  # stdout is one JSON document
    assert "NOT REPRODUCIBLE" in proc.stderr
    assert not (tmp_path / "-").exists()


def test_a_golden_never_decides_what_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from repro_check.trace import values
    from repro_check.trace.format import TraceWriter, header_line

    marker = tmp_path / "ran.txt"
    golden = tmp_path / "crafted.json"
    w = TraceWriter(golden)
    w.write(header_line({"target": "zipfile", "args": ["-c", str(marker), __file__], "seed": 1}))
    w.write({"step": 1, "signals": {"loss": values.encode_float64(1.0)}})
    w.write({"end": {"status": "completed"}})
    w.close()
    monkeypatch.chdir(tmp_path)
    assert cli.console_main(["verify", "--golden", str(golden)]) == 2
    err = capsys.readouterr().err
    assert "verify needs TARGET" in err and "recorded from 'zipfile'" in err
    assert not marker.exists(), "the golden's header ran code"
