"""The reference workload: the MNIST MLP of the PyTorch reproducibility write-ups.

784-128-64-10 with ReLU and LogSoftmax, NLLLoss, Adam lr 0.002, batch 64, ToTensor +
Normalize((0.5,), (0.5,)), shuffled, one epoch; returns the test accuracy. Data, first found:
``--data DIR`` (gzip or plain IDX files, also in torchvision's ``DIR/MNIST/raw`` layout), the
folder named by ``REPRO_CHECK_MNIST``, else the embedded subset (the first 10,000 training and
2,000 test images of the full set), which makes it run offline. ``--download`` lets torchvision
fetch the full set into ``--data DIR`` when it is not there.

Run it as ``repro-check repro_check.workloads.mnist:main --seed 123 [-- --data DIR]``.
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset

EMBEDDED = Path(__file__).resolve().parent.parent / "data" / "mnist"
FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (gzip or plain) as a numpy array."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path} is not an unsigned-byte IDX file")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def find_file(folder: Path, stem: str) -> Path | None:
    for base in (folder, folder / "MNIST" / "raw", folder / "raw"):
        for name in (stem + ".gz", stem):
            if (base / name).is_file():
                return base / name
    return None


def data_folder(requested: str | None) -> Path:
    """The folder to load from; a named folder without the files is an error, not a fallback."""
    for folder in (requested, os.environ.get("REPRO_CHECK_MNIST")):
        if folder:
            path = Path(folder)
            if all(find_file(path, stem) for pair in FILES.values() for stem in pair):
                return path
            raise SystemExit(
                f"mnist: no MNIST IDX files (train-images-idx3-ubyte[.gz], ...) in {folder}; "
                "pass --download to fetch them, or leave --data and REPRO_CHECK_MNIST unset "
                "to use the embedded subset"
            )
    return EMBEDDED


class IdxMNIST(Dataset):
    """MNIST from IDX arrays, yielding what torchvision's ``datasets.MNIST`` yields."""

    def __init__(self, folder: Path, split: str, transform: Callable[[Any], Any] | None = None) -> None:
        images, labels = FILES[split]
        img_path, lbl_path = find_file(folder, images), find_file(folder, labels)
        assert img_path is not None and lbl_path is not None
        self.data = torch.from_numpy(read_idx(img_path).copy())
        self.targets = torch.from_numpy(read_idx(lbl_path).astype(np.int64))
        self.transform = transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int):
        from PIL import Image

        img = Image.fromarray(self.data[i].numpy(), mode="L")
        if self.transform is not None:
            img = self.transform(img)
        return img, int(self.targets[i])


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.main = nn.Sequential(
            nn.Linear(784, 128), nn.ReLU(),
            nn.Linear(128, 64), nn.ReLU(),
            nn.Linear(64, 10), nn.LogSoftmax(dim=1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.main(x)


def datasets(folder: Path, download: bool, root: str | None):
    from torchvision import transforms

    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5,), (0.5,))])
    if download and root:
        from torchvision import datasets as tv

        return (tv.MNIST(root, train=True, download=True, transform=transform),
                tv.MNIST(root, train=False, download=True, transform=transform))
    return IdxMNIST(folder, "train", transform), IdxMNIST(folder, "test", transform)


def main() -> dict[str, float]:
    parser = argparse.ArgumentParser(prog="mnist", description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help="folder with the MNIST IDX files")
    parser.add_argument("--download", action="store_true", help="let torchvision fetch into --data")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.002)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers")
    parser.add_argument("--perturb-at", type=int, default=None, metavar="K",
                        help="from step K on, scale the loss by OS entropy: a planted divergence")
    opts = parser.parse_args(sys.argv[1:])

    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    folder = EMBEDDED if opts.download else data_folder(opts.data)
    train_set, test_set = datasets(folder, opts.download, opts.data)
    train_loader = DataLoader(train_set, batch_size=opts.batch_size, shuffle=True,
                              num_workers=opts.workers)
    test_loader = DataLoader(test_set, batch_size=opts.batch_size, shuffle=False)
    print(f"device: {device}, training images: {len(train_set)}, test images: {len(test_set)}")

    model = Net().to(device)
    optimizer = optim.Adam(model.parameters(), lr=opts.lr)
    loss_function = nn.NLLLoss()
    for epoch in range(1, opts.epochs + 1):
        model.train()
        for step, (inputs, labels) in enumerate(train_loader, 1):
            inputs, labels = inputs.to(device), labels.to(device)
            optimizer.zero_grad()
            loss = loss_function(model(inputs.view(inputs.shape[0], -1)), labels)
            if opts.perturb_at is not None and step >= opts.perturb_at:
                noise = int.from_bytes(os.urandom(2), "little")  # repro-check: ignore[RC111]
                loss = loss * (1 + noise * 1e-9)
            loss.backward()
            optimizer.step()
            if step % 100 == 0 or step == len(train_loader):
                print(f"[{epoch}/{opts.epochs}, {step}/{len(train_loader)}] loss: {loss.item():.8}")

    model.eval()
    correct = total = 0
    with torch.no_grad():
        for inputs, labels in test_loader:
            inputs, labels = inputs.to(device), labels.to(device)
            predicted = model(inputs.view(inputs.shape[0], -1)).argmax(dim=1)
            total += labels.size(0)
            correct += int((predicted == labels).sum())
    accuracy = correct / total
    print(f"accuracy: {accuracy}")
    return {"accuracy": accuracy}


if __name__ == "__main__":
    main()
