"""A signal in the first moments of a command (Ctrl-C, SIGTERM as a cancelled CI job sends,
SIGHUP), or as it ends: exit 130 and one line, never the process ended by the signal itself
(-15) nor a traceback, whichever command it is and whenever the signal comes once the
interpreter runs repro-check's first line.

The moments are events the test observes, not delays: the handler showing in
``/proc/PID/status``, the K-th module imported after it is in place, the interpreter's exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import FIXTURES, cli_env

#: the console script as pip writes it, with a hook that (MODE "import") sends SIG to the
#: process when the K-th module starts to be imported once SIG's handler is no longer the one
#: the process started with, or (MODE "exit") as the interpreter exits, after every other
#: atexit handler; either way, the module imported while SIG still had its first handler are
#: written to the file WINDOW, and the name of the import the signal came at to SENT
_CONSOLE_SCRIPT = """
import atexit, os, signal, sys
SIG, MODE, K, WINDOW, SENT = sys.argv[1:6]
del sys.argv[1:6]
SIG, K = int(SIG), int(K)
first = signal.getsignal(SIG)
window, seen = [], [0]

def send(name):
    with open(SENT, "w") as f:
        f.write(name)
    os.kill(os.getpid(), SIG)

class Hook:
    def find_spec(self, name, path=None, target=None):
        if name in sys.modules:
            return None
        if signal.getsignal(SIG) is first:
            window.append(name)
        elif MODE == "import":
            seen[0] += 1
            if seen[0] == K:
                send(name)
        return None

def at_exit():
    with open(WINDOW, "w") as f:
        f.write("\\n".join(window))
    if MODE == "exit":
        send("exit")

atexit.register(at_exit)
sys.meta_path.insert(0, Hook())
from repro_check.cli import console_main
sys.exit(console_main())
"""


def console(sig: int, mode: str, k: int, argv: list[str],
            tmp: Path) -> tuple[subprocess.CompletedProcess[str], list[str], str | None]:
    """The console script run with the hook above: its result, the modules imported before the
    signal's handler was in place, and where the signal was sent (None: it never was)."""
    tmp.mkdir(parents=True, exist_ok=True)
    window, sent = tmp / "window.txt", tmp / "sent.txt"
    proc = subprocess.run([sys.executable, "-c", _CONSOLE_SCRIPT, str(int(sig)), mode, str(k),
                           str(window), str(sent), *argv], cwd=FIXTURES, env=cli_env(),
                          capture_output=True, text=True, timeout=120)
    names = window.read_text().split("\n") if window.exists() else []
    return proc, names, sent.read_text() if sent.exists() else None


def assert_interrupted(proc: subprocess.CompletedProcess[str], where: str | None) -> None:
    """Exit 130; before any run, the one line on stderr; after, the report says so."""
    assert where is not None, "the signal was never sent: " + proc.stderr[-2000:]
    detail = (f"signal at {where}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n"
              f"{proc.stderr[-2000:]}")
    assert proc.returncode == 130, detail
    assert "Traceback" not in proc.stderr + proc.stdout, detail
    if "run 1/" in proc.stderr:  # runs had started: they are stopped and the report says so
        assert "INTERRUPTED" in proc.stdout, detail
    else:
        assert proc.stderr.endswith("repro-check: interrupted\n"), detail
        assert proc.stderr.count("repro-check: interrupted") == 1, detail


def test_nothing_but_the_entry_point_loads_before_the_signal_handlers(tmp_path: Path) -> None:
    """The window in which SIGTERM still ends the process by itself: the interpreter's start and
    the three modules the console script names (no errors, enum, typing, ...)."""
    proc, window, _ = console(signal.SIGTERM, "none", 0, ["--version"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert set(window) <= {"repro_check", "repro_check.cli", "repro_check.cli.main", "__future__"}, \
        window


def test_a_signal_as_the_interpreter_exits_is_exit_130_and_one_line(tmp_path: Path) -> None:
    """After the command is done (its output flushed), while the interpreter exits."""
    proc, _, where = console(signal.SIGTERM, "exit", 0, ["--version"], tmp_path)
    assert_interrupted(proc, where)
    assert proc.stdout.strip(), "what the command printed is out before it leaves"


def _caught(pid: int, sig: int) -> bool:
    """Whether ``pid`` has a handler for ``sig`` (its SigCgt mask in /proc)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except OSError:
        pass
    return False


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
@pytest.mark.parametrize("argv", [["tiny:main"], ["diagnose", "tiny:main"], ["doctor", "tiny.py"]],
                         ids=["check", "diagnose", "doctor"])
def test_sigterm_as_soon_as_the_handler_shows_is_exit_130_and_one_line(argv: list[str]) -> None:
    """The first moment a process watching from outside can tell the handler is in."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys\nfrom repro_check.cli import "
                             "console_main\nsys.exit(console_main())", *argv], cwd=FIXTURES,
                            env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 60
        while not _caught(proc.pid, signal.SIGTERM) and proc.poll() is None:
            assert time.monotonic() < deadline, "the handler never showed"
            os.sched_yield()  # the starting process gets the core, and is watched as it goes
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_interrupted(subprocess.CompletedProcess(argv, proc.returncode, out, err), "start")


@pytest.mark.parametrize(("argv", "k"), [(["tiny:main"], 1), (["tiny:main"], 8),
                                         (["doctor", "tiny.py"], 3), (["doctor", "tiny.py"], 40)])
def test_sigterm_while_a_command_loads_is_exit_130_and_one_line(argv: list[str], k: int,
                                                                tmp_path: Path) -> None:
    proc, _, where = console(signal.SIGTERM, "import", k, argv, tmp_path)
    assert_interrupted(proc, where)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP],
                         ids=["SIGTERM", "SIGINT", "SIGHUP"])
@pytest.mark.parametrize("argv", [["tiny:main"], ["record", "tiny:main", "-o", "{tmp}/g.json"],
                                  ["diagnose", "tiny:main"], ["doctor", "tiny.py"],
                                  ["verify", "tiny:main", "--golden", "{tmp}/none.json"],
                                  ["bisect", "HEAD~1", "HEAD", "tiny:main"],
                                  ["resume", "tiny:main", "--at", "2"]],
                         ids=["check", "record", "diagnose", "doctor", "verify", "bisect", "resume"])
def test_a_signal_at_any_of_a_commands_first_imports_is_exit_130_and_one_line(
        sig: int, argv: list[str], tmp_path: Path) -> None:
    """Every command, at import events spread over its start (1st, 2nd, 4th, ... 128th)."""
    for k in (1, 2, 4, 8, 16, 32, 64, 128):
        folder = tmp_path / str(k)
        args = [a.format(tmp=folder) for a in argv]
        proc, _, where = console(sig, "import", k, args, folder)
        if where is None and k > 1:  # the command imports fewer modules than that
            assert proc.returncode != 130, proc.stderr
            break
        assert_interrupted(proc, where)


def test_the_console_script_keeps_the_handlers_and_a_call_in_process_puts_them_back() -> None:
    from repro_check import cli

    before = signal.getsignal(signal.SIGTERM)
    assert cli.console_main(["--version"]) == 0
    assert signal.getsignal(signal.SIGTERM) is before
