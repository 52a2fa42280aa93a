"""``make bench``: what repro-check costs, against bare training runs, side by side.

Two workloads: a small-step one (``scripts/bench_small_steps.py``: 3,752 Adam steps of about 2 ms,
where a per-step cost shows) and the reference MNIST MLP (``repro_check.workloads.mnist:main``, on
the full set from ``$REPRO_CHECK_MNIST`` or a ``shared/data/mnist`` folder beside the checkout,
else the embedded subset). For each, the two sides of every comparison run alternately,
``--reps`` times (default 5), and the medians, their ratio, the spread (min-max of each side) and
the cost per step in microseconds are printed next to the target.

Like with like: a bare run is the same target under the same seeding and thread count (1), in a
fresh interpreter, with the same exit path as a captured run (what is loaded before the target
starts is frozen out of the garbage collector's reach, ``gc.freeze``, and one collection runs at
exit, as in a run of repro-check). "one captured run" is ``record`` (a check needs two runs); the
floor of a two-run check is two bare runs started together, on this machine's cores. The floor of
any capture that finds the first divergent step exactly is a bare run that reads, every step,
each byte that can differ there and nothing more (``--read-state``, :func:`read_every_step`).

Then the long and wide jobs, simulated (traces written by a generator, no training): ``diff`` of
two traces of 100,000 and 1,000,000 steps, and the parent's torchrun comparison (per rank and
across ranks) of two runs' traces of 8 and 64 ranks, seconds and peak memory of the process. Exits 1 when
a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MNIST = "repro_check.workloads.mnist:main"
SMALL = str(Path(__file__).resolve().parent / "bench_small_steps.py") + ":main"
SEED = 123


def data_args() -> list[str]:
    for folder in (os.environ.get("REPRO_CHECK_MNIST"), str(ROOT.parent / "shared" / "data" / "mnist")):
        if folder and Path(folder).is_dir():
            return ["--data", folder]
    return []


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), e.get("PYTHONPATH")) if p)
    e["REPRO_CHECK_KEEP_RUNS"] = "0"
    return e


@dataclass(frozen=True)
class Workload:
    name: str
    target: str
    args: tuple[str, ...]
    steps: int
    #: arguments (after ``args``) that make a run of the same target ``short_steps`` long: what a
    #: captured run costs whatever its length (start-up, set-up, exit) is measured on it, and
    #: taken out of the per-step cost
    short: tuple[str, ...] = ()
    short_steps: int = 0


def popen(argv: Sequence[str], extra: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(list(argv), env={**env(), **(extra or {})}, cwd=tempfile.gettempdir(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], ok: Sequence[int] = (0,)) -> str:
    out, err = proc.communicate()
    if proc.returncode not in ok:
        raise SystemExit(f"bench: {' '.join(map(str, proc.args))} exited {proc.returncode}:\n"
                         f"{err[-2000:]}")
    return out


def timed(*commands: Sequence[str], ok: Sequence[int] = (0,)) -> float:
    """Wall seconds until every command (started together) has ended."""
    start = time.perf_counter()
    procs = [popen(c) for c in commands]
    for p in procs:
        finish(p, ok)
    return time.perf_counter() - start


def check_cmd(w: Workload, *extra: str, target_args: Sequence[str] = ()) -> list[str]:
    trace_dir = tempfile.mkdtemp(prefix="repro-check-bench-")
    return [sys.executable, "-m", "repro_check", w.target, "--seed", str(SEED), "--quiet",
            "--threads", "1", "--trace-dir", trace_dir, *extra, "--", *w.args, *target_args]


def record_cmd(w: Workload, target_args: Sequence[str] = ()) -> list[str]:
    trace_dir = tempfile.mkdtemp(prefix="repro-check-bench-")
    return [sys.executable, "-m", "repro_check", "record", w.target, "--seed", str(SEED),
            "--quiet", "--threads", "1", "--trace-dir", trace_dir, "-o",
            os.path.join(trace_dir, "golden.json"), "--", *w.args, *target_args]


def bare_cmd(w: Workload, target_args: Sequence[str] = (), stop_at: int = 0,
             read_state: bool = False) -> list[str]:
    return [sys.executable, __file__, "--bare", w.target, "--stop-at", str(stop_at),
            *(["--read-state"] if read_state else []), "--", *w.args, *target_args]


def read_every_step() -> Callable[[], int]:
    """The floor of a capture that finds the first divergent step exactly: every step, read each
    byte that can differ there, and nothing more. The batch (as the DataLoader yields it), the
    loss, every gradient and the optimizer's state before its step, every parameter after it,
    each tensor through one xxh3 call on its memory: no records, no names, no emission, no RNG
    states. What a bare run costs with this added is what no exact per-step capture on this
    machine can go below. Returns what takes it all out again, which says how many tensors were
    read."""
    import torch
    import xxhash
    from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                       register_optimizer_step_pre_hook)
    from torch.utils.data import dataloader

    digest = xxhash.xxh3_128_intdigest
    sink = [0, 0]  # the digests xor-ed (so that none is thrown away unread), how many

    def read(t: torch.Tensor) -> None:
        sink[0] ^= digest(t.detach().numpy())
        sink[1] += 1

    def before(opt: torch.optim.Optimizer, *_: object) -> None:
        for group in opt.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    read(p.grad)
                for value in opt.state.get(p, {}).values():
                    if isinstance(value, torch.Tensor):
                        read(value)

    def after(opt: torch.optim.Optimizer, *_: object) -> None:
        for group in opt.param_groups:
            for p in group["params"]:
                read(p)

    hooks = [register_optimizer_step_pre_hook(before), register_optimizer_step_post_hook(after)]
    iterator = dataloader._BaseDataLoaderIter
    next_batch = iterator.__next__

    def batch(self: dataloader._BaseDataLoaderIter) -> object:
        got = next_batch(self)
        for t in got if isinstance(got, (list, tuple)) else (got,):
            if isinstance(t, torch.Tensor):
                read(t)
        return got

    backward = torch.Tensor.backward

    def loss_then_backward(self: torch.Tensor, *args: object, **kwargs: object) -> None:
        read(self)
        backward(self, *args, **kwargs)  # type: ignore[arg-type]

    iterator.__next__ = batch  # type: ignore[method-assign]
    torch.Tensor.backward = loss_then_backward  # type: ignore[method-assign]

    def undo() -> int:
        for h in hooks:
            h.remove()
        iterator.__next__ = next_batch  # type: ignore[method-assign]
        torch.Tensor.backward = backward  # type: ignore[method-assign]
        return sink[1]

    return undo


def bare(target_text: str, stop_at: int, args: list[str], read_state: bool = False) -> None:
    """One seeded run of the target without capture, one thread, exiting as a captured run
    does (re-executes itself with the seeded environment). ``stop_at``: leave at once after that
    optimizer step (the earliest a divergence there can be seen). ``read_state``: read every
    step's bytes as an exact capture must (:func:`read_every_step`)."""
    from repro_check import targets
    from repro_check.child.seeding import components as seeding
    from repro_check.trace import seeding as plan

    if os.environ.get("_BENCH_BARE") != "1":
        e = plan.child_environment(env(), SEED, plan.COMPONENTS, 1)
        e["_BENCH_BARE"] = "1"
        os.execve(sys.executable, [sys.executable, __file__, "--bare", target_text, "--stop-at",
                                   str(stop_at), *(["--read-state"] if read_state else []),
                                   "--", *args], e)
    import atexit
    import contextlib
    import gc

    seeding.apply(SEED, plan.COMPONENTS, 1)
    target = targets.resolve(targets.parse(target_text), args)
    if stop_at:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        steps = [0]

        def leave(*_: object) -> None:
            steps[0] += 1
            if steps[0] == stop_at:
                os._exit(0)

        register_optimizer_step_post_hook(leave)
    if read_state:
        read_every_step()
    gc.freeze()  # as a captured run does before its target starts
    atexit.register(gc.collect)
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        target()


