"""Logs and checkpoints written by the real libraries (TensorBoard's SummaryWriter, safetensors'
save_file), read by ``repro-check diff``: run with the frameworks installed (``make
test-frameworks``), skipped with the reason elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_logs import LOSSES, diff, one_line_error

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.frameworks


def write_events(folder: Path, losses: list[float]) -> Path:
    """A TensorBoard run: a loss and a learning rate a step, and add_scalars' subfolders."""
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (make "
                                              "test-frameworks installs it)")
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(folder))
    for step, loss in enumerate(losses):
        w.add_scalar("train/loss", loss, step)
        w.add_scalar("train/lr", 0.1, step)
        w.add_scalars("acc", {"train": 0.5 + step / 100, "val": 0.4}, step)
    w.close()
    return folder


def test_tensorboard_logs_written_by_summarywriter(tmp_path: Path) -> None:
    a = write_events(tmp_path / "a", LOSSES)
    b = write_events(tmp_path / "b", LOSSES)
    code, out, err, report = diff(tmp_path, str(a), str(b))
    assert code == 0, out + err
    assert report is not None and report["finished"]["format"] == "tensorboard"
    names = [s["name"] for s in report["finished"]["logs"]["scalars"]]
    assert "train/loss" in names and "train/lr" in names
    assert any(n.endswith("acc") and n.startswith("acc_val") for n in names), names
    changed = list(LOSSES)
    changed[2] += 1e-3  # above float32's resolution: the event file holds float32
    c = write_events(tmp_path / "c", changed)
    code, out, err, report = diff(tmp_path, str(a), str(c))
    assert code == 1, out + err
    assert report is not None
    assert report["first_divergent_step"] == 2 and report["divergent_signal"] == "train/loss"
    assert "First difference: step 2, scalar train/loss" in out
    # one event file each, given as files
    fa = next(p for p in a.iterdir() if "tfevents" in p.name)
    fc = next(p for p in c.iterdir() if "tfevents" in p.name)
    code, out, err, report = diff(tmp_path, str(fa), str(fc))
    assert code == 1 and report is not None and report["first_divergent_step"] == 2


def test_a_broken_event_file_is_refused_in_one_line(tmp_path: Path) -> None:
    a = write_events(tmp_path / "a", LOSSES)
    bad = tmp_path / "b"
    bad.mkdir()
    (bad / "events.out.tfevents.123.host").write_bytes(b"\x00" * 5)
    code, out, err, _ = diff(tmp_path, str(a), str(bad))
    # a truncated event file reads as empty: no scalar in it
    line = one_line_error(code, out, err)
    assert str(bad) in line


def test_safetensors_files_and_sharded_folders(tmp_path: Path) -> None:
    st = pytest.importorskip("safetensors.torch", reason="safetensors is not installed (make "
                                                          "test-frameworks installs it)")
    g = torch.Generator().manual_seed(0)
    tensors = {"embed.weight": torch.randn(8, 4, generator=g), "head.bias": torch.zeros(8)}
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
        st.save_file(tensors, str(tmp_path / side / "model-00001-of-00002.safetensors"))
        st.save_file({"lm.weight": torch.ones(3)},
                     str(tmp_path / side / "model-00002-of-00002.safetensors"))
    code, out, err, report = diff(tmp_path, str(tmp_path / "a"), str(tmp_path / "b"))
    assert code == 0, out + err
    assert report is not None
    assert report["finished"]["checkpoints"]["tensors_identical"] == 3
    changed = dict(tensors)
    w = changed["embed.weight"].clone()
    w[3, 3] = torch.nextafter(w[3, 3], torch.tensor(float("inf")))
    changed["embed.weight"] = w
    st.save_file(changed, str(tmp_path / "c.safetensors"))
    st.save_file(tensors, str(tmp_path / "d.safetensors"))
    code, out, err, report = diff(tmp_path, str(tmp_path / "d.safetensors"),
                                  str(tmp_path / "c.safetensors"))
    assert code == 1, out + err
    assert report is not None and report["divergent_signal"] == "embed.weight"
    (tmp_path / "e.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}")
    line = one_line_error(*diff(tmp_path, str(tmp_path / "d.safetensors"),
                                str(tmp_path / "e.safetensors"))[:3])
    assert "e.safetensors" in line and "cannot read it as a .safetensors file" in line


