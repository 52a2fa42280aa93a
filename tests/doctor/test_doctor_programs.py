"""repro-check doctor on ordinary training scripts: what depends on the whole program (RC101 only
while torch has no fixed seed, RC114 for training that never seeds torch, RC115 for a seed drawn
from an unseeded stream), asserted by code and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from repro_check.doctor import checkup as doctor

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "fixtures" / "training"


def line_of(path: Path, text: str) -> int:
    """The line of the first occurrence of ``text`` in ``path``."""
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def findings(report: doctor.DoctorReport) -> list[tuple[str, str, int]]:
    return [(Path(f.file).name, f.code, f.line) for f in report.findings]


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """Run from an empty folder, so no pyproject.toml of ours is picked up."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("name", ["mnist_seeded.py", "lightning_seeded.py", "hf_seeded.py"])
def test_seeded_scripts_with_workers_are_clean(name, elsewhere):
    """torch.manual_seed(args.seed), L.seed_everything(42), set_seed(training_args.seed): the
    DataLoader workers seed random, torch and numpy from the seeded torch generator."""
    report = doctor.doctor(str(SCRIPTS / name), env=False)
    assert report.findings == [] and report.exit_code == 0


def test_unseeded_script_with_workers_never_seeds_torch(elsewhere):
    path = SCRIPTS / "cifar_unseeded.py"
    report = doctor.doctor(str(path), env=False)
    assert findings(report) == [
        ("cifar_unseeded.py", "RC101", line_of(path, "trainloader = torch.utils.data.DataLoader(")),
        ("cifar_unseeded.py", "RC114", line_of(path, "optimizer = optim.SGD(")),
    ]
    never = report.findings[1]
    assert never.message == ("training (optim.SGD(net.parameters(), lr=0.001,...) never seeds "
                             "torch: model init and shuffling differ between runs")
    assert report.exit_code == 1


def test_gpt_script_seeding_from_random_randint(elsewhere):
    path = SCRIPTS / "gpt_random_seed.py"
    report = doctor.doctor(str(path), env=False)
    drawn = line_of(path, "seed = random.randint(1, 10000)")
    # the embeddings on CUDA, deterministic algorithms never turned on: one finding for the program
    assert findings(report) == [
        ("gpt_random_seed.py", "RC123", line_of(path, "self.tok = nn.Embedding(")),
        ("gpt_random_seed.py", "RC115", line_of(path, "    set_seed(seed)"))]
    assert report.findings[1].message == (
        f"set_seed(seed) seeds from random.randint(1, 10000) (line {drawn}), drawn from "
        "Python's random, which nothing seeds with a fixed value")


def write(folder: Path, **files: str) -> None:
    """Project files, named without their ``.py``."""
    for name, text in files.items():
        (folder / f"{name}.py").write_text(text)


def test_seeding_in_the_importing_script_reaches_a_loader_in_a_library(elsewhere):
    write(elsewhere,
          data="from torch.utils.data import DataLoader\n\n\n"
               "def make_loader(ds):\n    return DataLoader(ds, batch_size=8, num_workers=4)\n",
          train="import torch\nfrom data import make_loader\n\n\ndef main():\n"
                "    torch.manual_seed(0)\n    model = torch.nn.Linear(2, 1)\n"
                "    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                "    for x in make_loader(torch.randn(32, 2)):\n"
                "        opt.zero_grad()\n        model(x).sum().backward()\n        opt.step()\n")
    assert doctor.doctor("train.py", env=False).findings == []
    alone = doctor.doctor("data.py", env=False)  # a library read alone: nothing seeds torch
    assert findings(alone) == [("data.py", "RC101", 5)]


def test_training_in_an_imported_engine_without_seeding_is_reported_there(elsewhere):
    write(elsewhere,
          engine="def train_one_epoch(model, opt, batches):\n    for x in batches:\n"
                 "        opt.zero_grad()\n        model(x).sum().backward()\n        opt.step()\n",
          main="import torch\nfrom engine import train_one_epoch\n\n"
               "model = torch.nn.Linear(2, 1)\ntrain_one_epoch(model, None, [torch.randn(4, 2)])\n")
    assert findings(doctor.doctor("main.py", env=False)) == [("engine.py", "RC114", 4)]


def test_a_library_without_training_gets_no_never_seeds_finding(elsewhere):
    write(elsewhere, models="import torch\n\n\nclass Net(torch.nn.Module):\n"
                            "    def __init__(self):\n        super().__init__()\n"
                            "        self.fc = torch.nn.Linear(2, 1)\n")
    assert doctor.doctor("models.py", env=False).findings == []


def test_never_seeds_is_silenced_for_a_project_run_only_through_repro_check(elsewhere):
    (elsewhere / "pyproject.toml").write_text('[tool.repro-check.doctor]\nignore = ["RC114"]\n')
    report = doctor.doctor(str(SCRIPTS / "cifar_unseeded.py"), env=False)
    assert [f.code for f in report.findings] == ["RC101"]
    assert [(f.code, by) for f, by in report.silenced] == [("RC114", "config")]