@dataclass
class Row:
    workload: str
    what: str
    a: list[float]
    b: list[float]
    limit: float | None
    steps: int | None = None  # the per-step cost is shown when set
    #: seconds of the difference a run of ``fixed_steps`` steps shows too (start-up, exit):
    #: left out of the per-step cost
    fixed: float = 0.0
    fixed_steps: int = 0

    @property
    def ratio(self) -> float:
        return statistics.median(self.a) / statistics.median(self.b)

    @property
    def ok(self) -> bool:
        return self.limit is None or self.ratio <= self.limit

    def per_step_us(self) -> float | None:
        if not self.steps:
            return None
        added = statistics.median(self.a) - statistics.median(self.b) - self.fixed
        return added / (self.steps - self.fixed_steps) * 1e6


def side_by_side(reps: int, a: Callable[[], float], b: Callable[[], float]) -> tuple[list[float], list[float]]:
    ta, tb = [], []
    for _ in range(reps):
        ta.append(a())
        tb.append(b())
    return ta, tb


def workload_rows(w: Workload, reps: int) -> list[Row]:
    rows = []
    fixed = fixed_checked = 0.0
    if w.short:
        a, b = side_by_side(reps, lambda: timed(record_cmd(w, w.short)),
                            lambda: timed(bare_cmd(w, w.short)))
        rows.append(Row(w.name, f"  start-up: record / bare, {w.short_steps}-step runs", a, b,
                        None))
        fixed = statistics.median(a) - statistics.median(b)
        a, b = side_by_side(reps, lambda: timed(check_cmd(w, "--no-control", target_args=w.short)),
                            lambda: timed(bare_cmd(w, w.short), bare_cmd(w, w.short)))
        rows.append(Row(w.name, f"  start-up: --no-control / two bare, {w.short_steps}-step runs",
                        a, b, None))
        fixed_checked = statistics.median(a) - statistics.median(b)
    a, b = side_by_side(reps, lambda: timed(record_cmd(w)), lambda: timed(bare_cmd(w)))
    rows.append(Row(w.name, "one captured run (record) / one bare run", a, b, 1.05, w.steps,
                    fixed, w.short_steps))
    a, b = side_by_side(reps, lambda: timed(bare_cmd(w, read_state=True)),
                        lambda: timed(bare_cmd(w)))
    rows.append(Row(w.name, "  floor: bare reading each step's bytes / bare", a, b, None,
                    w.steps))
    a, b = side_by_side(reps, lambda: timed(check_cmd(w)),
                        lambda: timed(bare_cmd(w), bare_cmd(w)))
    rows.append(Row(w.name, "two-run check / two bare runs in parallel", a, b, 1.05, w.steps))
    one = [timed(bare_cmd(w)) for _ in range(reps)]
    rows.append(Row(w.name, "two-run check / one bare run", a, one, None))
    a, b = side_by_side(reps, lambda: timed(check_cmd(w, "--no-control")),
                        lambda: timed(bare_cmd(w), bare_cmd(w)))
    rows.append(Row(w.name, "  without the control: --no-control / two bare in parallel", a, b,
                    None, w.steps, fixed_checked, w.short_steps))
    return rows


