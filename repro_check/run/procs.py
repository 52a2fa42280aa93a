"""Finding and stopping every process a run started, so none outlives repro-check.

Every run's command (the run entry, or torchrun) runs under a small supervisor: this file run as
a script (``python -I -S procs.py FD -- COMMAND``), which needs nothing but the standard library,
so it starts in a few milliseconds. The supervisor leads a session of its own and, on Linux, is a
child subreaper: whatever the run starts stays its descendant, even a process that forks twice,
starts a session of its own and closes every file it had. It gives the command a process group of
its own (so a target that signals its group cannot hit the supervisor), passes SIGTERM on, reaps,
and once the command has ended kills every descendant left before it exits with the command's own
status (a death by a signal is passed on as the same signal). It also holds the read end of a pipe,
the lifeline, whose write end only repro-check holds: when repro-check closes it, or dies however
it dies (``kill -9`` included, which no handler in repro-check itself could survive), the
supervisor kills the run's whole tree at once. A multiprocessing resource tracker (spawn-context
DataLoader workers start one) goes last, so that it can unlink the semaphores the run leaked.

From repro-check's side, :func:`kill_run` reaches a run's processes through ``/proc``: the
supervisor's descendants, the members of its session and whatever holds the run's pipes (a
process that was handed them from outside the tree). Without ``/proc`` only the lifeline is left,
and the supervisor then reaches only the command's process group.

The subreaper, the parent-death signal (:mod:`repro_check.child.main`, the ``--metric`` scanner)
and ``/proc`` are Linux's. Elsewhere the runs go on without them, and :func:`tell_missing_guards`
says once, in one line, which are missing and what is lost: never a silent skip.
"""

from __future__ import annotations

import atexit
import os
import select
import signal
import sys
import time

TYPE_CHECKING = False  # typing itself is not imported: the supervisor starts without it
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from types import FrameType

PROC = "/proc"
#: the variable that tells the supervised command which process is its parent
PARENT_VAR = "REPRO_CHECK_PARENT"
#: seconds the supervisor keeps killing what is left of a run before it gives up
SWEEP_SECONDS = 5.0
#: seconds a multiprocessing resource tracker of the run may take to clean up after the others
TRACKER_GRACE = 1.0
#: seconds between the supervisor's looks at whether repro-check is still its parent
_PARENT_POLL = 1.0
#: PR_SET_CHILD_SUBREAPER, from <linux/prctl.h>
_PR_SET_CHILD_SUBREAPER = 36


# ---- reading /proc ---------------------------------------------------------------------------

def _stat(pid: int) -> list[bytes] | None:
    """Fields of ``/proc/PID/stat`` after the command name: state, ppid, pgrp, session, ..."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    # the command name is in parentheses and may itself contain spaces or parentheses
    return data[data.rfind(b")") + 2 :].split()


def is_alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie, already dead but not reaped, is not)."""
    if os.path.isdir(PROC):
        fields = _stat(pid)
        return fields is not None and fields[0] not in (b"Z", b"X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir(PROC) if name.isdigit()]
    except OSError:
        return []


def _table() -> dict[int, tuple[int, int]]:
    """(parent, session) of every living process but this one."""
    me = os.getpid()
    found = {}
    for pid in _pids():
        fields = _stat(pid)
        if pid != me and fields is not None and len(fields) > 3 and fields[0] not in (b"Z", b"X"):
            found[pid] = (int(fields[1]), int(fields[3]))
    return found


def session_members(sid: int, table: dict[int, tuple[int, int]] | None = None) -> list[int]:
    """Living processes of session ``sid`` (empty without /proc)."""
    table = _table() if table is None else table
    return [pid for pid, (_, session) in table.items() if session == sid]


def descendants(root: int, table: dict[int, tuple[int, int]] | None = None) -> list[int]:
    """Living descendants of ``root`` (empty without /proc). Under a subreaper they are all the
    processes it led to, whatever became of the processes in between."""
    table = _table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
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
        fd_dir = f"{PROC}/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{fd_dir}/{fd}") in wanted:
                    found.append(pid)
                    break
            except OSError:
                continue
    return found


# ---- stopping --------------------------------------------------------------------------------

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


