"""The user's ``--metric`` rules, matched in a small process of their own.

CPython's ``re`` holds the GIL while it matches: a rule that backtracks catastrophically
(``^(a+)+$`` on a line of ``a``'s ending in ``b``) would stop every thread of repro-check, its
timers included, and ``--timeout`` would no longer bound the command. So the rules the user gives
run here (``python -m repro_check.compare.scanproc``, standard library only, started only when
there are such rules); repro-check's own default rule, which is linear, stays in the parent.

The parent (:class:`Remote`) hands each chunk of output to a writer thread through a bounded
buffer, so reading the run's output never waits on this process. At the end of the run it asks
for the result with a deadline; a process that does not answer in time is killed and the rule it
was running is named in a :class:`RuleTimedOut` (a usage error: the user's regex is at fault).

Protocol, on the process's stdin: one JSON line of ``[NAME, REGEX]`` rules, then frames of a
4-byte big-endian length and that many bytes of output; a frame of length 0 asks for the result.
On its stdout: ``r I`` lines when it starts searching with rule ``I``, then one ``= JSON`` line:
``[[NAME, TEXT, FIRST_SCAN], ...]`` in the order the names first appeared.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

from repro_check.compare import printed
from repro_check.errors import UsageError

#: bytes of output the process may lag behind before it is given up as not keeping up
MAX_BEHIND = 64 * 1024 * 1024
#: seconds the result is waited for after a run ended when the run has no --timeout
WAIT_WITHOUT_TIMEOUT = 60.0
#: seconds the result is always given, however little of --timeout is left
MIN_WAIT = 2.0
_ROOT = str(Path(__file__).resolve().parents[2])


class RuleTimedOut(UsageError):
    """A ``--metric`` rule did not finish on a run's output in time."""


def timed_out(name: str) -> RuleTimedOut:
    return RuleTimedOut(f"--metric {name}: the regex did not finish on the run's output within "
                        "the timeout (catastrophic backtracking?)")


def scanner(rules: Sequence[tuple[str, str]]) -> printed.Scanner | Remote:
    """The scanner of one run: in this process when there is no rule of the user's."""
    return Remote(rules) if rules else printed.Scanner()