def lightning_log(folder: Path, lr: float) -> Path:
    """A Lightning run's CSVLogger folder: a tiny regression trained 6 steps, its loss logged
    every step, seeded the same way every time."""
    pl = pytest.importorskip("lightning.pytorch" if _has("lightning") else "pytorch_lightning",
                             reason="Lightning is not installed (make test-frameworks "
                                    "installs it)")
    from torch.utils.data import DataLoader, TensorDataset

    class Regression(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

        def training_step(self, batch: tuple[object, object], _: int) -> object:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> object:
            return torch.optim.SGD(self.parameters(), lr=lr)

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(48, 4), torch.randn(48, 1))
    logger = pl.loggers.CSVLogger(str(folder), name="run")
    trainer = pl.Trainer(max_steps=6, logger=logger, log_every_n_steps=1, accelerator="cpu",
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(Regression(), DataLoader(data, batch_size=8))
    return Path(logger.log_dir)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def test_lightning_csv_logs_written_by_csvlogger(tmp_path: Path) -> None:
    a = lightning_log(tmp_path / "a", lr=0.1)
    b = lightning_log(tmp_path / "b", lr=0.1)
    assert (a / "metrics.csv").exists()
    code, out, err, report = diff(tmp_path, str(a), str(b))
    assert code == 0, out + err
    assert report is not None and report["finished"]["format"] == "lightning"
    c = lightning_log(tmp_path / "c", lr=0.2)  # another learning rate: the loss moves at step 1
    code, out, err, report = diff(tmp_path, str(a / "metrics.csv"), str(c / "metrics.csv"))
    assert code == 1, out + err
    assert report is not None and report["divergent_signal"] == "train_loss"
    assert report["first_divergent_step"] == 1  # Lightning's step 0 trains on the same weights


def test_trainer_state_written_by_transformers(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers", reason="transformers is not installed "
                                                              "(make test-frameworks installs it)")

    def state(folder: Path, losses: list[float]) -> Path:
        folder.mkdir()
        log = [{"loss": loss, "learning_rate": 5e-5, "epoch": step / 10, "step": step}
               for step, loss in enumerate(losses, 1)]
        transformers.TrainerState(global_step=len(losses), log_history=log).save_to_json(
            str(folder / "trainer_state.json"))
        return folder / "trainer_state.json"

    a, b = state(tmp_path / "a", LOSSES), state(tmp_path / "b", LOSSES)
    code, out, err, report = diff(tmp_path, str(a), str(b))
    assert code == 0, out + err
    assert report is not None and report["finished"]["format"] == "trainer-state"
    changed = list(LOSSES)
    changed[3] += 1e-9
    c = state(tmp_path / "c", changed)
    code, out, err, report = diff(tmp_path, str(a), str(c))
    assert code == 1, out + err
    assert report is not None and report["first_divergent_step"] == 4
    assert report["divergent_signal"] == "loss"


def wandb_run(folder: Path, losses: list[float]) -> Path:
    """A W&B offline run folder (``wandb/offline-run-*``) with a loss and a learning rate
    logged a step, written by wandb itself."""
    wandb = pytest.importorskip("wandb", reason="wandb is not installed (make test-frameworks "
                                                "installs it)")
    folder.mkdir()
    run = wandb.init(mode="offline", project="p", dir=str(folder),
                     settings=wandb.Settings(silent=True, console="off"))
    for step, loss in enumerate(losses):
        run.log({"train/loss": loss, "lr": 0.1}, step=step)
    run.finish()
    (found,) = (folder / "wandb").glob("offline-run-*")
    return found


def test_wandb_offline_runs_written_by_wandb(tmp_path: Path) -> None:
    a = wandb_run(tmp_path / "a", LOSSES)
    b = wandb_run(tmp_path / "b", LOSSES)
    code, out, err, report = diff(tmp_path, str(a), str(b))
    assert code == 0, out + err
    assert report is not None and report["finished"]["format"] == "wandb"
    names = [s["name"] for s in report["finished"]["logs"]["scalars"]]
    # wandb's own _step, _runtime, _timestamp left out; by name within a step, as wandb writes
    # a step's keys in no fixed order
    assert names == ["lr", "train/loss"]
    changed = list(LOSSES)
    changed[3] += 1e-12
    c = wandb_run(tmp_path / "c", changed)
    file = next(c.glob("*.wandb"))
    code, out, err, report = diff(tmp_path, str(a), str(file))  # a folder and its run file
    assert code == 1, out + err
    assert report is not None and report["first_divergent_step"] == 3
    assert report["divergent_signal"] == "train/loss"
    broken = tmp_path / "broken.wandb"
    broken.write_bytes(file.read_bytes()[:7] + b"\x00\x00\x00\x00\xff\xff\x09garbage")
    line = one_line_error(*diff(tmp_path, str(file), str(broken))[:3])
    assert "broken.wandb: a W&B record at byte 7 is malformed" in line