def capture_parts(w: Workload, reps: int) -> list[tuple[str, list[float]]]:
    """Where a captured step's time goes: ``reps`` captured runs (``record``), each timing the
    capture's parts inside the run (``REPRO_CHECK_CAPTURE_COSTS``); each part's microseconds
    per step, one value a run. Apart from the timed rows: the timers cost a little."""
    per_part: dict[str, list[float]] = {}
    for _ in range(reps):
        folder = tempfile.mkdtemp(prefix="repro-check-bench-costs-")
        path = os.path.join(folder, "costs.json")
        finish(popen(record_cmd(w), {"REPRO_CHECK_CAPTURE_COSTS": path}))
        data = json.loads(Path(path).read_text())
        for name, part in data["parts"].items():
            per_part.setdefault(name, []).append(part["seconds"] / max(data["steps"], 1) * 1e6)
    return list(per_part.items())


def fail_fast_rows(w: Workload, reps: int) -> list[Row]:
    planted = ["--perturb-at", "37"]
    a, b = side_by_side(reps, lambda: timed(check_cmd(w, "--fail-fast", target_args=planted), ok=(1,)),
                        lambda: timed(check_cmd(w, target_args=planted), ok=(1,)))
    floor = [timed(bare_cmd(w, stop_at=37)) for _ in range(reps)]
    return [Row(w.name, "divergence at step 37: --fail-fast / full check", a, b, None),
            Row(w.name, "  its floor: bare run to step 37 / full check", floor, b, None)]


