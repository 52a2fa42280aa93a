"""``repro-check resume`` end to end on fixtures/resume/train.py: an exact resume, a checkpoint
missing state, a planted 1-ulp change, a script that never saves, a reference that is not
reproducible, resume arguments the script rejects. Each test is one resume (three runs at most)
serving all its assertions. Where the optimizer is not what is tested, the script updates by hand
(--no-optim: no torch.optim, whose first optimizer costs each run a torch._dynamo import)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli

TARGET = "resume/train.py:main"


def resume(tmp: Path, at: int, resume_args: str, *script: str) -> object:
    return run_cli("resume", TARGET, "--at", str(at), "--resume-args", resume_args, "--",
                   "--out", str(tmp / "out"), *script, tmp=tmp)


def test_exact_resume_with_shuffling_from_the_restored_global_rng(tmp_path: Path) -> None:
    """The script saves and restores torch's global RNG state and shuffles from it: the resume
    is exact (a DataLoader generator of repro-check's would restart the order and look like a
    checkpoint that left the data order out). Its checkpoint is three files written one after
    the other (model.pt, opt.pt, meta.pt): all three are the checkpoint, copied side by side,
    described together and put back before the resumed run (the reference wrote all three again
    after step 8: a resume that read its opt.pt or meta.pt would start from step 12's state)."""
    r = resume(tmp_path, 5, "--split --resume {checkpoint}", "--loader", "global",
               "--save-every", "4", "--split")
    assert r.code == 0, r.stdout + r.stderr
    rep = r.report
    assert rep is not None
    assert rep["resumes_exactly"] is True and rep["reproducible"] is True
    assert rep["checkpoint_step"] == 8  # the first save at or after step 5
    assert rep["steps"] == [12, 8, 4]
    assert rep["not_restored"] == [] and rep["first_divergent_step"] is None
    ck = rep["checkpoint"]
    out = tmp_path / "out"
    assert ck["kind"] == "torch.save" and ck["path"] == str(out / "model.pt")
    assert Path(ck["copy"]).is_file() and Path(ck["copy"]).is_relative_to(rep["trace_dir"])
    assert [f["path"] for f in ck["files"]] == [str(out / n) for n in
                                                ("model.pt", "opt.pt", "meta.pt")]
    copies = [Path(f["copy"]) for f in ck["files"]]
    assert all(c.is_file() and c.parent == copies[0].parent for c in copies), copies
    assert ck["kinds"] == {"model.pt": "model", "opt": "optimizer", "sched": "scheduler",
                           "step": "other", "rng": "rng"}
    assert ck["rng"] == ["python", "numpy", "torch"]
    assert "with " + str(out / "opt.pt") in r.stdout.replace("\n", "")
    assert "RESUMES EXACTLY" in r.stdout and "cost: 3 runs" in r.stdout
    assert "repro-check resume resume/train.py:main" in rep["replay"]
    # the interrupted run ended as its save returned: it recorded no step after it, and it
    # measured under a second from the save's return to its end (the copy)
    assert rep["run_results"][1]["status"] == "stopped"
    assert 0 <= ck["stopped_after_s"] < 1.0, ck


def test_checkpoint_missing_optimizer_scheduler_rng_data_position_and_weights_read_not_loaded(
        tmp_path: Path) -> None:
    """Every piece of state left out at once, each named: a checkpoint without optimizer,
    scheduler or RNG state, a resume that restarts its epoch's data order, and that reads the
    checkpoint but never loads the weights (named first: "params")."""
    r = resume(tmp_path, 3, "--resume {checkpoint} --epoch-restart --no-weights",
               "--no-rng", "--no-opt", "--no-sched")
    assert r.code == 1, r.stdout + r.stderr
    rep = r.report
    assert rep is not None and rep["resumes_exactly"] is False
    assert rep["checkpoint_step"] == 4 and rep["first_divergent_step"] == 5
    assert rep["not_restored"] == ["params", "optimizer", "lr", "rng.python", "rng.numpy",
                                   "rng.torch", "data_order"]
    detail = {d["state"]: d for d in rep["not_restored_detail"]}
    assert "step 5 got step 1's batch" in detail["data_order"]["detail"]
    assert "torch.set_rng_state" in detail["rng.torch"]["fix"]
    assert rep["checkpoint"]["summary"].endswith(
        "no optimizer state, no scheduler, no RNG state")
    assert "Not restored:" in r.stdout and "RESUME DIFFERS" in r.stdout


def test_one_ulp_in_one_weight_of_the_checkpoint_copy_is_found(tmp_path: Path) -> None:
    r = resume(tmp_path, 4, "--resume {checkpoint} --plant-ulp")
    assert r.code == 1, r.stdout + r.stderr
    assert r.report is not None and r.report["resumes_exactly"] is False
    assert r.report["not_restored"] == ["params"]


def test_a_script_with_no_save_repro_check_sees_is_one_line_and_exit_3(tmp_path: Path) -> None:
    """A script that writes its checkpoint with plain pickle: no save repro-check watches (to
    repro-check the same as a script that never saves), so without --checkpoint there is nothing
    to resume from: exit 3, saying so in one line and naming --checkpoint."""
    r = resume(tmp_path, 4, "--resume {checkpoint}", "--pickle", "--no-optim")
    assert r.code == 3, r.stdout + r.stderr
    assert r.report is not None
    assert "wrote no checkpoint at or after step 4 in 12 steps" in r.report["error"]
    assert "saved none that repro-check could see" in r.report["error"]
    assert "--checkpoint" in r.report["error"]
    assert len(r.report["run_results"]) == 2  # no resumed run
    assert "Traceback" not in r.stderr


def test_a_reference_that_is_not_reproducible_blames_no_checkpoint(tmp_path: Path) -> None:
    r = resume(tmp_path, 4, "--resume {checkpoint}", "--noise", "--no-optim")
    assert r.code == 1
    rep = r.report
    assert rep is not None and rep["reference_reproducible"] is False
    assert rep["not_restored"] == [] and rep["first_divergent_step"] == 1
    assert len(rep["run_results"]) == 2
    assert "REFERENCE NOT REPRODUCIBLE" in r.stdout


def test_resume_args_the_script_rejects_name_the_resumed_run(tmp_path: Path) -> None:
    r = resume(tmp_path, 4, "--resume {checkpoint} --bogus", "--no-optim")
    assert r.code == 3
    assert r.report is not None and "the resumed run (run 3)" in r.report["error"]
    assert "--bogus" in r.report["error"]
    assert "Traceback" not in r.stderr


@pytest.mark.frameworks
def test_lightning_fit_from_ckpt_path_names_the_rng_state_it_does_not_save(
        tmp_path: Path) -> None:
    """Lightning's checkpoint holds no RNG state: the resumed epoch shuffles from torch's global
    RNG as seed_everything left it, so its data order restarts."""
    import pytest

    pytest.importorskip("pytorch_lightning", reason="pytorch_lightning is not installed (make test-frameworks installs it and runs this test)")
    r = run_cli("resume", "resume/lightning_resume.py", "--at", "4", "--resume-args",
                "--resume {checkpoint}", "--", "--out", str(tmp_path / "out"), tmp=tmp_path)
    assert r.code == 1, r.stdout + r.stderr
    rep = r.report
    assert rep is not None and rep["checkpoint"]["kind"] == "lightning"
    assert rep["checkpoint_step"] == 4 and rep["checkpoint"]["summary"].endswith("no RNG state")
    assert {"optimizer_states", "lr_schedulers", "state_dict"} <= set(rep["checkpoint"]["keys"])
    assert rep["not_restored"] == ["rng.torch", "data_order"]
    assert "step 5 got step 1's batch" in rep["not_restored_detail"][1]["detail"]


@pytest.mark.frameworks
def test_hf_trainer_resumes_every_step_but_not_its_train_loss_average(tmp_path: Path) -> None:
    """The HF Trainer's checkpoint folder holds what its steps need (the steps are exact: the
    skipped batches and the RNG state it restores after its first fetch are measured where the
    reference's are); its final train_loss averages only the resumed process's steps.
    The Trainer finds its own checkpoint (``resume_from_checkpoint=True``: the newest
    checkpoint-N folder): the reference's later ones (checkpoint-8, checkpoint-12) are moved
    into the trace folder first, and it resumes from the interrupted run's checkpoint-4."""
    import pytest

    pytest.importorskip("transformers", reason="transformers is not installed (make test-frameworks installs it and runs this test)")
    out = tmp_path / "out"
    r = run_cli("resume", "resume/hf_resume.py", "--at", "3", "--resume-args",
                "--resume last", "--", "--out", str(out), tmp=tmp_path)
    rep = r.report
    assert rep is not None, r.stdout + r.stderr
    ck = rep["checkpoint"]
    assert ck["kind"] == "transformers.Trainer" and ck["path"] == str(out / "checkpoint-4")
    assert rep["moved_aside"] == [str(out / "checkpoint-12"), str(out / "checkpoint-8")]
    assert (Path(rep["trace_dir"]) / "later-checkpoints").is_dir()
    assert "moved into the trace folder" in r.stdout
    assert {"optimizer.pt": "optimizer", "scheduler.pt": "scheduler",
            "rng_state.pth": "rng"}.items() <= ck["kinds"].items()
    assert rep["steps"] == [12, 4, 8] and rep["steps_compared"] == 12
    assert rep["divergence"]["step"] is None  # every step agrees
    assert rep["divergent_signal"] == "metric:hf:train_loss" and rep["not_restored"] == []


def test_checkpoint_names_a_file_whose_save_is_not_seen(tmp_path: Path) -> None:
    """A script that writes its checkpoint with plain pickle (without --checkpoint: nothing to
    resume from, test_a_script_with_no_save_repro_check_sees_is_one_line_and_exit_3): with a
    glob the file that changed after step 4 is the checkpoint, taken at the next optimizer
    step."""
    args = ["--resume-args", "--resume {checkpoint}", "--", "--out", str(tmp_path / "out"),
            "--pickle"]
    r = run_cli("resume", TARGET, "--at", "3", "--checkpoint",
                str(tmp_path / "out" / "ckpt-*.pkl"), *args, tmp=tmp_path / "named")
    assert r.code == 0, r.stdout + r.stderr
    rep = r.report
    assert rep is not None and rep["resumes_exactly"] is True
    ck = rep["checkpoint"]
    assert ck["kind"] == "file" and ck["path"] == str(tmp_path / "out" / "ckpt-0004.pkl")
    assert rep["checkpoint_step"] == 4 and rep["steps"] == [12, 4, 8]
    assert Path(ck["copy"]).is_file() and "--checkpoint" in rep["replay"]
    assert "cannot see" in ck["summary"]  # no save call: what it holds is not known


def test_under_torchrun_each_rank_is_compared_and_the_first_to_diverge_is_taken() -> None:
    """In process, on step records: the resumed job's rank 1 differs at step 3 while rank 0
    agrees; the comparison taken is rank 1's (a rank left out would make this a false
    "resumes exactly")."""
    from repro_check.compare.steps import Policy
    from repro_check.resume_check import Collector, compare_by_rank
    from repro_check.trace import values
    from repro_check.trace.protocol import StepRecord

    feed = Collector(None)

    def step(run: int, rank: int, n: int, loss: float) -> None:
        feed.event(run, StepRecord({"step": n, "rank": rank}, n, {"loss": values.encode(loss)}))

    for rank in (0, 1):
        for n in (1, 2, 3, 4):
            step(1, rank, n, float(n + rank))
        for n in (1, 2):  # the resumed job: its steps 1, 2 are the reference's 3, 4
            step(3, rank, n, float(n + 2 + rank) + (0.5 if rank == 1 and n == 2 else 0.0))
    assert feed.ranks(1) == [0, 1] and feed.ranks(2) == [None]
    result, rank = compare_by_rank(feed, 3, first=3, last_ref=4, offset=2, other_steps=2,
                                   policy=Policy(), metrics=False)
    assert rank == 1 and result.first_divergent_step == 4
    # every rank agreeing: rank 0's comparison, no divergence
    clean = Collector(None)
    for rank in (0, 1):
        clean.event(1, StepRecord({"step": 1, "rank": rank}, 1, {"loss": values.encode(1.0)}))
        clean.event(3, StepRecord({"step": 1, "rank": rank}, 1, {"loss": values.encode(1.0)}))
    result, rank = compare_by_rank(clean, 3, first=1, last_ref=1, offset=0, other_steps=1,
                                   policy=Policy(), metrics=False)
    assert rank == 0 and result.divergence is None


@pytest.mark.slow
def test_resume_under_torchrun_rank_0_saves(tmp_path: Path) -> None:
    """fixtures/ddp/resume.py under torchrun (2 gloo ranks): rank 0 saves the model, the
    optimizer and every rank's RNG state, every rank resumes from it. The interrupted job is
    stopped whole once rank 0's checkpoint is taken (rank 1 would wait for it in its next
    collective), and every resumed step of both ranks equals the reference's."""
    pytest.importorskip("torch.distributed")
    r = run_cli("resume", "ddp/resume.py:main", "--nproc-per-node", "2", "--at", "3",
                "--resume-args", "--resume {checkpoint}", "--", "--out", str(tmp_path / "out"),
                tmp=tmp_path)
    assert r.code == 0, r.stdout + r.stderr
    rep = r.report
    assert rep is not None and rep["resumes_exactly"] is True
    assert rep["checkpoint_step"] == 4 and rep["steps"] == [8, 4, 4]
    ck = rep["checkpoint"]
    assert ck["kind"] == "torch.save" and ck["kinds"]["rng"] == "rng" and ck["rng"] == ["torch"]
    assert ck["stopped_after_s"] < 1.0
    assert rep["run_results"][1]["status"] == "stopped"  # the job, stopped whole
    assert "--nproc-per-node 2" in rep["replay"]