class Remote:
    """A :class:`~repro_check.compare.printed.Scanner` whose custom rules run in a process of
    their own; ``add`` never waits on that process."""

    def __init__(self, rules: Sequence[tuple[str, str]]) -> None:
        self.rules = [(name, regex) for name, regex in rules]
        self.local = printed.Scanner(custom=[name for name, _ in rules])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "repro_check.compare.scanproc"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, close_fds=True,
            start_new_session=True)  # a Ctrl-C to the terminal is the parent's to handle
        self.cond = threading.Condition()
        self.pending: deque[tuple[int, bytes]] = deque()  # (bytes of output, what to write)
        self.behind = 0  # bytes in self.pending
        self.overrun = False
        self.closed = False
        self.running = -1  # the rule the process said it is running (-1: none yet)
        self.result: list[Any] | None = None
        self.answered = threading.Event()
        assert self.proc.stdin is not None
        self.pending.append((0, json.dumps(self.rules).encode() + b"\n"))
        self.threads = [threading.Thread(target=self._write, daemon=True),
                        threading.Thread(target=self._read, daemon=True)]
        for t in self.threads:
            t.start()

    # ---- the parent's side ---------------------------------------------------------------
    def add(self, chunk: bytes) -> None:
        self.local.add(chunk)
        with self.cond:
            if self.overrun or self.closed:
                return
            if self.behind + len(chunk) > MAX_BEHIND:
                self.overrun = True  # finish() says so; what it found so far is not the result
                self.pending.clear()
                self.behind = 0
            else:
                self.pending.append((len(chunk), len(chunk).to_bytes(4, "big") + chunk))
                self.behind += len(chunk)
            self.cond.notify()

    def finish(self, timeout: float | None = None) -> dict[str, dict[str, Any]]:
        """Every metric found, as :meth:`printed.Scanner.finish` gives them; the process is
        waited for at most ``timeout`` seconds (:data:`WAIT_WITHOUT_TIMEOUT` when None), then
        killed, and :class:`RuleTimedOut` names the rule it was running."""
        self.local.flush()
        with self.cond:
            if not self.overrun:
                self.pending.append((0, b"\0\0\0\0"))
                self.cond.notify()
        if not self.overrun:
            self.answered.wait(WAIT_WITHOUT_TIMEOUT if timeout is None else timeout)
        result = self.result
        running = self.running
        ended = None  # the status of a process that died on its own (its output ended)
        if result is None and self.answered.is_set():
            try:
                ended = self.proc.wait(MIN_WAIT)  # its files close just before its status is out
            except subprocess.TimeoutExpired:
                pass
        self.close()
        if result is None and ended is not None and not self.overrun:
            raise UsageError(f"--metric {self.rules[0][0]}: the process that matches the "
                             f"--metric rules ended without a result (status {ended})")
        if result is None:
            # the rule it was running; every rule when it had not started one
            name = self.rules[running][0] if 0 <= running < len(self.rules) \
                else ", --metric ".join(n for n, _ in self.rules)
            if self.overrun:
                raise RuleTimedOut(f"--metric {name}: the regex fell over "
                                   f"{MAX_BEHIND // 2**20} MiB behind the run's output "
                                   "(catastrophic backtracking?)")
            raise timed_out(name)
        return merge(self.local, result)

    def close(self) -> None:
        """Kill the process (if still there) and reap it; safe to call more than once."""
        with self.cond:
            self.closed = True
            self.pending.clear()
            self.cond.notify()
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass
        self.proc.wait()
        for t in self.threads:
            t.join(timeout=1.0)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass

    def _write(self) -> None:
        assert self.proc.stdin is not None
        while True:
            with self.cond:
                while not self.pending and not self.closed:
                    self.cond.wait()
                if self.closed:
                    return
                size, data = self.pending.popleft()
                self.behind -= size
            try:
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
            except (OSError, ValueError):
                return  # the process is gone: finish() finds no result

    def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            for line in self.proc.stdout:
                if line.startswith(b"r "):
                    self.running = int(line[2:])
                elif line.startswith(b"= "):
                    self.result = json.loads(line[2:])
                    return
        except (OSError, ValueError):
            return
        finally:
            self.answered.set()  # a result, or the process is gone: no use waiting


def merge(local: printed.Scanner, remote: list[Any]) -> dict[str, dict[str, Any]]:
    """The metrics of both scans in the order one scanner with every rule gives them: by the
    scan each name first appeared in, the custom rules' names first within a scan (they are
    searched first)."""
    keyed = [((first, 0, i), name, text) for i, (name, text, first) in enumerate(remote)]
    keyed += [((local.first[name], 1, i), name, text)
              for i, (name, text) in enumerate(local.found.items())]
    return printed.encoded({name: text for _, name, text in sorted(keyed)})


# ---- the process's side --------------------------------------------------------------------
def _die_with_parent() -> None:
    """Have the kernel kill this process when repro-check dies (Linux): a regex that never ends
    must not outlive it."""
    if sys.platform.startswith("linux"):
        try:
            # Linux only (prctl)
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass


def _read_exact(inp: BinaryIO, n: int) -> bytes | None:
    data = inp.read(n)
    return data if data is not None and len(data) == n else None


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """The protocol of this module's docstring, from ``inp`` to ``out``."""
    rules = [(str(n), str(r)) for n, r in json.loads(inp.readline())]
    said = [-1]

    def on_rule(i: int) -> None:
        if i != said[0]:
            said[0] = i
            out.write(b"r %d\n" % i)
            out.flush()

    scan = printed.Scanner(rules, default=False, on_rule=on_rule)
    while True:
        head = _read_exact(inp, 4)
        if head is None:
            return  # the parent is gone or gave up
        size = int.from_bytes(head, "big")
        if size == 0:
            break
        chunk = _read_exact(inp, size)
        if chunk is None:
            return
        scan.add(chunk)
    scan.flush()
    found = [[name, text, scan.first[name]] for name, text in scan.found.items()]
    out.write(b"= " + json.dumps(found).encode() + b"\n")
    out.flush()


def main() -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when this ends
    serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
