"""Finding and killing what a run left behind: its group, its session, holders of its pipes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from repro_check.run import procs

# a session leader that starts a grandchild in a process group of its own, then waits
TREE = "import os, subprocess, sys, time; " \
       "c = subprocess.Popen(['sleep', '60'], preexec_fn=os.setpgrp); " \
       "print(c.pid, flush=True); time.sleep(60)"


NO_SUCH_PID = 2**22 + 1  # above the largest pid Linux hands out


def test_session_members_and_kill_run_spare_the_supervisor() -> None:
    leader = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        assert leader.stdout is not None
        grandchild = int(leader.stdout.readline())
        members = procs.session_members(leader.pid)
        assert {leader.pid, grandchild} <= set(members)
        assert procs.descendants(leader.pid) == [grandchild]
        found = procs.kill_run(leader.pid)
        assert found == [grandchild]  # not in the leader's group: found through the session
        assert procs.wait_gone([grandchild], timeout=10)
        assert procs.is_alive(leader.pid)  # the supervisor sweeps, then leaves on its own
    finally:
        leader.kill()
        leader.wait()


def test_pipe_holders_finds_a_process_outside_the_session() -> None:
    read_fd, write_fd = os.pipe()
    holder = subprocess.Popen(["sleep", "60"], stdout=write_fd, start_new_session=True)
    os.close(write_fd)
    try:
        assert procs.pipe_holders([procs.pipe_inode(read_fd)]) == [holder.pid]
        # a leader that does not exist: only the pipe leads to the holder
        assert procs.kill_run(NO_SUCH_PID, [procs.pipe_inode(read_fd)]) == [holder.pid]
        holder.wait(timeout=30)
        assert os.read(read_fd, 10) == b""  # nobody holds the other end any more
    finally:
        holder.kill()
        holder.wait()
        os.close(read_fd)


def test_is_alive_is_false_for_a_zombie() -> None:
    child = subprocess.Popen(["true"])
    assert procs.wait_gone([child.pid], timeout=10)  # exited, not reaped yet: not alive
    child.wait()
    assert procs.is_alive(os.getpid())


# ---- the supervisor every run's command runs under -------------------------------------------

# forks twice; the grandchild starts its own session, prints its pid, closes every file it has
DAEMON = "import os, sys, time\n" \
         "if os.fork() == 0:\n" \
         "    os.setsid()\n" \
         "    if os.fork() == 0:\n" \
         "        print(os.getpid(), flush=True); os.closerange(0, 65536); time.sleep(300)\n" \
         "    os._exit(0)\n" \
         "time.sleep(float(sys.argv[1]))\n"


def supervised(*command: str) -> procs.Supervised:
    return procs.Supervised(list(command), env=dict(os.environ))


def first_line(run: procs.Supervised) -> int:
    assert run.proc.stdout is not None
    return int(run.proc.stdout.readline())


def test_the_supervisor_exits_as_its_command_did() -> None:
    for command, code in ((["true"], 0), (["sh", "-c", "exit 7"], 7),
                          (["sh", "-c", "kill -SEGV $$"], -signal.SIGSEGV),
                          (["sh", "-c", "kill -KILL $$"], -signal.SIGKILL)):
        run = supervised(*command)
        assert run.proc.wait(timeout=30) == code, command
        run.release()


def test_the_supervisor_passes_sigterm_on() -> None:
    run = supervised("sh", "-c", "trap 'exit 5' TERM; echo up; while :; do sleep 0.05; done")
    assert run.proc.stdout is not None and run.proc.stdout.readline() == b"up\n"
    run.proc.send_signal(signal.SIGTERM)
    assert run.proc.wait(timeout=30) == 5
    run.release()


def test_what_a_command_left_is_killed_when_it_ends_even_a_daemon() -> None:
    run = supervised(sys.executable, "-c", DAEMON, "0.5")
    daemon = first_line(run)
    assert run.proc.wait(timeout=30) == 0
    assert not procs.is_alive(daemon)  # gone before the supervisor left
    run.release()


def test_closing_the_lifeline_kills_the_whole_tree() -> None:
    run = supervised(sys.executable, "-c", DAEMON, "300")
    daemon = first_line(run)
    assert procs.descendants(run.pid) and procs.is_alive(daemon)
    run.release()  # as when repro-check dies, however it dies
    assert run.proc.wait(timeout=30) == -signal.SIGKILL
    assert not procs.is_alive(daemon)


def test_a_system_without_the_linux_guards_is_told_so_in_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(procs, "PROC", "/no-such-proc")
    monkeypatch.setattr(procs, "_guards_told", False)
    run = procs.Supervised(["true"], env=dict(os.environ))  # the first run says it
    # the run ends by itself before it is ended: end() kills at once, so a supervisor still
    # starting on a loaded machine was killed (-9)
    assert run.proc.wait(timeout=120) == 0  # the run itself works without them
    run.end(timeout=10)
    err = capsys.readouterr().err
    procs.tell_missing_guards()  # and only once a process
    procs.Supervised(["true"], env=dict(os.environ)).end(timeout=10)
    assert capsys.readouterr().err == ""
    assert err.count("\n") == 1, err
    assert err.startswith("repro-check: warning: on darwin, ")
    for lost in ("child subreaper", "parent-death signal", "/no-such-proc",
                 "can outlive the run", "process group only"):
        assert lost in err, err


def test_linux_with_proc_has_every_guard_and_says_nothing(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(procs, "_guards_told", False)
    assert procs.missing_guards() == []
    procs.tell_missing_guards()
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(procs, "PROC", "/no-such-proc")  # a container without /proc mounted
    monkeypatch.setattr(procs, "_guards_told", False)
    procs.tell_missing_guards()
    err = capsys.readouterr().err
    assert err.startswith("repro-check: warning: on linux, /no-such-proc is not available: ")
    assert err.count("\n") == 1 and "subreaper" not in err and "process group only" in err


def test_windows_is_refused_in_one_line_before_anything_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from repro_check.errors import UsageError

    monkeypatch.setattr(os, "name", "nt")
    pipes_before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(UsageError, match="Linux and macOS only.*WSL 2") as err:
        procs.Supervised([sys.executable, "-c", "pass"], env=dict(os.environ))
    assert "\n" not in str(err.value)
    assert len(os.listdir("/proc/self/fd")) == pipes_before  # no lifeline pipe left open
