"""Finding and stopping every process a run started, so none outlives repro-check.

Each run is started in a session of its own, so its DataLoader workers and most helpers share
its process group and its session id (both equal to the run's pid), and stay in that session
after the run's own process has ended. A process that started a session of its own escapes both;
if it still holds the run's pipes (it was forked from the run) it is found through them. Linux
``/proc`` is used where there is one; elsewhere only the process group can be reached.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

PROC = Path("/proc")


def _stat(pid: int) -> list[bytes] | None:
    """Fields of ``/proc/PID/stat`` after the command name: state, ppid, pgrp, session, ..."""
    try:
        data = (PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    # the command name is in parentheses and may itself contain spaces or parentheses
    return data[data.rfind(b")") + 2 :].split()


def is_alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie, already dead but not reaped, is not)."""
    if PROC.is_dir():
        fields = _stat(pid)
        return fields is not None and fields[0] not in (b"Z", b"X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pids() -> Iterator[int]:
    try:
        names = os.listdir(PROC)
    except OSError:
        return
    for name in names:
        if name.isdigit():
            yield int(name)


def session_members(sid: int) -> list[int]:
    """Processes of session ``sid`` (empty without /proc)."""
    me = os.getpid()
    found = []
    for pid in _pids():
        fields = _stat(pid)
        if fields is not None and pid != me and len(fields) > 3 and fields[3] == str(sid).encode():
            found.append(pid)
    return found


def pipe_inode(fd: int) -> int:
    return os.fstat(fd).st_ino


def pipe_holders(inodes: Iterable[int]) -> list[int]:
    """Processes other than this one with an end of one of these pipes open."""
    wanted = {f"pipe:[{i}]" for i in inodes}
    if not wanted:
        return []
    me = os.getpid()
    found = []
    for pid in _pids():
        if pid == me:
            continue
        fd_dir = PROC / str(pid) / "fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd_dir / fd) in wanted:
                    found.append(pid)
                    break
            except OSError:
                continue
    return found


def _send(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_run(leader: int, pipes: Iterable[int] = ()) -> list[int]:
    """SIGKILL everything of the run started as ``leader``: its process group, its session and,
    when ``pipes`` (inodes) are given, whatever still holds them. Returns the pids it found."""
    signal_group(leader, signal.SIGKILL)
    found = session_members(leader) + pipe_holders(pipes)
    for pid in found:
        _send(pid, signal.SIGKILL)
    return found


def wait_gone(pids: Iterable[int], timeout: float = 5.0) -> bool:
    """Wait (bounded) until these processes have died, so that what they held (memory, a GPU,
    files) is free when we return. True when all are gone."""
    left = [p for p in pids if p != os.getpid()]
    deadline = time.monotonic() + timeout
    while left:
        left = [p for p in left if is_alive(p)]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    return not left
