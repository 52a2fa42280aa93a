"""The bench's small-step workload: many optimizer steps of a few milliseconds each, as CPU CI
jobs train (small models, small batches), where a per-step cost of the capture shows.

The reference MLP (784-128-64-10, ReLU, LogSoftmax, NLLLoss, Adam lr 0.002, batch 64, shuffled)
on 60,000 random samples for ``--epochs`` epochs (4: 3,752 steps of about 2 ms on one thread).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main(argv: list[str] | None = None) -> float:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--samples", type=int, default=60_000)
    opts = p.parse_args(argv)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(opts.samples, 784, generator=g)
    y = torch.randint(0, 10, (opts.samples,), generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                          nn.Linear(64, 10), nn.LogSoftmax(dim=1))
    opt = torch.optim.Adam(model.parameters(), lr=0.002)
    loss_fn = nn.NLLLoss()
    loss = torch.zeros(())
    for _ in range(opts.epochs):
        for xb, yb in loader:
            opt.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
    return float(loss.detach())


if __name__ == "__main__":
    main()
