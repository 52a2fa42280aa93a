"""Failure modes end to end: each case checks the exit code, the message and the clean-up.

Fixtures in fixtures/failures/ record the pids of every process they start (the run, its
DataLoader workers, anything forked) in a file; after repro-check exits none of them may be alive.
"""

from __future__ import annotations

import json
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from repro_check.run.procs import is_alive
from repro_check.run.runner import STOP_GRACE
from repro_check.trace.format import load_trace

from ..conftest import FIXTURES, CliResult, cli_env, run_cli, run_plain
from ..recorded import BOTH, cli_result, replayed_or_live

FAIL = FIXTURES / "failures"
LAUNCHER = Path(__file__).resolve().parents[1] / "launcher.py"


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("failures")


def pids(path: Path) -> dict[str, list[int]]:
    """The pids a fixture recorded, by kind (main, worker, orphan, daemon, ...)."""
    found: dict[str, list[int]] = {}
    if not path.exists():
        return found
    for line in path.read_text().splitlines():
        parts = line.split()
        if parts and parts[0] != "ready":
            found.setdefault(parts[0], []).append(int(parts[-1]))
    return found


def assert_none_alive(recorded: dict[str, list[int]]) -> None:
    alive = [(kind, pid) for kind, ps in recorded.items() for pid in ps if is_alive(pid)]
    assert not alive, f"left running: {alive}"


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def launch(args: list[str], tmp: Path, cwd: Path = FAIL,
           **env: str) -> tuple[subprocess.Popen[str], Path]:
    """repro-check in the background (through the launcher), with --json and --trace-dir in tmp."""
    tmp.mkdir(parents=True, exist_ok=True)
    report = tmp / "report.json"
    at = args.index("--") if "--" in args else len(args)
    argv = args[:at] + ["--json", str(report), "--trace-dir", str(tmp / "traces")] + args[at:]
    proc = subprocess.Popen([sys.executable, str(LAUNCHER), *argv], cwd=cwd,
                            env=cli_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    return proc, report


def flat(text: str) -> str:
    """Output with rich's line wrapping undone."""
    return " ".join(text.split())


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert lines and lines[-1].startswith("repro-check: error: "), stderr
    return lines[-1]


# ---- TARGET problems: exit 2, one line, the target's own traceback where it is its fault ------

def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return folder


@pytest.mark.parametrize(
    "files, target, message, own_traceback",
    [
        ({}, "nosuchmodule_xyz:main", "no module named 'nosuchmodule_xyz'", None),
        ({}, "missing.py:main", "no such file: missing.py", None),
        ({"job.py": "def main():\n    pass\n"}, "job.py:mian", "no function 'mian' (did you mean 'main'", None),
        ({"job.py": "def main(:\n    pass\n"}, "job:main", "has a syntax error: ", "job.py\", line 1"),
        ({"job.py": "x = (\n"}, "job.py", "has a syntax error: ", "job.py\", line 1"),
        # the static check cannot see through a star import: the run resolves and reports
        pytest.param({"job.py": "from os.path import *\n\ndef main():\n    pass\n"}, "job:mian",
                     "has no attribute 'mian' (did you mean 'main'", None,
                     marks=pytest.mark.slow),
        ({"job.py": "import not_a_real_package_xyz\n\ndef main():\n    pass\n"}, "job.py:main",
         "importing", "not_a_real_package_xyz"),
        # a whole script whose imports fail never started training: a TARGET problem too
        pytest.param({"job.py": "import not_a_real_package_xyz\n"}, "job.py",
                     "ModuleNotFoundError: No module named 'not_a_real_package_xyz'",
                     "job.py\", line 1", marks=pytest.mark.slow),
    ],
    ids=["module", "file", "function", "syntax-module", "syntax-script", "dynamic-attribute",
         "import-error", "script-import-error"],
)
def test_target_problems_exit_2(tmp_path: Path, files: dict[str, str], target: str, message: str,
                                own_traceback: str | None) -> None:
    for name, text in files.items():
        write(tmp_path, name, text)
    # --jobs 1: when run 1 cannot resolve the target, run 2 is never started
    res = run_plain(target, "--quiet", "--jobs", "1", "--trace-dir", str(tmp_path / "traces"),
                    cwd=tmp_path)
    assert res.code == 2, res.stdout + res.stderr
    line = one_error_line(res.stderr)
    assert message in line, res.stderr
    before = res.stderr.strip().splitlines()[:-1]
    if own_traceback is None:
        assert before == [], res.stderr
    else:
        assert own_traceback in res.stderr
        assert "repro_check" not in "\n".join(before), res.stderr  # none of our frames
    assert res.stdout == ""  # no summary: nothing ran to report on
    assert not list((tmp_path / "traces").glob("*/*")), "no traces of a run that never started"


# ---- the target raising, crashing ----------------------------------------------------------

def test_crash_is_exit_3_naming_the_signal(tmp: Path) -> None:
    """Run 1 reads address 0 (a real segfault), run 2 sends itself SIGSEGV."""
    res = run_cli("crash.py:main", "--", "--how", "segfault", "--how-in-run-2", "sigsegv",
                  "--no-optim", tmp=tmp / "crash", cwd=FAIL)
    assert res.code == 3, res.stdout + res.stderr
    assert res.report["error"] == "run 1 was killed by SIGSEGV; run 2 was killed by SIGSEGV"
    assert res.report["steps"] == [2, 2]  # what was recorded before the crash is kept
    assert res.report["first_divergent_step"] is None  # a crash is not a divergence
    assert [r["signal"] for r in res.report["run_results"]] == ["SIGSEGV", "SIGSEGV"]
    assert "TARGET FAILED" in res.stdout and "about to crash" in res.stdout
    # where it happened, from the run's own output
    assert "Segmentation fault" in res.stdout and "crash.py" in res.stdout


def test_a_crash_while_importing_in_one_run_is_no_verdict_and_names_the_import(tmp: Path) -> None:
    """Run 2 segfaults while ``native_ext`` is imported; run 1 trains and prints an accuracy.
    The report says which run failed, how, after how many steps and in which import (a line
    of the target), that this points at the environment or at repro-check, and nothing about
    reproducibility: no step or metric "agrees" or differs (run 2's missing accuracy is no
    divergence)."""
    res = run_cli("import_crash.py", tmp=tmp / "import_crash", cwd=FAIL)
    report: Any = res.report
    assert res.code == 3 and report is not None, res.stdout + res.stderr
    assert report["error"] == "run 2 was killed by SIGSEGV" and report["steps"] == [3, 0]
    assert report["first_divergent_step"] is None and report["divergent_signal"] is None
    assert report["divergence"] is None and report["metric_divergences"] == []
    assert report["reproducible"] is False and report["cause"] is None
    first, second = report["run_results"]
    assert "failed_at" not in first and first["status"] == "completed"
    assert second["failed_at"]["importing"] == "native_ext"
    assert second["failed_at"]["before_target"] is False
    assert second["failed_at"]["imported_at"]["file"].endswith("import_crash.py")
    assert second["failed_at"]["imported_at"]["line"] == 5
    assert second["failed_at"]["at"]["file"].endswith("native_ext.py")
    text = " ".join(res.stdout.split())
    assert "run 1: completed, 3 steps" in text
    assert "run 2: killed by SIGSEGV after 0 steps, while importing native_ext (imported at" in text
    assert "Run 2 failed before its training began, while run 1 went on" in text
    for claim in ("agree", "reproducible", "First divergence", "≠"):
        assert claim not in text.replace("NOT REPRODUCIBLE", ""), claim


# ---- hangs and leftovers --------------------------------------------------------------------

@pytest.mark.slow
def test_timeout_stops_the_run_its_workers_and_its_group(tmp: Path) -> None:
    """The run ignores SIGTERM, so it is killed after the grace period; run 2 (--jobs 1) is
    never started once run 1 timed out. Nothing here depends on how fast the machine is: a run
    that a loaded machine kept from starting its workers within the limit is timed out all the
    same (and checked as such), and is tried again with a limit three times as long; the time
    until the kill is counted from the run's own "ready" line, with a bound no load can break
    (the run hangs for ever: without the kill it would never end)."""
    limit, attempt = 10, 0
    while True:
        attempt += 1
        pid_file = tmp / f"hang-pids-{attempt}.txt"
        proc, report_path = launch(["hang.py:main", "--timeout", str(limit), "--jobs", "1", "--",
                                    "--pid-file", str(pid_file), "--ignore-term", "--no-optim"],
                                   tmp / f"hang-{attempt}")
        try:
            wait_for(lambda p=proc, f=pid_file: p.poll() is not None
                     or (f.exists() and "ready" in f.read_text()),
                     limit + 600, "the run to get ready or end")
            ready_at = time.monotonic()
            out, err = proc.communicate(timeout=limit + STOP_GRACE + 300)
        finally:
            if proc.poll() is None:
                proc.kill()
        took = time.monotonic() - ready_at
        assert proc.returncode == 3, out + err
        report = json.loads(report_path.read_text())
        assert report["error"] == f"run 1 timed out after {limit} s"
        assert [r["status"] for r in report["run_results"]] == ["timeout", "cancelled"]
        assert f"run 1 timed out after {limit} s" in out
        recorded = pids(pid_file)
        assert_none_alive(recorded)
        if (pid_file.exists() and "ready" in pid_file.read_text()) or attempt == 3:
            break
        limit *= 3  # the machine was too slow for the run to start its workers: longer
    # killed once the limit and the stop's grace period are over (a bound far above both)
    assert took < limit + STOP_GRACE + 120, f"took {took:.1f} s after ready, limit {limit} s"
    assert len(recorded["main"]) == 1 and len(recorded["worker"]) == 2, recorded


def test_leftover_processes_and_held_pipes_do_not_keep_it_waiting(tmp: Path) -> None:
    """Workers kept alive after the target returns (run 2) or raises (run 1), a forked process
    in a session of its own that holds the run's pipes, and a daemon (double fork, setsid, every
    file descriptor closed): the check ends, and none of them survives."""
    pid_file = tmp / "leaky-pids.txt"
    # without the control run, which would start beside the runs and leave processes too
    res = run_cli("leaky.py:main", "--no-control", "--", "--pid-file", str(pid_file), "--orphan",
                  "--daemon", "--raise-in-run", "1", "--no-optim", tmp=tmp / "leaky", cwd=FAIL,
                  timeout=120)
    assert res.code == 3, res.stdout + res.stderr
    assert res.report["error"] == "run 1 raised RuntimeError: failed with workers still running"
    assert [r["status"] for r in res.report["run_results"]] == ["failed", "completed"]
    assert res.report["steps"] == [3, 3] and "leaky.py" in res.stdout
    recorded = pids(pid_file)
    assert len(recorded["worker"]) == 4 and len(recorded["orphan"]) == 2, recorded
    assert len(recorded["daemon"]) == 2, recorded
    assert_none_alive(recorded)


# ---- repro-check itself killed with SIGKILL -------------------------------------------------

def wait_none_alive(recorded: dict[str, list[int]], timeout: float = 30) -> None:
    """Every recorded process is gone within ``timeout`` (polled: killing takes a moment)."""
    deadline = time.monotonic() + timeout
    alive = [(kind, pid) for kind, ps in recorded.items() for pid in ps if is_alive(pid)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [(kind, pid) for kind, pid in alive if is_alive(pid)]
    assert not alive, f"left running {timeout:g} s after repro-check was killed: {alive}"


def kill_9_mid_run(args: list[str], tmp: Path, pid_file: Path, ready: int = 1,
                   cwd: Path = FAIL) -> None:
    """Start repro-check, wait until the run wrote ``ready`` lines, SIGKILL repro-check."""
    proc, _ = launch(args, tmp, cwd)
    try:
        wait_for(lambda: pid_file.exists() and pid_file.read_text().count("ready") >= ready,
                 180, "the run to start what it starts")
    finally:
        proc.kill()  # SIGKILL: repro-check cannot clean anything up itself
        proc.communicate(timeout=60)


@pytest.mark.slow
def test_kill_9_of_repro_check_leaves_no_process_of_the_run(tmp: Path) -> None:
    """A helper subprocess, a daemon (double fork, setsid, closed fds), spawn-context DataLoader
    workers still starting and multiprocessing's resource tracker, the run entry and its
    supervisor: none survives a ``kill -9`` of repro-check."""
    pid_file = tmp / "kill9-pids.txt"
    kill_9_mid_run(["record", "spawner.py:main", "-o", str(tmp / "kill9" / "g.json"), "--",
                    "--pid-file", str(pid_file),
                    "--helper", "--daemon", "--spawn-workers"], tmp / "kill9", pid_file)
    recorded = pids(pid_file)
    kinds = {kind: len(ps) for kind, ps in recorded.items()}
    assert kinds == {"main": 1, "parent": 1, "helper": 1, "daemon": 1, "worker": 2,
                     "tracker": 1}, recorded
    wait_none_alive(recorded)


# ---- Ctrl-C and SIGTERM to repro-check -------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)],
                         ids=["SIGINT", "SIGTERM"])
def test_interrupt_stops_everything_and_reports_what_was_recorded(tmp: Path, sig: int) -> None:
    """Ctrl-C (both runs going) and SIGTERM, as a cancelled CI job gets (--jobs 1: run 2 waiting)."""
    name = signal.Signals(sig).name
    pid_file = tmp / f"{name}-pids.txt"
    runs = 2 if sig == signal.SIGINT else 1
    # without the control run, which would start beside the runs and count as ready too
    proc, report_path = launch(["hang.py:main", "--jobs", str(runs), "--no-control", "--",
                                "--pid-file", str(pid_file), "--no-optim"], tmp / name)
    try:
        wait_for(lambda: pid_file.exists() and pid_file.read_text().count("ready") == runs, 120,
                 "the runs to record their steps")
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    assert "INTERRUPTED" in out and "the 3 step(s) compared so far agree" in flat(out) \
        if runs == 2 else "INTERRUPTED" in out
    report = json.loads(report_path.read_text())
    assert report["interrupted"] is True and report["exit_code"] == 130 and report["error"] is None
    assert report["steps"] == [3, 3] if runs == 2 else report["steps"] == [3, 0]
    assert [r["status"] for r in report["run_results"]] == ["cancelled", "cancelled"]
    for r in report["run_results"][:runs]:
        trace = load_trace(r["trace"])
        assert len(trace.steps) == 3 and trace.end["status"] == "cancelled"
    recorded = pids(pid_file)
    assert len(recorded["main"]) == runs and len(recorded["worker"]) == 2 * runs, recorded
    assert_none_alive(recorded)


# ---- output ------------------------------------------------------------------------------

@pytest.mark.slow
def test_100_mb_of_output_bounded_memory_and_the_tail_shown(tmp: Path) -> None:
    rss_file = tmp / "maxrss.txt"
    folder = tmp / "loud"
    folder.mkdir()
    old = folder / "report.json"  # from an earlier check: replaced whole, keeping its mode
    old.write_text("an earlier report\n")
    old.chmod(0o640)
    proc, report_path = launch(["loud.py:main"], folder, REPRO_CHECK_TEST_MAXRSS=str(rss_file))
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 3, err
    peak = int(rss_file.read_text()) * 1024  # VmHWM, in KiB
    assert peak < 64 * 2**20, f"repro-check itself peaked at {peak / 2**20:.0f} MiB"
    assert "the last line of a very loud run" in out
    assert len(out) < 64 * 1024  # the tail, not the whole output
    assert report_path == old
    report = json.loads(report_path.read_text())
    assert report["error"] == "run 1: exited with status 3; run 2: exited with status 3"
    assert stat.S_IMODE(report_path.stat().st_mode) == 0o640
    assert sorted(p.name for p in folder.iterdir()) == ["report.json", "traces"]  # no temp file
    end = load_trace(report["run_results"][0]["trace"]).end
    assert end["output_tail"].endswith("the last line of a very loud run\n")


# ---- leaving early is a shorter run, not a crash ------------------------------------------

@pytest.fixture(scope="module", params=BOTH)
def early_exit(request: pytest.FixtureRequest, tmp: Path) -> CliResult:
    """sys.exit(0) at step 4 in run 2, os._exit(0) at step 4 in run 3 (three runs, two at a
    time), as the command line shows it."""
    return cli_result(replayed_or_live(request.param, "early_exit", tmp))


def test_early_exit_is_a_divergence_at_the_first_missing_step(early_exit: CliResult) -> None:
    """Both keep their steps: a shorter run diverges where its steps end, no crash."""
    res = early_exit
    assert res.code == 1, res.stdout + res.stderr
    r = res.report
    assert r is not None
    assert r["error"] is None and r["steps"] == [8, 4, 4]
    assert r["first_divergent_step"] == 5 and r["divergent_signal"] == "steps"
    assert [d["step"] for d in r["divergences"]] == [5, 5]
    assert [x["status"] for x in r["run_results"]] == ["completed", "exited", "exited"]
    assert "run 2 recorded 4 steps and stopped; run 1 went on" in flat(res.stdout)
    assert [len(load_trace(x["trace"]).steps) for x in r["run_results"]] == [8, 4, 4]


# ---- the target undoing the seeding itself --------------------------------------------------

def test_overridden_seeding_components_are_warnings_naming_them(tmp: Path) -> None:
    res = run_cli("overrides.py:main", "--", "--benchmark", "--reseed", "--clock-seed",
                  "--threads", "2", "--no-optim", tmp=tmp / "overrides", cwd=FAIL)
    assert res.code == 1, res.stdout + res.stderr  # reseeded from entropy: every run differs
    assert res.report["first_divergent_step"] == 1
    warnings = res.report["warnings"]
    for component in ("cudnn", "torch", "threads"):
        assert any(f"overrides seeding component {component!r}" in w for w in warnings), warnings
    for call in ("torch.seed", "torch.manual_seed"):  # the value differs between the runs
        assert any(w.startswith(f"torch was reseeded differently in each run ({call} at "
                                f"{FAIL / 'overrides.py'}:") for w in warnings), warnings
    assert "cudnn.benchmark = True" in flat(res.stdout)
    assert "thread count to 2" in flat(res.stdout)
    # the same override in every run is one line, not one a run
    assert sum("cudnn.benchmark" in w for w in warnings) == 1
    assert res.report["run_results"][0]["warnings"]  # and kept per run


# ---- output paths ----------------------------------------------------------------------------

def _unwritable(tmp: Path) -> Path:
    """A folder this process cannot create files in (root ignores permission bits: /proc)."""
    folder = tmp / "read-only"
    folder.mkdir(exist_ok=True)
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        (folder / "probe").touch()
    except OSError:
        return folder
    (folder / "probe").unlink()
    return Path("/proc")


@pytest.mark.parametrize(
    "option, where, message",
    [
        ("--json", "missing/report.json", "does not exist"),
        ("--json", "UNWRITABLE/report.json", "is not writable"),
        ("--trace-dir", "missing/traces", "does not exist"),
        ("--trace-dir", "UNWRITABLE/traces", "cannot create --trace-dir"),
        ("--trace-dir", "UNWRITABLE", "is not writable"),
        ("--trace-dir", "a-file", "is not a folder"),
    ],
)
def test_unusable_output_path_is_exit_2_before_any_run(tmp_path: Path, option: str, where: str,
                                                       message: str) -> None:
    (tmp_path / "a-file").write_text("x")
    path = where.replace("UNWRITABLE", str(_unwritable(tmp_path))) if "UNWRITABLE" in where \
        else str(tmp_path / where)
    pid_file = tmp_path / "pids.txt"
    res = run_plain("leaky.py:main", option, path, "--", "--pid-file", str(pid_file), cwd=FAIL)
    assert res.code == 2, res.stderr
    assert message in one_error_line(res.stderr) and len(res.stderr.strip().splitlines()) == 1
    assert not pid_file.exists(), "a run was started"


@pytest.mark.slow
def test_two_checks_in_one_folder_keep_to_their_own_files_even_with_closed_streams(
        tmp_path: Path) -> None:
    """Two checks at once in one folder, each in a trace folder of its own. The second is started
    with fds 0, 1 and 2 closed (as some schedulers start jobs): a reproducible script is reported
    reproducible, not a divergence of a trace pipe that landed on fd 1. (manual_sgd.py: no
    torch.optim, whose first optimizer costs each run a torch._dynamo import.)"""
    target = f"{FIXTURES / 'manual_sgd.py'}:main"
    argv = [[sys.executable, "-m", "repro_check", target, "--json",
             str(tmp_path / f"report-{k}.json")] for k in (1, 2)]
    procs = [subprocess.Popen(argv[0], cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True),
             subprocess.Popen(["sh", "-c", 'exec "$@" <&- >&- 2>&-', "sh", *argv[1]],
                              cwd=tmp_path, env=cli_env())]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    reports = [json.loads((tmp_path / f"report-{k}.json").read_text()) for k in (1, 2)]
    assert [r["exit_code"] for r in reports] == [0, 0]
    assert [r["steps"] for r in reports] == [[12, 12], [12, 12]]
    folders = [Path(r["trace_dir"]).resolve() for r in reports]
    assert folders[0] != folders[1]
    runs = (tmp_path / ".repro-check" / "runs").resolve()
    for report, folder in zip(reports, folders):
        assert folder.parent == runs
        # each check's negative control too, in its own folder
        assert sorted(p.name for p in folder.iterdir()) == ["control.jsonl", "run-1.jsonl",
                                                            "run-2.jsonl"]
        assert Path(report["control"]["trace"]).resolve().parent == folder
        for r in report["run_results"]:
            assert Path(r["trace"]).resolve().parent == folder
            assert len(load_trace(r["trace"]).steps) == 12
    assert (tmp_path / ".repro-check" / ".gitignore").read_text().endswith("*\n")


def test_usage_error_leaves_an_earlier_report_alone(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text("an earlier report\n")
    res = run_plain("nosuchmodule_xyz:main", "--json", str(report), cwd=FAIL)
    assert res.code == 2 and report.read_text() == "an earlier report\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


# ---- a hostile target: its descriptors, its parent, its arguments ---------------------------

class _Collect:
    """A runner listener that keeps every event and the results."""

    def __init__(self) -> None:
        self.events: dict[int, list[Any]] = {}

    def run_started(self, index: int) -> None:
        pass

    def event(self, index: int, event: Any) -> None:
        self.events.setdefault(index, []).append(event)

    def run_finished(self, result: object) -> None:
        pass


@pytest.mark.slow
def test_a_target_that_takes_fds_signals_its_parent_or_has_huge_args(tmp_path: Path) -> None:
    """Run 1 signals its parent (the run's supervisor) with SIGUSR1 and SIGSTOP, leaves a process
    in a session of its own and gets 30,000 arguments and one of 100 KB (more than one
    environment variable holds): it completes, with every argument, and nothing is left. Runs 2
    and 3 close every inherited descriptor or dup2 their log over all of them, then train: the
    trace channel is never written into their log, and each is a failed run, not a short one."""
    from repro_check import targets
    from repro_check.trace.exits import CHANNEL_MESSAGE
    from repro_check.run import runner
    from repro_check.trace.protocol import RunConfig

    pid_file = tmp_path / "pids.txt"
    many = [str(i) for i in range(30_000)] + ["x" * 100_000]
    specs = [runner.RunSpec(RunConfig(run=1, target=targets.parse(f"{FAIL / 'signals_parent.py'}:main"),
                                      args=("--pid-file", str(pid_file), "--signals",
                                            "SIGUSR1,SIGSTOP", *many)),
                            timeout=240, trace_path=tmp_path / "run-1.jsonl")]
    for index, mode in ((2, "close"), (3, "dup2")):
        specs.append(runner.RunSpec(RunConfig(run=index, target=targets.parse(str(FAIL / "fd_thief.py")),
                                              args=("--log", str(tmp_path / f"{mode}.log"),
                                                    "--mode", mode)),
                                    timeout=240, trace_path=tmp_path / f"run-{index}.jsonl"))
    listener = _Collect()
    hostile, closer, duper = runner.run_all(specs, listener, jobs=2)

    assert hostile.status == "completed" and hostile.steps == 3, hostile
    assert load_trace(hostile.trace_path).header["args"][4:] == many
    metrics = [e.raw["metrics"] for e in listener.events[1] if "metrics" in e.raw]
    assert metrics and "args" in metrics[0]
    assert_none_alive(pids(pid_file))

    for res, mode in ((closer, "close"), (duper, "dup2")):
        assert res.status == "failed" and res.error is not None, (mode, res)
        assert res.error["kind"] == "channel" and res.error["message"] == CHANNEL_MESSAGE
        assert "trace channel" in res.output_tail
        log = (tmp_path / f"{mode}.log").read_text()
        assert "{" not in log, f"trace lines in the target's own file: {log[:200]!r}"