def kill_group(pgid: int) -> None:
    """SIGKILL a whole process group (e.g. one rank of a torchrun job)."""
    signal_group(pgid, signal.SIGKILL)


#: process groups of runs still going (the ranks of torchrun jobs): killed should repro-check
#: exit while they are
LIVE_GROUPS: set[int] = set()


def kill_run(supervisor: int, pipes: Iterable[int] = (), tree: bool = True) -> list[int]:
    """SIGKILL everything of the run under ``supervisor`` except the supervisor itself (it reaps,
    kills what it finds left, and exits with the run's status): its descendants when ``tree``
    (only while the supervisor has not been reaped, so that its pid cannot belong to another
    process), the members of its session and, when ``pipes`` (inodes) are given, whatever still
    holds them. While the supervisor is there, a resource tracker is left to it (see
    :func:`_sweep`). Returns the pids it found."""
    table = _table()
    found = set(session_members(supervisor, table)) | set(pipe_holders(pipes))
    if tree:
        found.update(descendants(supervisor, table))
        found = {pid for pid in found if not _is_tracker(pid)}
    found.discard(supervisor)
    for pid in found:
        _send(pid, signal.SIGKILL)
    return sorted(found)


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


# ---- the output of a run ---------------------------------------------------------------------

class Tail:
    """The last ``limit`` bytes of a stream, in bounded memory."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: list[bytes] = []
        self.size = 0
        self.total = 0

    def add(self, data: bytes) -> None:
        self.chunks.append(data)
        self.size += len(data)
        self.total += len(data)
        while self.size - len(self.chunks[0]) >= self.limit:
            self.size -= len(self.chunks.pop(0))
        if len(self.chunks) > 256:
            joined = b"".join(self.chunks)[-self.limit :]
            self.chunks, self.size = [joined], len(joined)

    def text(self) -> str:
        data = b"".join(self.chunks)[-self.limit :]
        text = data.decode("utf-8", errors="replace")
        if self.total > len(data):
            text = f"[... {self.total - len(data)} earlier bytes not kept ...]\n" + text
        return text


# ---- in repro-check: a command under its supervisor ------------------------------------------

def ensure_standard_fds() -> None:
    """Open ``/dev/null`` on whichever of descriptors 0, 1 and 2 is closed (a scheduler may start
    us with ``<&- >&- 2>&-``): otherwise the next pipe or file we open takes that number, and a
    run's trace pipe lands on its stdout. Python leaves ``sys.stdout`` (...) as None then; they
    are set to the new descriptors."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            try:
                null = os.open(os.devnull, os.O_RDWR)
            except OSError:  # no /dev/null (a bare chroot): nothing better to put there
                return
            if null != fd:  # a lower one is closed too: impossible in this order, but be safe
                os.dup2(null, fd)
                os.close(null)
    for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, closefd=False, errors="backslashreplace"))


#: whether the line naming the guards this system lacks was written (once a process)
_guards_told = False


def missing_guards() -> list[tuple[str, str]]:
    """The Linux process guards this system lacks, each as (what, what is lost without it)."""
    missing: list[tuple[str, str]] = []
    if not sys.platform.startswith("linux"):
        missing.append(("a child subreaper", "a process a run starts in a process group of its "
                        "own (a daemon) can outlive the run"))
        missing.append(("a parent-death signal", "a run whose supervisor is killed, or a "
                        "--metric regex process whose repro-check is killed, lives on"))
    if not os.path.isdir(PROC):
        missing.append((PROC, "a run is stopped through its process group only (not its other "
                        "descendants, its session or the holders of its pipes)"))
    return missing


def tell_missing_guards() -> None:
    """One warning line on stderr, once a process, naming the guards :func:`missing_guards`
    finds: on macOS (or without ``/proc``) runs work, but their clean-up is weaker."""
    global _guards_told
    if _guards_told:
        return
    _guards_told = True
    missing = missing_guards()
    if missing and sys.stderr is not None:
        names = ", ".join(name for name, _ in missing)
        lost = "; ".join(why for _, why in missing)
        verb = "is" if len(missing) == 1 else "are"
        sys.stderr.write(f"repro-check: warning: on {sys.platform}, {names} {verb} not "
                         f"available: {lost}\n")


