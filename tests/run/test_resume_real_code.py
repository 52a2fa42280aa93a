"""``repro-check resume`` on real code, unmodified (slow tier): pytorch/examples'
``imagenet/main.py --resume`` on a tiny ImageFolder, and nanoGPT's ``init_from=resume``
(which finds its own checkpoint in its out folder) on a tiny made-up token set. Each test is one
resume (three runs) and asserts what the checkpoint holds and the state it leaves out.

The scripts are copies kept with their licenses in ``fixtures/thirdparty`` (see its README);
without them, or without torchvision for the ImageNet script, the tests skip and say why."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, run_cli

pytestmark = pytest.mark.slow

THIRDPARTY = FIXTURES / "thirdparty"
IMAGENET = THIRDPARTY / "imagenet" / "main.py"
NANOGPT = THIRDPARTY / "nanogpt"


def needs(*paths: Path) -> None:
    missing = [str(p.relative_to(FIXTURES)) for p in paths if not p.is_file()]
    if missing:
        pytest.skip(f"the third-party source is not in fixtures/: {', '.join(missing)}")


def test_pytorch_examples_imagenet_resume_leaves_out_the_torch_rng(tmp_path: Path) -> None:
    """imagenet/main.py saves checkpoint.pth.tar after each epoch: epoch, arch, state_dict,
    best_acc1, optimizer and scheduler, and no RNG state. Its loader shuffles from torch's global
    RNG and RandomResizedCrop draws from it: the resumed epoch starts from another torch RNG
    state (named first); the weights, the optimizer and the learning rate going in are
    restored (not named)."""
    needs(IMAGENET, IMAGENET.parent / "LICENSE")
    pytest.importorskip("torchvision", reason="imagenet/main.py needs torchvision")
    np = pytest.importorskip("numpy")
    image = pytest.importorskip("PIL.Image", reason="ImageFolder reads images with Pillow")
    rng = np.random.default_rng(0)
    for split, per_class in (("train", 2), ("val", 1)):
        for label in ("a", "b"):
            folder = tmp_path / "data" / split / label
            folder.mkdir(parents=True)
            for i in range(per_class):
                pixels = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
                image.fromarray(pixels).save(folder / f"{i}.png")
    # 4 images, batches of 2: 2 steps an epoch, a checkpoint after each epoch, 3 epochs
    r = run_cli("resume", str(IMAGENET), "--at", "2", "--resume-args", "--resume {checkpoint}",
                "--", "data", "-a", "mobilenet_v3_small", "-j", "0", "-b", "2", "--epochs", "3",
                "--lr", "0.01", "-p", "1", tmp=tmp_path / "out", cwd=tmp_path)
    assert r.code == 1, r.stdout + r.stderr
    rep = r.report
    assert rep is not None and rep["resumes_exactly"] is False
    ck = rep["checkpoint"]
    assert ck["kind"] == "torch.save" and ck["path"] == str(tmp_path / "checkpoint.pth.tar")
    assert rep["checkpoint_step"] == 2 and rep["steps"] == [6, 2, 4]
    assert ck["keys"] == ["epoch", "arch", "state_dict", "best_acc1", "optimizer", "scheduler"]
    assert ck["kinds"]["state_dict"] == "model" and ck["kinds"]["optimizer"] == "optimizer"
    assert ck["kinds"]["scheduler"] == "scheduler" and ck["rng"] == []
    assert ck["summary"].endswith("; no RNG state")
    assert rep["first_divergent_step"] == 3 and rep["not_restored"][0] == "rng.torch"
    assert not {"params", "optimizer", "lr", "steps"} & set(rep["not_restored"])


def test_nanogpt_init_from_resume_leaves_out_the_torch_rng(tmp_path: Path) -> None:
    """nanoGPT's ckpt.pt holds model, optimizer, model_args, iter_num, best_val_loss and config,
    and no RNG state, while get_batch draws its batches with torch.randint: the resumed run's
    torch RNG differs going into its first step. It finds its own checkpoint (out/ckpt.pt), so
    --resume-args has no placeholder: the copy is put back there before the resumed run."""
    needs(*(NANOGPT / name for name in ("train.py", "model.py", "configurator.py", "LICENSE")))
    np = pytest.importorskip("numpy")
    for name in ("train.py", "model.py", "configurator.py"):  # it reads configurator.py from cwd
        shutil.copy(NANOGPT / name, tmp_path / name)
    data = tmp_path / "data" / "tiny"
    data.mkdir(parents=True)
    rng = np.random.default_rng(0)
    rng.integers(0, 64, 2000).astype(np.uint16).tofile(data / "train.bin")
    rng.integers(0, 64, 400).astype(np.uint16).tofile(data / "val.bin")
    (data / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": 64}))
    # iterations 0..8 (9 optimizer steps), an evaluation and a checkpoint every 4 iterations
    config = ["--device=cpu", "--compile=False", "--dataset=tiny", "--dtype=float32",
              "--batch_size=2", "--block_size=16", "--n_layer=1", "--n_head=2", "--n_embd=16",
              "--max_iters=8", "--eval_interval=4", "--eval_iters=2", "--warmup_iters=2",
              "--lr_decay_iters=8", "--gradient_accumulation_steps=1", "--out_dir=out"]
    r = run_cli("resume", "train.py", "--at", "3", "--resume-args=--init_from=resume", "--",
                *config, tmp=tmp_path / "report", cwd=tmp_path)
    assert r.code == 1, r.stdout + r.stderr
    rep = r.report
    assert rep is not None and rep["resumes_exactly"] is False
    ck = rep["checkpoint"]
    assert ck["kind"] == "torch.save" and ck["path"] == str(tmp_path / "out" / "ckpt.pt")
    assert rep["checkpoint_step"] == 4 and rep["steps"] == [9, 4, 5]
    assert ck["keys"] == ["model", "optimizer", "model_args", "iter_num", "best_val_loss",
                          "config"]
    assert ck["kinds"]["model"] == "model" and ck["kinds"]["optimizer"] == "optimizer"
    assert ck["summary"].endswith("no scheduler, no RNG state")
    assert rep["first_divergent_step"] == 5 and rep["not_restored"] == ["rng.torch"]
    assert "--resume-args=--init_from=resume" in rep["replay"]
