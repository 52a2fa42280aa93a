"""``repro-check resume`` end to end on fixtures/resume/train.py: an exact resume, a checkpoint
missing state, a planted 1-ulp change, a script that never saves, a reference that is not
reproducible, resume arguments the script rejects. Each test is one resume (three runs at most)
serving all its assertions. Where the optimizer is not what is tested, the script updates by hand
(--no-optim: no torch.optim, whose first optimizer costs each run a torch._dynamo import)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import CliResult, cli_env, run_cli

TARGET = "resume/train.py:main"


def resume(tmp: Path, at: int, resume_args: str, *script: str, flags: tuple[str, ...] = (),
           env: dict[str, str] | None = None) -> CliResult:
    return run_cli("resume", TARGET, "--at", str(at), "--resume-args", resume_args, *flags, "--",
                   "--out", str(tmp / "out"), *script, tmp=tmp, env=env)


def flat(text: str) -> str:
    """``text`` with every run of white space one space (a long line wraps in the terminal)."""
    return " ".join(text.split())


def side_by_side(stdout: str) -> dict[int, tuple[str, str, str]]:
    """The terminal's table of losses around the resume point: step -> (mark, reference,
    resumed)."""
    rows = {}
    for line in stdout.split("Loss around the resume point", 1)[1].splitlines()[1:]:
        m = re.match(r"\s*(▶?≠?)\s+(\d+)\s+(\S+)\s+(\S+)\s*$", line)
        if m:
            rows[int(m[2])] = (m[1], m[3], m[4])
        elif rows:
            break
    return rows


@pytest.fixture(scope="module")
def exact(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, CliResult]:
    """The script saves and restores torch's global RNG state and shuffles from it; its
    checkpoint is three files written one after the other (model.pt, opt.pt, meta.pt)."""
    tmp = tmp_path_factory.mktemp("exact")
    return tmp, resume(tmp, 5, "--split --resume {checkpoint}", "--loader", "global",
                       "--save-every", "4", "--split")


@pytest.fixture(scope="module")
def missing(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, CliResult]:
    """Every piece of state left out at once, with every report written (HTML, JUnit, and the
    GitHub annotation and step summary of a run under Actions)."""
    tmp = tmp_path_factory.mktemp("missing")
    env = cli_env(GITHUB_ACTIONS="true", GITHUB_STEP_SUMMARY=str(tmp / "summary.md"))
    return tmp, resume(tmp, 3, "--resume {checkpoint} --epoch-restart --no-weights",
                       "--no-rng", "--no-opt", "--no-sched", env=env,
                       flags=("--report", str(tmp / "report.html"),
                              "--junit", str(tmp / "junit.xml")))


def test_exact_resume_with_shuffling_from_the_restored_global_rng(
        exact: tuple[Path, CliResult]) -> None:
    """The resume is exact (a DataLoader generator of repro-check's would restart the order and
    look like a checkpoint that left the data order out). The three files are one checkpoint:
    copied side by side, described together and put back before the resumed run (the reference
    wrote all three again after step 8: a resume that read its opt.pt or meta.pt would start
    from step 12's state)."""
    tmp_path, r = exact
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
    assert "with " + str(out / "opt.pt") in flat(r.stdout)
    assert "RESUMES EXACTLY" in r.stdout
    assert "repro-check resume resume/train.py:main" in rep["replay"]
    # the resumed steps beside the reference's, from step 9 on, equal
    rows = side_by_side(r.stdout)
    assert rows[8][2] == "—" and rows[9][0] == "▶" and rows[9][1] == rows[9][2] != "—"
    assert all(ref == mine for mark, ref, mine in (rows[s] for s in range(9, 13)))
    # the interrupted run ended as its save returned: it recorded no step after it, and how
    # long after the save it ended (the copy) is measured and printed with the cost
    assert rep["run_results"][1]["status"] == "stopped"
    took = ck["stopped_after_s"]
    assert isinstance(took, float) and took >= 0
    assert (f"cost: 3 runs, the reference and the interrupted one in parallel, then the resumed "
            f"one; the interrupted run ended {took:.2f} s after its save returned (the copy)"
            in flat(r.stdout)), r.stdout


def test_the_resume_control_leaves_the_restored_rng_state_out_and_must_differ(
        exact: tuple[Path, CliResult]) -> None:
    """Megatron's control: the resumed run again, with every restore of a global RNG state
    left out (the checkpoint holds them and the runs shuffle from torch's): it differs from the
    reference at the first resumed step, so the exact resume is verified."""
    tmp_path, r = exact
    rep = r.report
    assert rep is not None and rep["verdict"] == "resumes exactly"
    ctl = rep["control"]
    assert ctl["status"] == "seen" and ctl["reference"] == "reference"
    assert ctl["planted"]["where"] == "resume" and ctl["planted"]["step"] == 8
    assert ctl["planted"]["tensor"] == "the RNG state the checkpoint restores"
    assert ctl["seen_step"] == 9 and ctl["seen_signal"].startswith("rng.")
    trace = Path(ctl["trace"])
    assert trace.name == "run-4-control.jsonl"
    left_out = [json.loads(line)["info"]["control"]["left_out"]
                for line in trace.read_text().splitlines() if '"left_out"' in line]
    assert "torch.set_rng_state" in left_out or "torch.random.set_rng_state" in left_out
    assert ("Control: a resumed run that leaves out the RNG state the checkpoint restores was "
            "seen to differ from the reference at step 9") in flat(r.stdout)


@pytest.mark.slow
def test_checkpoint_missing_optimizer_scheduler_rng_data_position_and_weights_read_not_loaded(
        missing: tuple[Path, CliResult]) -> None:
    """Each piece of state left out is named: a checkpoint without optimizer, scheduler or RNG
    state, a resume that restarts its epoch's data order, and that reads the checkpoint but
    never loads the weights (named first: "params")."""
    _, r = missing
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


@pytest.mark.slow
def test_a_resume_that_differs_in_every_report(missing: tuple[Path, CliResult]) -> None:
    """The terminal's losses side by side (equal up to the checkpoint's step, the resumed run's
    from step 5 on, marked), the HTML page's curves with the resume point, JUnit's failure and
    the GitHub annotation and step summary, each naming what was not restored."""
    tmp, r = missing
    rep = r.report
    assert rep is not None
    rows = side_by_side(r.stdout)
    assert [s for s in rows] == [2, 3, 4, 5, 6, 7, 8, 9]
    assert rows[4][2] == "—" and rows[5][0] == "▶≠" and rows[5][1] != rows[5][2] != "—"
    assert all(rows[s][0] == "≠" for s in range(6, 10))
    page = (tmp / "report.html").read_text()
    assert '<figure id="resume-plot"><img' in page and "(after step 4)" in page
    assert '<ul id="not-restored"><li><b>params</b>' in page
    assert rep["checkpoint"]["summary"] in page.replace("&#x27;", "'")
    failure = ET.parse(tmp / "junit.xml").getroot().find("./testsuite/testcase/failure")
    assert failure is not None
    says = ("the resumed run differs from the reference at step 5 (signal "
            f"{rep['divergent_signal']}); not restored: params, optimizer, lr, rng.python, "
            "rng.numpy, rng.torch, data_order; the checkpoint holds")
    assert says in failure.get("message", "") and "Not restored:" in (failure.text or "")
    (line,) = [x for x in r.stdout.splitlines() if x.startswith("::error")]
    assert line.startswith("::error ") and "title=repro-check resume::" in line and says in line
    summary = (tmp / "summary.md").read_text().replace("\\", "")  # Markdown's escapes
    assert "| ❌ resume differs | 5 |" in summary and says in summary


@pytest.mark.slow
def test_a_checkpoint_without_the_scheduler_names_lr_where_the_schedules_part(
        tmp_path: Path) -> None:
    """Only the LR scheduler left out: the learning rate going in is right (it is restored with
    the optimizer's param groups), and the restarted schedule shows at its next decay (StepLR,
    every 3 steps: the reference's at step 7, the resumed run's a step later), named as lr."""
    r = resume(tmp_path, 3, "--resume {checkpoint}", "--no-sched")
    assert r.code == 1, r.stdout + r.stderr
    rep = r.report
    assert rep is not None and rep["checkpoint_step"] == 4
    assert rep["checkpoint"]["summary"].endswith("; no scheduler")
    assert rep["first_divergent_step"] == 7 and rep["divergent_signal"] == "lr"
    assert rep["not_restored"] == ["lr"]
    (lr,) = rep["not_restored_detail"]
    assert lr["detail"] == "lr differs going into step 7" and "scheduler" in lr["fix"]


@pytest.mark.slow
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


def test_a_first_save_after_the_last_step_is_one_line_and_exit_3(tmp_path: Path) -> None:
    """The only save at or after --at follows the script's last step: there is nothing left to
    resume, so no resumed run starts (it would compare no step)."""
    r = resume(tmp_path, 5, "--resume {checkpoint}", "--steps", "8", "--save-every", "8",
               "--no-optim")
    assert r.code == 3, r.stdout + r.stderr
    assert r.report is not None and r.report["checkpoint_step"] == 8
    assert r.report["error"] == (
        "the script's first checkpoint at or after step 5 was written after step 8, its last "
        "(8 steps): nothing is left to resume (give a smaller --at, or save during training)")
    assert len(r.report["run_results"]) == 2 and "no resumed run" in r.stdout
    assert "Traceback" not in r.stderr + r.stdout


def test_a_reference_that_is_not_reproducible_blames_no_checkpoint(tmp_path: Path) -> None:
    r = resume(tmp_path, 4, "--resume {checkpoint}", "--noise", "--no-optim")
    assert r.code == 1
    rep = r.report
    assert rep is not None and rep["reference_reproducible"] is False
    assert rep["not_restored"] == [] and rep["first_divergent_step"] == 1
    assert len(rep["run_results"]) == 2
    assert "REFERENCE NOT REPRODUCIBLE" in r.stdout


@pytest.mark.slow
def test_resume_args_the_script_rejects_name_the_resumed_run(tmp_path: Path) -> None:
    r = resume(tmp_path, 4, "--resume {checkpoint} --bogus", "--no-optim")
    assert r.code == 3
    assert r.report is not None and "the resumed run (run 3)" in r.report["error"]
    assert "--bogus" in r.report["error"]
    # what the script said, as Python shows it, and no traceback (not even its SystemExit's)
    assert "train.py: error: unrecognized arguments: --bogus" in r.stdout
    assert "Traceback" not in r.stderr + r.stdout


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


@pytest.mark.slow
def test_checkpoint_names_a_file_whose_save_is_not_seen(tmp_path: Path) -> None:
    """A script that writes its checkpoint with plain pickle (without --checkpoint: nothing to
    resume from, test_a_script_with_no_save_repro_check_sees_is_one_line_and_exit_3): with a
    glob the file that changed after step 4 is the checkpoint, taken as the next step starts;
    the script updates its weights by hand (no torch.optim, no optimizer hook: its steps are
    its backward calls), and how long after the file was written the run ended is reported."""
    args = ["--resume-args", "--resume {checkpoint}", "--", "--out", str(tmp_path / "out"),
            "--pickle", "--no-optim"]
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
    took = ck["stopped_after_s"]
    assert isinstance(took, float) and took >= 0
    assert (f"ended {took:.2f} s after its save returned (the file was noticed at the step "
            "after it was written)") in flat(r.stdout)
    # the reference first: its writes of the same files cannot reach the one taken
    assert ("cost: 3 runs, the reference and the interrupted one one after the other "
            "(--checkpoint: the reference could write the file taken meanwhile)") in flat(r.stdout)


def test_under_torchrun_each_rank_is_compared_and_the_first_to_diverge_is_taken() -> None:
    """In process, on step records: the resumed job's rank 1 differs at step 3 while rank 0
    agrees; the comparison taken is rank 1's (a rank left out would make this a false
    "resumes exactly")."""
    from repro_check.compare.steps import Policy
    from repro_check.commands.resume import ResumeRecords, compare_by_rank
    from repro_check.trace import values
    from repro_check.trace.protocol import StepRecord

    feed = ResumeRecords(None)

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
    clean = ResumeRecords(None)
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
    assert f"ended {ck['stopped_after_s']:.2f} s after its save returned" in flat(r.stdout)
    assert rep["run_results"][1]["status"] == "stopped"  # the job, stopped whole
    assert "--nproc-per-node 2" in rep["replay"]


def test_no_checkpoint_says_what_was_seen_and_names_the_pattern_given() -> None:
    """In process: why there is nothing to resume from. With --checkpoint given, the line names
    that pattern instead of asking for one."""
    from repro_check.commands.resume import no_checkpoint

    assert no_checkpoint(4, 3, [], None).startswith(
        "the script wrote no checkpoint at or after step 4 in 3 steps: it saved none that "
        "repro-check could see")
    assert no_checkpoint(4, 12, [2, 1, 2], None).endswith("it saved after step(s) 1, 2")
    named = no_checkpoint(4, 12, [], "out/*.ckpt")
    assert "no file matching --checkpoint 'out/*.ckpt' was written after a step" in named
    assert "name the file with --checkpoint" not in named