class Supervised:
    """A run's command started under its supervisor, as repro-check sees it: ``proc`` is the
    supervisor (its pid leads the run's session; its exit status is the command's), and the
    lifeline is held here until the run is over."""

    #: runs still going: killed should repro-check exit while they are (the lifeline would do it
    #: too, unless a process forked from repro-check without exec still holds its write end)
    live: set[Supervised] = set()

    def __init__(self, command: Sequence[str], env: dict[str, str], cwd: str | None = None,
                 pass_fds: Sequence[int] = ()) -> None:
        # only when a run starts: the console script imports this module at start-up
        import subprocess

        if os.name == "nt":
            # here, not at the top: this file also runs alone (``-I -S``) as the supervisor
            from repro_check.errors import UsageError

            raise UsageError("repro-check starts runs on Linux and macOS only (a run's trace "
                             "channel is a pipe handed over by file descriptor); on Windows, "
                             "use WSL 2")
        tell_missing_guards()
        read_end, self._lifeline = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__), str(read_end), "--",
                 *command],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                pass_fds=(read_end, *pass_fds), env=env, cwd=cwd, start_new_session=True,
            )
        except BaseException:
            os.close(self._lifeline)
            raise
        finally:
            os.close(read_end)
        self.live.add(self)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self, pipes: Iterable[int] = ()) -> list[int]:
        """SIGKILL the whole run now, from both sides: the lifeline is closed (the supervisor
        kills its tree) and what ``/proc`` shows of it is killed from here."""
        self.release()
        return kill_run(self.proc.pid, pipes, tree=self.proc.returncode is None)

    def end(self, timeout: float) -> None:
        """Kill the run and wait (bounded) for the supervisor to leave; SIGKILL it if it will not
        (its command dies with it: a parent-death signal)."""
        # only when a run starts: the console script imports this module at start-up
        import subprocess

        self.kill()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass

    def release(self) -> None:
        """The run is over (or being killed): close the lifeline."""
        if self._lifeline >= 0:
            os.close(self._lifeline)
            self._lifeline = -1
        self.live.discard(self)


@atexit.register
def _kill_live_runs() -> None:
    for run in list(Supervised.live):
        run.kill()
    for pgid in list(LIVE_GROUPS):
        kill_group(pgid)


# ---- the supervisor (this file run as a script) ----------------------------------------------

def _become_subreaper() -> None:
    """Orphans among our descendants are reparented to us, not to init (Linux)."""
    if sys.platform.startswith("linux"):
        try:
            # Linux only (prctl)
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        except (OSError, AttributeError):
            pass


def _reap(command: int) -> int | None:
    """Reap every child that has ended (orphans come to us too); the command's wait status, if it
    was among them."""
    status = None
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == command:
            status = st


def _is_tracker(pid: int) -> bool:
    """Whether ``pid`` is a multiprocessing resource tracker (spawn-context DataLoaders start
    one): it unlinks the semaphores and shared memory its clients leaked once they are all gone,
    which only works if it is the last to go."""
    try:
        with open(f"{PROC}/{pid}/cmdline", "rb") as fh:
            return b"multiprocessing.resource_tracker" in fh.read()
    except OSError:
        return False


def _kill_tree(command: int, spare_trackers: bool = True) -> bool:
    """SIGKILL every living descendant but, when ``spare_trackers``, resource trackers (without
    /proc: the command's group); True while any descendant is left."""
    if not os.path.isdir(PROC):
        signal_group(command, signal.SIGKILL)
        return False
    left = descendants(os.getpid())
    for pid in left:
        if not (spare_trackers and _is_tracker(pid)):
            _send(pid, signal.SIGKILL)
    return bool(left)


def _sweep(command: int) -> None:
    """Kill what the run left until nothing is left (bounded), reaping as they die; a resource
    tracker gets :data:`TRACKER_GRACE` seconds to clean up and leave by itself first."""
    start = time.monotonic()
    while _kill_tree(command, time.monotonic() - start < TRACKER_GRACE):
        if time.monotonic() - start > SWEEP_SECONDS:
            break
        time.sleep(0.005)
        _reap(command)
    _reap(command)


