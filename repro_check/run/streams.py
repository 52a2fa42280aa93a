"""The trace streams of the processes a run's target starts, as the runner reads them.

Each process the target's main process starts (see :mod:`repro_check.child.process.processes`) appends
its trace lines to ``proc-K.events`` in the run's events folder, a hidden folder beside the run's
trace: files, not the run's pipe, because a spawned child is handed no pipe and several writers
on one pipe could interleave long lines. A thread tails the files while the run goes and puts each
line on the runner's queue as ``("event", run, {..., "proc": K}, line)``; once the run's process
has ended and what it left is killed, a last pass reads what is left. Each stream that recorded
something becomes a trace of its own beside the run's, ``run-N.proc-K.jsonl``; a process that
recorded no step, no backward call and no metric (a helper that only waits or serves) leaves no
trace and is not compared.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from repro_check.errors import TraceFileError
from repro_check.run import procs
from repro_check.trace.protocol import Record, record_of
from repro_check.trace.results import ProcessResult, RunResult
from repro_check.trace.format import (TraceWriter, dropped_reason, dropped_warning, dumps,
                                       parse_event)

#: seconds between looks at the events files when nothing new arrived...
_TAIL_POLL = 0.02
#: ...and at the empty events folder of a run that has started no process yet
_IDLE_POLL = 0.1
#: seconds the last pass waits for what the run left to be gone (so its files are complete)
_GONE_WAIT = 1.0
_EVENTS_FILE = re.compile(r"proc-(\d+)\.events")


#: lines of a process that cannot be taken are each named in a warning, up to this many
DROPPED_NAMED = 10


class EventFiles:
    """The numbered events files of a folder (``proc-K.events``, a torchrun rank's
    ``rank-R.events``), read as they grow: each pass hands on the whole lines added since the
    last one (a line still being written waits for the next pass)."""

    def __init__(self, folder: Path, name: re.Pattern[str]) -> None:
        self.folder = folder
        self.name = name
        self.files: dict[int, tuple[Any, bytearray]] = {}

    def read(self, on_line: Callable[[int, bytes], None]) -> bool:
        """One pass over the files: ``on_line(number, line)`` for each new line; whether there
        was any."""
        try:
            found = list(self.folder.iterdir())
        except OSError:  # the folder is gone: the run is being given up
            found = []
        for path in found:
            m = self.name.fullmatch(path.name)
            if m and int(m.group(1)) not in self.files:
                self.files[int(m.group(1))] = (open(path, "rb"), bytearray())
        got = False
        for number, (fh, buf) in self.files.items():
            data = fh.read()
            if not data:
                continue
            got = True
            buf += data
            *lines, rest = bytes(buf).split(b"\n")
            buf[:] = rest
            for line in lines:
                on_line(number, line)
        return got

    def close(self) -> None:
        for fh, _ in self.files.values():
            fh.close()


class ProcessStreams:
    """The streams of the processes one run's target starts: tailed while the run goes, written
    as traces beside the run's, and summed up when it ends (see the module's docstring)."""

    def __init__(self, run: int, trace_path: Path | None, events: Any) -> None:
        self.run = run
        self.events = events
        if trace_path is not None:
            self.folder: Path | None = Path(trace_path).parent
            self.stem = Path(trace_path).stem
        else:
            self.folder, self.stem = None, f"run-{run}"
        self.events_dir = Path(tempfile.mkdtemp(prefix=f".{self.stem}-procs-", dir=self.folder))
        self.results: dict[int, ProcessResult] = {}
        #: lines of each process that could not be taken (the first DROPPED_NAMED are named)
        self.dropped: dict[int, int] = {}
        self.writers: dict[int, TraceWriter] = {}
        self.final = threading.Event()
        self.abandon = threading.Event()
        self.left: list[int] = []
        self.thread = threading.Thread(target=self._tail, daemon=True)
        self.thread.start()

    # ---- reading (a thread) ------------------------------------------------------------------
    def _tail(self) -> None:
        files = EventFiles(self.events_dir, _EVENTS_FILE)
        try:
            last_pass = False
            while not self.abandon.is_set():
                if self.final.is_set() and not last_pass:
                    procs.wait_gone(self.left, _GONE_WAIT)
                    last_pass = True
                elif last_pass:
                    break
                if not files.read(self._dispatch) and not last_pass:
                    time.sleep(_TAIL_POLL if files.files else _IDLE_POLL)
        finally:
            files.close()
            self.events.put(("eof", self.run))

    def _dispatch(self, index: int, line: bytes) -> None:
        try:
            obj = json.loads(line)
            event = obj if isinstance(obj, dict) and "format" in obj else parse_event(obj)
            rec = record_of({**event, "proc": index})
        except (ValueError, RecursionError, TraceFileError) as e:  # dropped, never silently
            self.dropped[index] = self.dropped.get(index, 0) + 1
            if self.dropped[index] > DROPPED_NAMED:
                return
            event = dropped_warning(dropped_reason(e), self.dropped[index] == DROPPED_NAMED)
            line = dumps(event).encode("utf-8")
            rec = record_of({**event, "proc": index})
        self.events.put(("event", self.run, rec, line))

    # ---- the runner's side -------------------------------------------------------------------
    def last_pass(self, left: Iterable[int]) -> None:
        """The run's process has ended and ``left`` (what it left running) was killed: once they
        are gone, read what the files hold and stop."""
        self.left = list(left)
        self.final.set()

    def stop(self) -> None:
        """Stop reading at once (the runner gives the run up)."""
        self.abandon.set()

    def handle(self, event: Record, raw: bytes | str) -> None:
        """One record of process ``event.proc``, in the order it arrived: into its result and
        its trace."""
        index = event.proc
        assert index is not None, "a record of the run's main process"
        res = self.results.setdefault(index, ProcessResult(index))
        res.fold(event)
        if self.folder is None:
            return
        writer = self.writers.get(index)
        if writer is None:
            writer = self.writers[index] = TraceWriter(
                self.folder / f"{self.stem}.proc-{index}.jsonl")
        writer.write_raw(raw.decode("utf-8") if isinstance(raw, bytes) else raw)

    def finish(self, result: RunResult) -> list[ProcessResult]:
        """Called once the run is over (its status known): close each trace with its end line
        (none for a process that recorded nothing), note the failures among the run's warnings;
        every process in index order."""
        self.abandon.set()
        self.thread.join(timeout=1.0)
        out = [self.results[k] for k in sorted(self.results)]
        for res in out:
            if res.error and res.error.get("kind") == "raised":
                result.warnings.append(f"process {res.index} raised {res.error.get('type')}: "
                                       f"{res.error.get('message')}")
            elif not res.ended_itself and res.recorded and result.status == "completed":
                result.warnings.append(f"process {res.index} was killed before it ended (after "
                                       f"{res.steps} steps): the target returned without waiting "
                                       "for it, or it died by a signal")
            result.warnings += [f"process {res.index}: {w}" for w in res.warnings]
            result.incomplete += [f"process {res.index}: {w}" for w in res.incomplete]
            self._close(res, result)
        shutil.rmtree(self.events_dir, ignore_errors=True)
        return out

    def _close(self, res: ProcessResult, result: RunResult) -> None:
        writer = self.writers.pop(res.index, None)
        if writer is None:
            return
        if res.header is None or not res.recorded:
            writer.abort()
            return
        writer.write_raw(dumps({"end": {
            "status": res.status, "returncode": res.exitcode, "signal": None,
            "seconds": round(result.seconds, 3), "steps": res.steps, "process": res.index,
            "run_status": result.status, "output_tail": "",
        }}))
        res.trace_path = str(writer.close())

    def discard(self) -> None:
        """The run could not start: nothing to read."""
        self.abandon.set()
        shutil.rmtree(self.events_dir, ignore_errors=True)
