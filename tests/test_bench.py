"""``make bench``'s own parts that can break unnoticed: its bare run (the baseline of every
ratio) seeds and runs a target as a captured run does. The bench itself is never timed here."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("floor", [[], ["--read-state"]], ids=["bare", "reading every step"])
def test_the_bench_bare_run_trains_and_stops_where_asked(floor: list[str]) -> None:
    bench = ROOT / "scripts" / "bench.py"
    target = f"{ROOT / 'scripts' / 'bench_small_steps.py'}:main"
    proc = subprocess.run([sys.executable, str(bench), "--bare", target, "--stop-at", "3", *floor,
                           "--", "--epochs", "1", "--samples", "640"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_floor_reads_every_tensor_a_step_can_change_and_can_be_taken_out() -> None:
    """The floor row's run reads, each step, the batch, the loss, each gradient and optimizer
    state tensor before the step and each parameter after it; and takes it all out again."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    spec = importlib.util.spec_from_file_location("bench_under_test", ROOT / "scripts" / "bench.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclasses look their module up
    try:
        spec.loader.exec_module(bench)
    finally:
        del sys.modules[spec.name]
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(12, 4, generator=g), torch.randint(0, 3, (12,), generator=g))
    model = torch.nn.Linear(4, 3)  # two parameters
    opt = torch.optim.Adam(model.parameters())

    def train() -> None:
        for x, y in DataLoader(data, batch_size=4):  # three steps
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()

    undo = bench.read_every_step()
    try:
        train()
    finally:
        reads = undo()
    # a step: batch 2, loss 1, gradients 2, parameters 2; Adam's state (step, two moments for
    # each parameter) exists before the second and third steps only
    assert reads == 3 * (2 + 1 + 2 + 2) + 2 * 6
    train()
    assert undo() == reads  # nothing is read once taken out


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