# ---- long jobs, simulated ------------------------------------------------------------------------
def write_trace(path: Path, steps: int, differ_at: int | None = None) -> None:
    """A run trace of ``steps`` steps as a run writes it (header, one line a step, its end)."""
    header = {"format": "repro-check-trace", "version": 2, "header": {
        "target": "generated.py", "args": [], "run": 1, "seed": 0, "components": ["torch"]}}
    with open(path, "w") as f:
        f.write(json.dumps(header) + "\n")
        for k in range(1, steps + 1):
            bits = (0x3E000000 + k) if k != differ_at else (0x3E000000 + k + 1)
            f.write(json.dumps({"step": k, "signals": {
                "loss": {"dtype": "float32", "bits": f"{bits:08x}"},
                "grads": f"{k:032x}", "params": f"{k * 7:032x}"}}) + "\n")
        f.write(json.dumps({"info": {"status": "completed", "steps": steps, "backward_calls": steps,
                                     "seconds": 1.0}}) + "\n")
        f.write(json.dumps({"end": {"status": "completed", "returncode": 0, "signal": None,
                                    "seconds": 1.0, "steps": steps, "output_tail": ""}}) + "\n")


def diff_cost(steps: int) -> tuple[float, int]:
    """Seconds and peak RSS (KiB) of ``repro-check diff`` of two traces of ``steps`` steps that
    differ at the last step."""
    folder = Path(tempfile.mkdtemp(prefix="repro-check-bench-long-"))
    a, b = folder / "a.jsonl", folder / "b.jsonl"
    write_trace(a, steps)
    write_trace(b, steps, differ_at=steps)
    code = ("import runpy, sys\n"
            f"sys.argv = ['repro-check', 'diff', {str(a)!r}, {str(b)!r}]\n"
            "try:\n    runpy.run_module('repro_check', run_name='__main__')\n"
            "except SystemExit as e:\n    code = e.code\n"
            "peak = [t for t in open('/proc/self/status') if t.startswith('VmHWM')][0].split()[1]\n"
            "print('PEAK', peak, code)\n")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], env=env(), capture_output=True, text=True)
    took = time.perf_counter() - start
    line = next((t for t in proc.stdout.splitlines() if t.startswith("PEAK")), None)
    if line is None or line.split()[2] != "1":
        raise SystemExit(f"bench: diff of {steps:,} steps did not find the difference:\n"
                         f"{proc.stdout[-1000:]}{proc.stderr[-2000:]}")
    for p in (a, b):
        p.unlink()
    folder.rmdir()
    return took, int(line.split()[1])


RANKS_CODE = """
import json, os, sys, time
from repro_check.distributed.compare import RankComparison, RankFeed
from repro_check.trace.format import read_record

folder, ranks, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
files = {(run, rank): open(os.path.join(folder, f"run-{run}-rank-{rank}.jsonl"), "rb")
         for run in (1, 2) for rank in range(ranks)}
start = time.perf_counter()
comparison = RankComparison(2, local_ranks=ranks)
feed = RankFeed(comparison)
for f in files.values():
    f.readline()  # the header
for _ in range(steps):  # every rank's next line in turn, as the runner tails the ranks' files
    for (run, rank), f in files.items():
        feed.event(run, read_record(f.readline(), rank=rank))
for run in (1, 2):
    comparison.end(run, {rank: steps for rank in range(ranks)})
result = comparison.result()
took = time.perf_counter() - start
peak = [t for t in open("/proc/self/status") if t.startswith("VmHWM")][0].split()[1]
d = result.divergence
print("RESULT", took, peak, result.first_divergent_step, d.rank if d is not None else None)
"""


def write_rank_traces(folder: Path, ranks: int, steps: int) -> None:
    """Each rank's trace of a torchrun job of ``ranks`` ranks, run 1 and run 2, as a rank writes
    its own file (a DDP model: every rank's parameters the same); run 2's last rank differs at the
    last step."""
    for run in (1, 2):
        for rank in range(ranks):
            header = {"format": "repro-check-trace", "version": 2, "header": {
                "target": "generated.py", "args": [], "run": run, "seed": 0,
                "components": ["torch"]}}
            with open(folder / f"run-{run}-rank-{rank}.jsonl", "w") as f:
                f.write(json.dumps(header) + "\n")
                for k in range(1, steps + 1):
                    odd = run == 2 and rank == ranks - 1 and k == steps
                    bits = 0x3E000000 + k * 64 + rank + (1 if odd else 0)
                    f.write(json.dumps({"step": k, "signals": {
                        "loss": {"dtype": "float32", "bits": f"{bits:08x}"},
                        "grads": f"{k * 64 + rank:032x}", "params": f"{k * 7:032x}"}}) + "\n")


