"""``make bench``: what repro-check costs, against bare training runs, side by side.

Every comparison runs its two sides alternately in one invocation, ``--reps`` times (default 3),
and prints the medians and their ratio next to the target. Exits 1 when a target is missed.

Workload: the reference MNIST MLP (``repro_check.workloads.mnist:main``) on the full set from
``$REPRO_CHECK_MNIST`` or a ``shared/data/mnist`` folder beside the checkout (the embedded
subset when neither exists).
A "bare" run is the same target under the same seeding, in a fresh interpreter, without capture.

Two rows explain others and have no limit of their own: "in the run" compares
the time from a run's interpreter start to its target's return (no parent, no interpreter exit),
so the capture's own cost is seen apart from how the processes start and end; "its floor" is a
bare run that leaves right after step 37, the earliest anything could report a divergence there.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = "repro_check.workloads.mnist:main"


def data_args() -> list[str]:
    for folder in (os.environ.get("REPRO_CHECK_MNIST"), str(ROOT.parent / "shared" / "data" / "mnist")):
        if folder and Path(folder).is_dir():
            return ["--data", folder]
    return []


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), e.get("PYTHONPATH")) if p)
    return e


def run(argv: Sequence[str], ok: Sequence[int] = (0,)) -> tuple[float, str]:
    """Wall seconds of a command, and its stdout."""
    start = time.perf_counter()
    proc = subprocess.run(list(argv), env=env(), cwd=tempfile.gettempdir(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - start
    if proc.returncode not in ok:
        raise SystemExit(f"bench: {' '.join(argv)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return took, proc.stdout


def timed(argv: Sequence[str], ok: Sequence[int] = (0,)) -> float:
    return run(argv, ok)[0]


def in_run_seconds(argv: Sequence[str]) -> float:
    """Seconds from the run's interpreter start to the target's return, as the run itself saw
    them: a check's from its trace (``info.seconds``), a bare run's from what it prints."""
    took, out = run(argv)
    if "--bare" in argv:
        return float(json.loads(out.strip().splitlines()[-1])["seconds"])
    trace_dir = Path(argv[argv.index("--trace-dir") + 1])
    for line in next(trace_dir.glob("*/run-1.jsonl")).read_text().splitlines():
        record = json.loads(line)
        if "seconds" in record.get("info", {}):
            return float(record["info"]["seconds"])
    raise SystemExit(f"bench: no run time in the trace of {' '.join(argv)}")


def check_cmd(*extra: str, target_args: Sequence[str] = ()) -> list[str]:
    trace_dir = tempfile.mkdtemp(prefix="repro-check-bench-")
    return [sys.executable, "-m", "repro_check", TARGET, "--seed", "123", "--quiet",
            "--trace-dir", trace_dir, *extra, "--", *data_args(), *target_args]


def record_cmd() -> list[str]:
    """One captured run (a check needs two): ``record`` writes it as a golden too."""
    trace_dir = tempfile.mkdtemp(prefix="repro-check-bench-")
    return [sys.executable, "-m", "repro_check", "record", TARGET, "--seed", "123", "--quiet",
            "--trace-dir", trace_dir, "-o", os.path.join(trace_dir, "golden.json"), "--",
            *data_args()]


def bare_cmd(threads: int = 1, target_args: Sequence[str] = (), stop_at: int = 0) -> list[str]:
    return [sys.executable, __file__, "--bare", str(threads), "--stop-at", str(stop_at), "--",
            *data_args(), *target_args]


def bare(threads: int, stop_at: int, args: list[str]) -> None:
    """One seeded run of the target without capture (re-executes itself with the seeded env).
    Prints how long the run took, from interpreter start to the target's return. ``stop_at``:
    leave at once after that optimizer step (the earliest a divergence there can be seen)."""
    started = time.time()
    from repro_check.child import seeding
    from repro_check import targets

    if os.environ.get("_BENCH_BARE") != "1":
        e = seeding.child_environment(env(), 123, seeding.COMPONENTS, threads)
        e["_BENCH_BARE"] = "1"
        os.execve(sys.executable, [sys.executable, __file__, "--bare", str(threads), "--stop-at",
                                   str(stop_at), "--", *args], e)
    seeding.apply(123, seeding.COMPONENTS, threads)
    target = targets.resolve(targets.parse(TARGET), args)
    if stop_at:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        steps = [0]

        def leave(*_: object) -> None:
            steps[0] += 1
            if steps[0] == stop_at:
                os._exit(0)

        register_optimizer_step_post_hook(leave)
    import contextlib

    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        target()
    print(json.dumps({"seconds": time.time() - started}), flush=True)


def side_by_side(reps: int, a: Callable[[], float], b: Callable[[], float]) -> tuple[float, float]:
    ta, tb = [], []
    for _ in range(reps):
        ta.append(a())
        tb.append(b())
    return statistics.median(ta), statistics.median(tb)


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
        "print([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env(), capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"bench: memory probe failed:\n{out.stderr[-2000:]}")
    return int(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--bare", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--stop-at", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--json", default=None, help="also write the results here")
    ns, rest = p.parse_known_args()
    if ns.bare is not None:
        bare(ns.bare, ns.stop_at, [a for a in rest if a != "--"])
        return 0
    rows: list[tuple[str, str, float, float, float, float | None, bool]] = []

    def add(name: str, what: str, a: float, b: float, limit: float | None) -> None:
        rows.append((name, what, a, b, a / b, limit, limit is None or a / b <= limit))

    data = " ".join(data_args()) or "embedded subset"
    print(f"bench: {TARGET} ({data}), {ns.reps} repetitions, {os.cpu_count()} CPUs", flush=True)
    a, b = side_by_side(ns.reps, lambda: timed(record_cmd()), lambda: timed(bare_cmd()))
    add("capture overhead", "record (1 run) / bare run", a, b, 1.05)
    a, b = side_by_side(ns.reps, lambda: in_run_seconds(record_cmd()),
                        lambda: in_run_seconds(bare_cmd()))
    add("  in the run", "start to target's return: check / bare", a, b, None)
    a, b = side_by_side(ns.reps, lambda: timed(check_cmd()),
                        lambda: timed(bare_cmd()) + timed(bare_cmd()))
    add("two-run check", "check (2 runs) / 2 bare runs in sequence", a, b, 0.65)
    planted = ["--perturb-at", "37"]
    a, b = side_by_side(ns.reps, lambda: timed(check_cmd("--fail-fast", target_args=planted), ok=(1,)),
                        lambda: timed(check_cmd(target_args=planted), ok=(1,)))
    add("fail-fast", "divergence at step 37: --fail-fast / full check", a, b, 0.15)
    full = b
    floor = statistics.median(timed(bare_cmd(stop_at=37)) for _ in range(ns.reps))
    add("  its floor", "bare run to step 37 / full check", floor, full, None)
    small, large = parent_peak_kib(1_000), parent_peak_kib(20_000)
    rows.append(("parent memory", "peak RSS, 20,000 steps / 1,000 steps", large, small,
                 large / small, 1.10, large / small <= 1.10))

    width = max(len(r[1]) for r in rows)
    print(f"\n{'target':<18} {'comparison':<{width}} {'A':>9} {'B':>9} {'A/B':>6} {'limit':>6}  ok")
    for name, what, x, y, ratio, limit, ok in rows:
        unit = "s" if name != "parent memory" else "KiB"
        shown = f"{limit:>6.2f}  {'yes' if ok else 'NO'}" if limit is not None else f"{'-':>6}  -"
        print(f"{name:<18} {what:<{width}} {x:>8.2f}{unit[0]} {y:>8.2f}{unit[0]} {ratio:>6.3f} "
              f"{shown}")
    fp = fingerprint_rates(ns.reps)
    print(f"\n{'fingerprint':<18} {'parameters':>12} {'seconds':>9} {'GB/s':>7}  ok (>= 4 GB/s)")
    fp_ok = True
    for n, t, rate in fp:
        fp_ok &= rate >= 4.0
        print(f"{'params (float32)':<18} {n:>12,} {t:>9.4f} {rate:>7.2f}  {'yes' if rate >= 4 else 'NO'}")
    if ns.json:
        Path(ns.json).write_text(json.dumps({"rows": rows, "fingerprints": fp}, indent=2))
    missed = [r[0] for r in rows if not r[6]] + ([] if fp_ok else ["fingerprint rate"])
    if missed:
        print(f"\nmissed: {', '.join(missed)}")
        return 1
    print("\nall targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
