"""Distributed runs: every run is a torchrun job, and every rank of it is recorded.

Each run is launched with PyTorch's own launcher (``python -m torch.distributed.run``); every rank
runs :mod:`repro_check.child.process.rank_supervisor`, which starts the usual run entry and appends its trace lines to a
file of its own in the run's events folder. The runner tails these files (torchrun starts ranks in
sessions of their own and passes no pipe on), so the steps of every rank survive crashes and
``os._exit``, and each rank's exit status and time are known: the rank that failed first is named.
The ``--timeout`` covers the whole job; stopping a job kills torchrun, every rank and all they
started (the job runs under a supervisor of its own, see :mod:`repro_check.run.procs`).

Seeding: every rank gets the same base seed, so model initialisation, dropout and the DataLoader
shuffling generator are what a seeded job has on each rank (DDP also broadcasts rank 0's weights;
a DistributedSampler seeds itself). DataLoader *workers* are the exception: their seeds are mixed
with the rank (see the ``dataloader`` component in :mod:`repro_check.child.seeding.components`), so random
augmentations are not the same numbers on every rank.

Cross-rank check: with a DistributedDataParallel model, every step also records a fingerprint of
the model's parameters after the optimizer step (signal ``params``); within one run, all ranks must
record the same fingerprint at every step (see :mod:`repro_check.distributed.compare`).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro_check.trace.payloads import RankExit, RankProcess, RunError
from repro_check.trace import runconfig
from repro_check.compare.steps import ComparisonResult, Policy
from repro_check.distributed.compare import (RankComparison, RankFeed, distributed_part,
                                              rank_warnings)
from repro_check.report.model import DistributedPart
from repro_check.errors import TraceFileError, UsageError
from repro_check.run import procs
from repro_check.run.exitstatus import Status, classify_exit
from repro_check.run.options import DistOptions
from repro_check.run.runner import (
    ABANDON,
    DROPPED_NAMED,
    OUTPUT_TAIL_BYTES,
    Events,
    RunSpec,
    apply_event,
    fresh_compile_caches,
    run_environment,
)
from repro_check.run.streams import EventFiles
from repro_check.trace.protocol import ProtocolError, Record, record_of
from repro_check.trace.results import Listener, RankResult, RunResult
from repro_check.trace.format import (TraceWriter, dropped_reason, dropped_warning, dumps,
                                       parse_event)

#: seconds between looks at the ranks' events files when nothing new arrived
_TAIL_POLL = 0.02
_EVENTS_FILE = re.compile(r"rank-(\d+)\.events")
# ---- in the parent: one run as a torchrun job ------------------------------------------------

@dataclass
class JobResult(RunResult):
    """A run's result, with each rank's; ``failed_rank`` is the rank that failed first."""

    ranks: list[RankResult] = field(default_factory=list)
    failed_rank: int | None = None

    def rank_results(self) -> list[RankResult]:
        return self.ranks

    def first_failed_rank(self) -> int | None:
        return self.failed_rank

    def describe_failure(self) -> str:
        if self.status == "timeout":
            at = ", ".join(f"rank {r.rank} at step {r.steps}" for r in self.ranks)
            return (f"run {self.index} timed out after {self.seconds:.1f} s; the whole torchrun job "
                    f"was stopped" + (f" ({at})" if at else ""))
        root = next((r for r in self.ranks if r.rank == self.failed_rank), None)
        if root is None:
            return super().describe_failure()
        if root.status == "crashed":
            what = f"was killed by {root.signal}"
        elif root.error and root.error.get("kind") == "raised":
            what = f"raised {root.error.get('type')}: {root.error.get('message')}"
        elif root.error:
            what = str(root.error.get("message"))
        else:
            what = f"exited with status {root.returncode}"
        others = [f"rank {r.rank} {r.status}" for r in self.ranks if r is not root]
        tail = f"; the other ranks were stopped ({', '.join(others)})" if others else ""
        return f"run {self.index}, rank {root.rank} {what}{tail}"


def _with_rank(error: RunError, rank: int) -> RunError:
    """A rank's error as the job's: the same, with the rank it came from."""
    out = error.copy()
    out["rank"] = rank
    return out


class Job:
    """One run as a torchrun job; to :func:`repro_check.run.runner.run_all` it is a
    :class:`~repro_check.run.runner.LiveRun` like a single run.

    Events reach the runner's queue as ``("event", run, event, line)`` with ``event["rank"]`` set;
    the per-rank trace files are ``<trace stem>.rank-<R>.jsonl`` beside the run's trace path.
    """

    scan_error: UsageError | None

    def __init__(self, spec: RunSpec, events: Events, options: DistOptions) -> None:
        self.spec = spec
        self.options = options
        self.result = JobResult(spec.index)
        self.tail = procs.Tail(OUTPUT_TAIL_BYTES)
        self.open_streams = 2
        #: a torchrun job's output is not scanned for ``--metric`` rules
        self.scan_error = None
        self.started = time.monotonic()
        self.killed_for: Status | None = None
        self.dropped: dict[int, int] = {}  # lines of each rank that could not be taken
        self.lock = threading.Lock()
        self.ranks: dict[int, RankResult] = {}
        self.writers: dict[int, TraceWriter] = {}
        if spec.trace_path is not None:
            self.folder: Path | None = Path(spec.trace_path).parent
            self.stem = Path(spec.trace_path).stem
        else:
            self.folder, self.stem = None, f"run-{spec.index}"
        self.events_dir = Path(tempfile.mkdtemp(prefix=f".{self.stem}-ranks-", dir=self.folder))
        told = spec.told.replace(event_fd=None, distributed=str(self.events_dir))
        config_path = self.events_dir / "run.json"  # every rank reads it
        config_path.write_text(told.to_json(), encoding="utf-8")
        env = run_environment(spec, runconfig.by_path(str(config_path)))
        # the job's ranks compile into caches of its own, removed with its events (finish)
        self.compile_cache = fresh_compile_caches(env, spec.extra_env, under=self.events_dir)
        command = [sys.executable, "-m", "torch.distributed.run",
                   *options.torchrun_args(spec.index), "-m", "repro_check.child.process.rank_supervisor"]
        self.supervised = procs.Supervised(command, env, spec.cwd)
        self.proc = self.supervised.proc
        self.event_reader = threading.Thread(target=self._tail_ranks, args=(events,), daemon=True)
        self.output_reader = threading.Thread(target=self._read_output, args=(events,), daemon=True)
        self.event_reader.start()
        self.output_reader.start()

    # ---- reading (threads) -------------------------------------------------------------------
    def _rank(self, rank: int) -> RankResult:
        with self.lock:
            if rank not in self.ranks:
                self.ranks[rank] = RankResult(rank)
            return self.ranks[rank]

    def _tail_ranks(self, events: Any) -> None:
        files = EventFiles(self.events_dir, _EVENTS_FILE)
        last_pass = False
        try:
            while True:
                over = self.proc.poll() is not None
                got = files.read(lambda rank, line: self._dispatch(rank, line, events))
                if last_pass:
                    break
                if over:
                    last_pass = True  # torchrun waited for its ranks: read what they left
                elif not got:
                    time.sleep(_TAIL_POLL)
        finally:
            files.close()
            self._kill_ranks()  # anything of a rank still there once torchrun is gone
            events.put(("eof", self.spec.index))

    def _dropped(self, rank: int, why: str, events: Any) -> None:
        """A line of rank ``rank`` could not be taken: a warning that marks it incomplete."""
        self.dropped[rank] = self.dropped.get(rank, 0) + 1
        if self.dropped[rank] <= DROPPED_NAMED:
            ev = dropped_warning(why, self.dropped[rank] == DROPPED_NAMED)
            events.put(("event", self.spec.index, record_of({**ev, "rank": rank}),
                        dumps(ev).encode("utf-8")))

    def _dispatch(self, rank: int, line: bytes, events: Any) -> None:
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as e:
            self._dropped(rank, dropped_reason(e), events)
            return
        if not isinstance(obj, dict):
            self._dropped(rank, "a line is not a JSON object", events)
            return
        info = obj.get("info")
        if isinstance(info, dict) and "rank_process" in info:
            proc = RankProcess.parse(info["rank_process"])
            rr = self._rank(rank)
            rr.pid, rr.pgid = proc.pid, proc.pgid
            if isinstance(rr.pgid, int):
                procs.LIVE_GROUPS.add(rr.pgid)
                if self.killed_for is not None:
                    procs.kill_group(rr.pgid)
            return
        if isinstance(info, dict) and "rank_exit" in info:
            end = RankExit.parse(info["rank_exit"])
            rr = self._rank(rank)
            rr.returncode, rr.exit_time, rr.stopped_by = end.returncode, end.time, end.stopped_by
            return
        try:
            event = obj if "format" in obj else parse_event(obj)
            rec = record_of({**event, "rank": rank})
        except (TraceFileError, ProtocolError) as e:
            self._dropped(rank, dropped_reason(e), events)
            return
        events.put(("event", self.spec.index, rec, line))

    def _read_output(self, events: Any) -> None:
        assert self.proc.stdout is not None
        while True:
            chunk = self.proc.stdout.read1(65536)  # type: ignore[attr-defined]
            if not chunk:
                break
            self.tail.add(chunk)
        self.proc.stdout.close()
        events.put(("eof", self.spec.index))

    # ---- the runner's side -------------------------------------------------------------------
    def _kill_ranks(self) -> None:
        for rr in list(self.ranks.values()):
            if isinstance(rr.pgid, int):
                procs.kill_group(rr.pgid)

    def stop(self, reason: Status, graceful: bool = True) -> None:
        """Stop the whole job at once: a rank waiting in a collective would not stop politely."""
        if self.killed_for is None and self.proc.poll() is None:
            self.killed_for = reason
        self.kill()

    def kill(self) -> None:
        self.supervised.kill()
        self._kill_ranks()

    def kill_now(self) -> None:
        self.killed_for = self.killed_for or "cancelled"
        self.kill()

    def give_up(self) -> None:
        self.supervised.end(ABANDON)

    def tick(self, now: float) -> None:
        """The timeout covers the whole job; once torchrun is gone, so is anything it left."""
        limit = self.spec.timeout
        if limit is not None and self.killed_for is None and now - self.started > limit:
            self.stop("timeout")
        elif self.proc.poll() is not None:
            self.kill()

    @property
    def ready(self) -> bool:
        return self.open_streams == 0 and self.proc.poll() is not None

    def handle(self, event: Record, raw: str | bytes) -> None:
        line = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        rr = self._rank(event.rank or 0)
        apply_event(rr, event)
        if self.folder is not None:
            writer = self.writers.get(rr.rank)
            if writer is None:
                path = self.folder / f"{self.stem}.rank-{rr.rank}.jsonl"
                writer = self.writers[rr.rank] = TraceWriter(path)
            writer.write_raw(line)

    def _classify(self, rr: RankResult) -> None:
        code = rr.returncode
        if code is None:  # no exit record: stopped with the job, or torchrun never started it
            if rr.status == "pending":
                rr.status = self.killed_for or "terminated"
            return
        ending = classify_exit(code, rr.status, rr.error, stopped=bool(rr.stopped_by), rank=True,
                               output=self.tail.text())
        rr.status, rr.error = ending.status, ending.error
        rr.signal = ending.signal or rr.signal

    def finish(self) -> JobResult:
        """Called once torchrun's output and the ranks' files are done: reap, classify each rank,
        name the one that failed first, close the per-rank traces."""
        returncode = self.proc.poll()
        if returncode is None:  # only after an emergency stop that could not end it
            self.kill()
            returncode = self.proc.wait()
        self.kill()
        res = self.result
        res.returncode = returncode
        res.seconds = time.monotonic() - self.started
        res.output_tail = self.tail.text()
        ranks = [self.ranks[r] for r in sorted(self.ranks)]
        for rr in ranks:
            self._classify(rr)
            if isinstance(rr.pgid, int):
                procs.LIVE_GROUPS.discard(rr.pgid)
        res.ranks = ranks
        res.steps = min((rr.steps for rr in ranks), default=0)
        res.header = next((rr.header for rr in ranks if rr.header is not None), None)
        res.warnings = [f"rank {rr.rank}: {w}" for rr in ranks for w in rr.warnings]
        res.incomplete = [f"rank {rr.rank}: {w}" for rr in ranks for w in rr.incomplete]
        res.held_metrics = next((rr.held_metrics for rr in ranks if rr.held_metrics), [])
        sizes = [rr.batch_samples for rr in ranks]
        res.batch_samples = sum(s for s in sizes if s is not None) \
            if ranks and None not in sizes else None
        failed = [rr for rr in ranks if rr.failed]
        root = min(failed, key=lambda rr: rr.failure_order) if failed else None
        if self.killed_for is not None:
            res.status = self.killed_for
        elif root is not None:
            res.status, res.failed_rank, res.signal = root.status, root.rank, root.signal
            res.error = _with_rank(root.error, root.rank) if root.error else None
        elif returncode != 0 or not ranks:
            res.status = "failed"
            why = f"exited with status {returncode}" if returncode != 0 else "started no rank"
            res.error = {"kind": "launcher",
                         "message": f"torchrun {why} (see its output below)"}
        else:
            statuses = {rr.status for rr in ranks}
            res.status = next((s for s in ("stopped", "exited", "terminated") if s in statuses),
                              "completed")
        for rr in ranks:
            writer = self.writers.pop(rr.rank, None)
            if writer is None:
                continue
            writer.write_raw(dumps({"end": {
                "status": rr.status, "returncode": rr.returncode, "signal": rr.signal,
                "seconds": round(res.seconds, 3), "steps": rr.steps, "rank": rr.rank,
                "job_status": res.status, "output_tail": res.output_tail[-8192:],
            }}))
            if rr.header is not None:
                rr.trace_path = str(writer.close())
            else:
                writer.abort()
        res.trace_path = next((rr.trace_path for rr in ranks if rr.trace_path), None)
        shutil.rmtree(self.events_dir, ignore_errors=True)
        return res


class Distributed:
    """What a check needs to run distributed: the launcher of its runs (``RunSpec.launcher``),
    the comparison across runs and ranks, and the report's extra keys."""

    def __init__(self, options: DistOptions, runs: int) -> None:
        options.validate()
        self.options = options
        self.runs = runs
        self.warnings: list[str] = []

    @property
    def local_ranks(self) -> int:
        return self.options.nproc_per_node

    def start(self, spec: RunSpec, events: Events) -> Job:
        return Job(spec, events, self.options)

    def jobs(self, requested: int | None, default: int) -> int:
        """Runs at a time: one when they share the user's rendezvous (and must meet the other
        nodes' runs in order), else as asked or as the CPUs hold all ranks."""
        if self.options.shared_rendezvous:
            if requested is not None and requested > 1:
                self.warnings.append("runs go one at a time: they share the rendezvous given")
            return 1
        return requested or default

    def comparison(self, policy: Policy) -> RankComparison:
        return RankComparison(self.runs, policy, self.local_ranks)

    def feed(self, comparison: RankComparison, listener: Listener | None) -> RankFeed:
        return RankFeed(comparison, listener)

    def parts(self, results: Sequence[RunResult], comparison: RankComparison,
              result: ComparisonResult | None) -> tuple[DistributedPart, list[str]]:
        """The report's distributed part, and its warnings (the launch's, and ranks that
        differ between the runs)."""
        return (distributed_part(results, comparison, result, self.options),
                [*self.warnings, *rank_warnings(results)])
