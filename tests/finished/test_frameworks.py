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