def _exit_as(status: int) -> None:
    """Leave with the command's wait status: its exit code, or death by the same signal."""
    if not os.WIFSIGNALED(status):
        os._exit(os.waitstatus_to_exitcode(status))
    sig = os.WTERMSIG(status)
    try:
        # in the supervisor's last moments only
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the command dumped its own core
    except (ImportError, OSError, ValueError):
        pass
    signal.set_wakeup_fd(-1)
    try:
        signal.signal(sig, signal.SIG_DFL)
    except (OSError, ValueError):  # SIGKILL cannot be caught anyway
        pass
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)


def _close_inherited(keep: set[int]) -> None:
    """The command has what it was handed; holding it here would keep its pipes open."""
    try:
        names = os.listdir("/dev/fd")
    except OSError:
        return
    for name in names:
        if name.isdigit() and int(name) > 2 and int(name) not in keep:
            try:
                os.close(int(name))
            except OSError:
                pass


def _spawn(command: list[str]) -> int:
    """Start the command in a process group of its own, with SIGPIPE and SIGXFSZ at their
    defaults (as :mod:`subprocess` leaves them) and this process named as its parent."""
    env = dict(os.environ)
    env[PARENT_VAR] = str(os.getpid())
    try:
        return os.posix_spawnp(command[0], command, env, setpgroup=0,
                               setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
    except OSError as e:
        sys.stderr.write(f"repro-check: cannot start {command[0]}: {e}\n")
        os._exit(127)


#: signals the supervisor leaves as they are: its own (passed on, or its children's), those that
#: cannot be caught, and those that stop nothing by default
_KEPT_SIGNALS = {"SIGTERM", "SIGINT", "SIGHUP", "SIGCHLD", "SIGKILL", "SIGSTOP", "SIGCONT",
                 "SIGWINCH", "SIGURG"}


def _shrug_off_signals() -> None:
    """Every other signal that would end or stop the supervisor does nothing to it: a target may
    signal its parent (``os.kill(os.getppid(), SIGUSR1)``), and the supervisor must live on to
    reap the run and kill what it left. Caught, not ignored: the command starts with them at
    their defaults (an ignored signal would stay ignored across exec)."""
    def nothing(signum: int, frame: FrameType | None) -> None:
        pass

    for sig in signal.valid_signals():
        try:
            name = signal.Signals(sig).name
        except ValueError:  # a real-time signal without a name of its own
            name = ""
        if name in _KEPT_SIGNALS:
            continue
        try:
            if signal.getsignal(sig) == signal.SIG_DFL:
                signal.signal(sig, nothing)
        except (OSError, ValueError, RuntimeError):  # reserved by the C library
            pass


def is_stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped (SIGSTOP, or traced); False without /proc."""
    fields = _stat(pid)
    return fields is not None and fields[0] in (b"T", b"t")


def supervise(argv: list[str]) -> None:
    """``procs.py LIFELINE_FD -- COMMAND...``: run the command, keep its tree, leave nothing."""
    lifeline = int(argv[0])
    command = argv[argv.index("--") + 1 :]
    os.set_inheritable(lifeline, False)
    parent = os.getppid()
    _become_subreaper()
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # wakes the select below
    child = [0]  # the command's pid, once it has one
    early: list[int] = []  # signals to pass on that came before

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if child[0]:
            _send(child[0], signum)
        else:
            early.append(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        if signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, on_signal)
    _shrug_off_signals()
    child[0] = pid = _spawn(command)
    for early_signal in early:
        _send(pid, early_signal)
    _close_inherited({lifeline, wake_r, wake_w})
    watched = [wake_r, lifeline]
    status = _reap(pid)
    while status is None:
        ready, _, _ = select.select(watched, [], [], _PARENT_POLL)
        if wake_r in ready:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
        if lifeline in watched and (lifeline in ready or os.getppid() != parent):
            watched.remove(lifeline)  # repro-check is gone or gave the run up: nothing stays
            _kill_tree(pid)
        status = _reap(pid)
    child[0] = 0  # reaped: its pid may be another process's by now
    _sweep(pid)
    _exit_as(status)


if __name__ == "__main__":
    supervise(sys.argv[1:])
