"""Finding and killing what a run left behind: its group, its session, holders of its pipes."""

from __future__ import annotations

import os
import subprocess
import sys

from repro_check.run import procs

# a session leader that starts a grandchild in a process group of its own, then waits
TREE = "import os, subprocess, sys, time; " \
       "c = subprocess.Popen(['sleep', '60'], preexec_fn=os.setpgrp); " \
       "print(c.pid, flush=True); time.sleep(60)"


NO_SUCH_PID = 2**22 + 1  # above the largest pid Linux hands out


def test_session_members_and_kill_run() -> None:
    leader = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        assert leader.stdout is not None
        grandchild = int(leader.stdout.readline())
        members = procs.session_members(leader.pid)
        assert {leader.pid, grandchild} <= set(members)
        found = procs.kill_run(leader.pid)
        assert grandchild in found  # not in the leader's group: found through the session
        leader.wait(timeout=30)
        assert procs.wait_gone([grandchild], timeout=10)
        assert not procs.is_alive(grandchild) and not procs.is_alive(leader.pid)
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