def ranks_cost(ranks: int, steps: int) -> tuple[float, int]:
    """Seconds and peak RSS (KiB) of the parent's torchrun comparison (the per-rank and cross-rank
    comparison a check feeds from the ranks' files) of generated traces of ``ranks`` ranks x
    ``steps`` steps, two runs, differing on the last rank at the last step."""
    with tempfile.TemporaryDirectory(prefix="repro-check-bench-ranks-") as tmp:
        write_rank_traces(Path(tmp), ranks, steps)
        proc = subprocess.run([sys.executable, "-c", RANKS_CODE, tmp, str(ranks), str(steps)],
                              env=env(), capture_output=True, text=True)
    line = next((t for t in proc.stdout.splitlines() if t.startswith("RESULT")), None)
    if line is None or line.split()[3:] != [str(steps), str(ranks - 1)]:
        raise SystemExit(f"bench: the comparison of {ranks} ranks did not find the difference at "
                         f"step {steps}, rank {ranks - 1}:\n{proc.stdout[-1000:]}{proc.stderr[-2000:]}")
    return float(line.split()[1]), int(line.split()[2])


def fingerprint_rates(reps: int) -> list[tuple[int, float, float]]:
    import torch

    from repro_check.trace import fingerprint

    rows = []
    fingerprint.tensors([("warm-up", torch.randn(1000))])
    for n in (1_000_000, 10_000_000, 100_000_000):
        chunk = min(n, 4_000_000)
        params = [(f"p{i}", torch.randn(chunk)) for i in range(n // chunk)]
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            fingerprint.tensors(params)
            times.append(time.perf_counter() - start)
        t = statistics.median(times)
        rows.append((n, t, n * 4 / t / 1e9))
        del params
    return rows


def parent_peak_kib(steps: int) -> int:
    """Peak RSS of a repro-check parent process checking a run of ``steps`` steps."""
    code = (
        "import repro_check, tempfile, os\n"
        f"os.chdir({str(ROOT / 'fixtures')!r})\n"
        f"r = repro_check.check('tiny:main', args=['--steps', '{steps}'], trace_dir=tempfile.mkdtemp())\n"
        "assert r.exit_code == 0, r.error\n"
        "print([t for t in open('/proc/self/status') if t.startswith('VmHWM')][0].split()[1])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env(), capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"bench: memory probe failed:\n{out.stderr[-2000:]}")
    return int(out.stdout.strip().splitlines()[-1])



def spread(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--bare", default=None, help=argparse.SUPPRESS)
    p.add_argument("--stop-at", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--read-state", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--only", choices=["small", "mnist", "long"], action="append",
                   help="run only these parts (default: all)")
    p.add_argument("--json", default=None, help="also write the results here")
    ns, rest = p.parse_known_args()
    if ns.bare is not None:
        bare(ns.bare, ns.stop_at, [a for a in rest if a != "--"], ns.read_state)
        return 0
    parts = set(ns.only or ["small", "mnist", "long"])
    data = data_args()
    mnist_steps = 938 if data else 157
    workloads = [w for w in (Workload("small steps", SMALL, (), 3752,
                                      ("--epochs", "1", "--samples", "640"), 10),
                             Workload("MNIST", MNIST, tuple(data), mnist_steps))
                 if ("small" if w.target == SMALL else "mnist") in parts]
    print(f"bench: {ns.reps} repetitions, {os.cpu_count()} CPUs, one thread a run; MNIST: "
          f"{' '.join(data) or 'embedded subset'}", flush=True)
    rows: list[Row] = []
    width = 58
    if workloads:
        print(f"\n{'workload':<12} {'comparison':<{width}} {'A s':>7} {'B s':>7} {'A/B':>6} "
              f"{'us/step':>8} {'A spread':>12} {'B spread':>12} {'limit':>6}  ok", flush=True)
    for w in workloads:
        done = workload_rows(w, ns.reps)
        if w.target == MNIST:
            done += fail_fast_rows(w, ns.reps)
        for r in done:  # a workload's rows as soon as it is measured: a bench takes long
            per = r.per_step_us()
            shown = f"{r.limit:>6.2f}  {'yes' if r.ok else 'NO'}" if r.limit is not None else f"{'-':>6}  -"
            print(f"{r.workload:<12} {r.what:<{width}} {statistics.median(r.a):>7.2f} "
                  f"{statistics.median(r.b):>7.2f} {r.ratio:>6.3f} "
                  f"{(f'{per:.0f}' if per is not None else '-'):>8} {spread(r.a):>12} "
                  f"{spread(r.b):>12} {shown}", flush=True)
        rows += done
        if w.target == SMALL:
            print(f"\n{'capture, by part':<24} {'us/step':>8} {'spread':>12}  (timed inside "
                  "captured runs of the workload; 'step record' holds parameters, rng states "
                  "and most of emission)")
            for name, us in capture_parts(w, ns.reps):
                print(f"{name:<24} {statistics.median(us):>8.1f} "
                      f"{f'{min(us):.1f}-{max(us):.1f}':>12}", flush=True)
            print()
    if "long" in parts:
        small, large = parent_peak_kib(1_000), parent_peak_kib(20_000)
        memory_ok = large / small <= 1.10
        print(f"\n{'parent memory':<20} peak RSS, 20,000 steps / 1,000 steps: {large:,} KiB / "
              f"{small:,} KiB = {large / small:.3f} (limit 1.10: {'yes' if memory_ok else 'NO'})")
        if not memory_ok:
            rows.append(Row("parent", "peak RSS, 20,000 steps / 1,000 steps", [large], [small],
                            1.10))
        fp = fingerprint_rates(ns.reps)
        print(f"\n{'fingerprint':<20} {'parameters':>12} {'seconds':>9} {'GB/s':>7}  ok (>= 4 GB/s)")
        for n, t, rate in fp:
            print(f"{'params (float32)':<20} {n:>12,} {t:>9.4f} {rate:>7.2f}  "
                  f"{'yes' if rate >= 4 else 'NO'}")
            if rate < 4:
                rows.append(Row("fingerprint", f"{n:,} float32 parameters below 4 GB/s",
                                [4.0], [rate], 1.0))
    long_rows: list[tuple[int, float, int]] = []
    if "long" in parts:
        print(f"\n{'diff of two traces':<20} {'steps':>10} {'seconds':>8} {'peak MiB':>9}")
        for steps in (100_000, 1_000_000):
            took, peak = diff_cost(steps)
            long_rows.append((steps, took, peak))
            print(f"{'':<20} {steps:>10,} {took:>8.1f} {peak / 1024:>9.1f}", flush=True)
        if len(long_rows) == 2:
            (s1, t1, m1), (s2, t2, m2) = long_rows
            print(f"{'':<20} time x{t2 / t1:.1f} for x{s2 // s1} steps; memory x{m2 / m1:.2f}")
        print(f"\n{'torchrun comparison':<20} {'ranks':>6} {'steps':>7} {'seconds':>8} {'peak MiB':>9}")
        cells = [(8, 1_000), (64, 1_000), (64, 2_000)]
        cost = {}
        for ranks, steps in cells:
            cost[ranks, steps] = ranks_cost(ranks, steps)
            took, peak = cost[ranks, steps]
            print(f"{'':<20} {ranks:>6} {steps:>7,} {took:>8.1f} {peak / 1024:>9.1f}", flush=True)
        (t8, m8), (t64, m64), (t64l, m64l) = (cost[c] for c in cells)
        print(f"{'':<20} time x{t64 / t8:.1f} for x8 ranks, x{t64l / t64:.1f} for x2 steps; "
              f"memory x{m64 / m8:.2f} for x8 ranks, x{m64l / m64:.2f} for x2 steps")
    if ns.json:
        Path(ns.json).write_text(json.dumps({
            "rows": [{"workload": r.workload, "what": r.what, "a": r.a, "b": r.b,
                      "ratio": r.ratio, "per_step_us": r.per_step_us(), "limit": r.limit,
                      "ok": r.ok} for r in rows],
            "diff": [{"steps": s, "seconds": t, "peak_kib": m} for s, t, m in long_rows]}, indent=2))
    missed = [f"{r.workload}: {r.what}" for r in rows if not r.ok]
    if missed:
        print("\nmissed: " + "; ".join(missed))
        return 1
    print("\nall targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
