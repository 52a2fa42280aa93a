"""``make bench``'s own parts that can break unnoticed: its bare run (the baseline of every
ratio) seeds and runs a target as a captured run does. The bench itself is never timed here."""

from __future__ import annotations

import json
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


def test_the_capture_times_its_parts_when_asked(tmp_path: Path) -> None:
    """``make bench``'s "capture, by part": a captured run given REPRO_CHECK_CAPTURE_COSTS
    writes each part's calls and seconds as it ends: the per-step parts once a step."""
    from repro_check.child.observe.costs import COSTS_VAR, PARTS

    from .conftest import cli_env, run_cli

    out = tmp_path / "costs.json"
    target = f"{ROOT / 'scripts' / 'bench_small_steps.py'}:main"
    res = run_cli("record", target, "--seed", "1", "--threads", "1", "-o",
                  str(tmp_path / "golden.json"), "--", "--epochs", "1", "--samples", "640",
                  tmp=tmp_path, env=cli_env(**{COSTS_VAR: str(out)}))
    assert res.code == 0, res.stdout + res.stderr
    data = json.loads(out.read_text())
    assert data["steps"] == 10
    calls = {name: part["calls"] for name, part in data["parts"].items()}
    assert set(calls) == {p.name for p in PARTS}
    for once_a_step in ("batch", "backward hook", "gradients", "optimizer state and lr",
                        "step record", "parameters"):
        assert calls[once_a_step] == 10, calls
    assert calls["rng states"] >= 10 and calls["emission"] > 10, calls
    assert all(part["seconds"] > 0 for part in data["parts"].values()), data
