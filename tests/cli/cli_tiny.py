"""fixtures/tiny.py for the command-line tests, without torch.optim (its first optimizer loads
torch._dynamo, seconds a run): the same options, the parameters updated by hand (each backward
call is one step), and per-run failures so that one check can show several kinds at once.

    --steps N           steps (default 40)
    --diverge-at K      from step K on, add OS entropy to the loss: runs differ first at step K
    --nan-at K          the loss is NaN from step K on (in every run)
    --metric-shift-in-run R   only the final metric of run R is 0.05 higher
    --raise-at K        raise RuntimeError at step K
    --raise-in-run R    raise only in run R (REPRO_CHECK_RUN_INDEX)
    --kill-in-run R     run R sends itself SIGKILL at step 3
    --exit-at K         sys.exit at step K, with --exit-code C (default 0)
    --exit-in-run R     with --exit-at: only run R exits
"""

import argparse
import os
import signal
import sys

import torch
import torch.nn as nn


def entropy() -> float:
    return int.from_bytes(os.urandom(4), "little") / 2**32


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--diverge-at", type=int, default=None)
    p.add_argument("--nan-at", type=int, default=None)
    p.add_argument("--metric-shift-in-run", type=int, default=None)
    p.add_argument("--raise-at", type=int, default=None)
    p.add_argument("--raise-in-run", type=int, default=None)
    p.add_argument("--kill-in-run", type=int, default=None)
    p.add_argument("--exit-at", type=int, default=None)
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--exit-in-run", type=int, default=None)
    opts = p.parse_args(sys.argv[1:])
    this_run = os.environ.get("REPRO_CHECK_RUN_INDEX")

    x = torch.randn(256, 8)
    y = x @ torch.randn(8, 1) + 0.1 * torch.randn(256, 1)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    for step in range(1, opts.steps + 1):
        idx = torch.randint(0, 256, (32,))
        loss = nn.functional.mse_loss(model(x[idx]), y[idx])
        if opts.diverge_at is not None and step >= opts.diverge_at:
            loss = loss * (1 + 1e-3 * entropy())
        if opts.nan_at is not None and step >= opts.nan_at:
            loss = loss * float("nan")
        if opts.raise_at == step and (opts.raise_in_run is None
                                      or this_run == str(opts.raise_in_run)):
            raise RuntimeError(f"planted failure at step {step}")
        if step == 3 and this_run == str(opts.kill_in_run):
            os.kill(os.getpid(), signal.SIGKILL)
        model.zero_grad()
        loss.backward()
        with torch.no_grad():
            for param in model.parameters():
                param -= 0.05 * param.grad
        if opts.exit_at == step and (opts.exit_in_run is None
                                     or this_run == str(opts.exit_in_run)):
            sys.exit(opts.exit_code)
    with torch.no_grad():
        final = nn.functional.mse_loss(model(x), y).item()
    if this_run == str(opts.metric_shift_in_run):
        final += 0.05
    return {"mse": final}


if __name__ == "__main__":
    main()
