"""``make bench``'s own parts that can break unnoticed: its bare run (the baseline of every
ratio) seeds and runs a target as a captured run does. The bench itself is never timed here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_bench_bare_run_trains_and_stops_where_asked() -> None:
    bench = ROOT / "scripts" / "bench.py"
    target = f"{ROOT / 'scripts' / 'bench_small_steps.py'}:main"
    proc = subprocess.run([sys.executable, str(bench), "--bare", target, "--stop-at", "3", "--",
                           "--epochs", "1", "--samples", "640"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
