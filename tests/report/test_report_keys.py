"""The JSON report's keys stay what they were: every report kind's full key tree against the one
recorded in ``report_keys.json``.

The keys of ``--json`` are a public API. Each report kind is built once (a check that diverges,
a reproducible check, a record and a verify through the public API; a diff, a diagnosis, a
distributed check, one with processes, an ``--across`` grid and a resume in-process, from small
traces and the builders the commands use) and flattened to its key paths (list items merged, ``[]``).
Keys whose names are data, not schema (metric names, environment entries, signal names, ranks),
are one opaque path each, so the tree does not depend on the machine.

To record the trees again after adding a key on purpose::

    REPRO_CHECK_WRITE_KEYS=1 python -m pytest tests/report/test_report_keys.py
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

import repro_check
from repro_check.compare.drift import Drift
from repro_check.compare.processes import ProcessComparison
from repro_check.report.processes import processes_part
from repro_check.commands import diagnose as diagnosis_mod
from repro_check.commands.diagnose import PairResult, explain_localization, flagged_ops
from repro_check.diagnose.localize import Localization
from repro_check.report.contents import EnvCall
from repro_check.trace.results import Location
from repro_check.diagnose.sources import find_sources
from repro_check.distributed.compare import RankComparison
from repro_check.distributed.launch import Distributed, DistOptions, JobResult, RankResult
from repro_check.compare.resume import NotRestored
from repro_check.report.model import (AcrossCell, AcrossPair, AcrossPart, BisectCommit,
                                      BisectPart, CheckpointInfo, DiagnosisPart, JudgedCommit,
                                      Report, ResumePart)
from repro_check.run import axes as ax
from repro_check.commands.across import metrics_side_by_side, price_of_determinism
from repro_check.run.options import InternalSettings, options_of
from repro_check.trace.results import RunResult
from repro_check.run.streams import ProcessResult

from ..api_targets import Golden
from ..synthetic_traces import LOSSES, f32, write_trace

pytest_plugins = ["tests.api_runs"]

KEYS_FILE = Path(__file__).with_name("report_keys.json")

#: paths whose keys are data (names of metrics, signals, environment entries, ranks, settings)
OPAQUE = {
    "environment", "metrics[]", "judged", "rank_desync.fingerprints", "across.cells[].settings",
    "across.cells[].versions", "across.revisions", "checkpoint.kinds",
}


def key_paths(value: Any, path: str = "") -> set[str]:
    """Every key path of a JSON value: ``a.b`` for a key of a dict, ``a[]`` for the items of a
    list (all items merged)."""
    out: set[str] = set()
    if path in OPAQUE:
        return {f"{path}{{}}"}
    if isinstance(value, dict):
        for k, v in value.items():
            sub = f"{path}.{k}" if path else str(k)
            out.add(sub)
            out |= key_paths(v, sub)
    elif isinstance(value, list):
        for item in value:
            out |= key_paths(item, f"{path}[]")
    return out


# ---- reports built in-process ----------------------------------------------------------------

def _diff(tmp: Path, name: str) -> Report:
    """A diff of two synthetic traces whose losses part at step 4, with a final metric."""
    a = write_trace(tmp / name / "a.jsonl", LOSSES[:6], metrics={"accuracy": 0.5})
    b = write_trace(tmp / name / "b.jsonl", [*LOSSES[:3], 9.0, 9.0, 9.0],
                    metrics={"accuracy": 0.25})
    return repro_check.diff(a, b)


def _check_like(tmp: Path, name: str) -> Report:
    """A diff report without its gate part: the body of a check's report."""
    report = _diff(tmp, name)
    report.gate = None
    return report


def _diagnosis(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Report:
    report = _check_like(tmp, "diagnose")
    part = DiagnosisPart(flagged_ops=flagged_ops({
        1: [{"op": "aten::index_add_", "step": 2, "where": "train.py:10"}],
        2: [{"op": "aten::index_add_", "step": 1, "where": "train.py:10"}]}))
    report.diagnosis = part
    report.cause = "compute"
    loc = Localization(4, found=True, phase="forward", module="net.fc", op="aten::addmm",
                       op_index=3, inputs_agree=True, differing_inputs=[1],
                       first_module_forward="net.fc", first_module_backward="net",
                       ops_compared=12, detail="the op differs", cause="compute",
                       entered=Location("train.py", 3, "main"),
                       entered_by="torch.as_tensor",
                       env_call=EnvCall("step", Location("train.py", 4, "main")))
    explain_localization(report, part, loc)
    # sources: the first divergence is the environment's (no pin): one source, no run
    env = copy.copy(report)
    env.cause, env.cause_detail = "environment", "the environments differ"
    options = options_of("train.py:main", runs=2)
    find_sources(env, part, options, InternalSettings(), tmp / "diagnose-sources",
                 lambda text: None, lambda step, opts, internal, where: (None, None),
                 max_sources=1, check=lambda options, internal: env)
    # the ablation: every pair reproducible (the check's runs stand in for them)
    same = _check_like(tmp, "diagnose-same")
    same.comparison = _same_comparison(tmp)
    monkeypatch.setattr(diagnosis_mod, "run_check", lambda options, *a, **k: same)
    full = copy.copy(same)
    diagnosis_mod._ablation(full, part, ["python"], [], "full seeding", options,
                            InternalSettings(), tmp / "diagnose-ablation", lambda text: None)
    assert part.ablation and part.sources and part.localization and part.flagged_ops
    assert PairResult.of("x", [], same).reproducible
    return report


def _same_comparison(tmp: Path) -> Any:
    a = write_trace(tmp / "same" / "a.jsonl", LOSSES[:3])
    b = write_trace(tmp / "same" / "b.jsonl", LOSSES[:3])
    return repro_check.diff(a, b).comparison


def _distributed(tmp: Path, desync: bool) -> Report:
    """Two runs of two ranks: rank 1's loss differs at step 2 (or, with ``desync``, the ranks of
    run 2 hold different parameters after step 2)."""
    report = _check_like(tmp, f"dist-{desync}")
    comparison = RankComparison(2, report.policy, local_ranks=2)
    for run in (1, 2):
        for rank in (0, 1):
            for step in (1, 2, 3):
                loss = 1.0 / step
                if not desync and run == 2 and rank == 1 and step >= 2:
                    loss += 1.0
                params = "p" if not (desync and run == 2 and rank == 1 and step >= 2) else "q"
                comparison.add_step(run, rank, step, {"loss": f32(loss), "params": params})
            comparison.set_metrics(run, rank, {"accuracy": f32(0.5)})
        comparison.end(run, {0: 3, 1: 3})
    report.comparison = comparison.result()
    results: list[RunResult] = []
    for run in (1, 2):
        ranks = [RankResult(r, status="completed", returncode=0, steps=3, pid=100 + r,
                            pgid=100 + r) for r in (0, 1)]
        job = JobResult(run, status="completed", returncode=0, steps=3, ranks=ranks)
        if run == 2 and not desync:
            ranks[1].status, ranks[1].returncode = "failed", 98
            ranks[1].error = {"kind": "raised", "type": "RuntimeError", "message": "x"}
            job.status, job.failed_rank = "failed", 1
        results.append(job)
    report.results = results
    dist = Distributed(DistOptions(nproc_per_node=2), runs=2)
    report.distributed, warnings = dist.parts(report.results, comparison, report.comparison)
    report.warnings += warnings
    assert report.distributed is not None and report.distributed.rank_values
    return report


def _metric_distributed(tmp: Path) -> Report:
    """Two runs of two ranks that agree in every step, and part in a final metric of rank 1."""
    report = _check_like(tmp, "dist-metric")
    comparison = RankComparison(2, report.policy, local_ranks=2)
    for run in (1, 2):
        for rank in (0, 1):
            comparison.add_step(run, rank, 1, {"loss": f32(1.0)})
            comparison.set_metrics(run, rank, {"accuracy": f32(0.5 if run == 1 or rank == 0
                                                                 else 0.25)})
        comparison.end(run, {0: 1, 1: 1})
    report.comparison = comparison.result()
    report.results = [JobResult(run, status="completed", steps=1,
                                ranks=[RankResult(0, steps=1), RankResult(1, steps=1)])
                      for run in (1, 2)]
    report.distributed, warnings = Distributed(DistOptions(nproc_per_node=2), runs=2).parts(
        report.results, comparison, report.comparison)
    report.warnings += warnings
    return report


def _processes(tmp: Path) -> Report:
    """Two runs whose target started one process that trained: its loss differs at step 2."""
    report = _check_like(tmp, "processes")
    comparison = ProcessComparison(2, report.policy)
    for run in (1, 2):
        for step in (1, 2):
            comparison.add_step(run, 0, step, {"loss": f32(1.0 / step)})
            comparison.add_step(run, 1, step, {"loss": f32(1.0 / step + (run == 2) * step)})
        comparison.end(run, {0: 2, 1: 2})
    report.comparison = comparison.result()
    report.results = [
        RunResult(run, status="completed", returncode=0, steps=2,
                  processes=[ProcessResult(1, status="completed", steps=2, backward_calls=2,
                                           exitcode=0),
                             ProcessResult(2, status="killed")])
        for run in (1, 2)]
    report.processes = processes_part(report.results, comparison, report.comparison)
    assert report.processes is not None
    return report


def _across(tmp: Path) -> Report:
    """A deterministic=off,on grid: the pair, each cell and the price of determinism."""
    report = _diff(tmp, "across")
    report.gate = None
    axes = ax.parse_axes(["deterministic=off,on"])
    cells = ax.grid(axes)
    infos = [AcrossCell(index=c.index, label=c.label,
                        settings={a.name: v for a, v in c.settings}, runs=[c.index],
                        steps=6, seconds=1.0 + c.index, loop_seconds=0.5 * c.index,
                        versions={"torch": "2.14.1"}, step_spread=0.01)
             for c in cells]
    metrics = metrics_side_by_side({"accuracy": f32(0.5)}, {"accuracy": f32(0.25)})
    pair = AcrossPair(a=cells[0].label, b=cells[1].label, cell=2, identical=False,
                      bit_identical=False, first_divergent_step=4, signal="loss",
                      culprit="net.fc", culprit_op="aten::addmm",
                      localization=Localization(4, found=True),
                      drift=Drift(steps=6, max_abs=1.0, max_at=4, final_abs=0.5, first_at=4,
                                  differing_steps=3),
                      metrics=metrics, environment_differences=["deterministic"])
    report.across = AcrossPart(axes=[(a.name, list(a.values)) for a in axes], cells=infos,
                               pairs=[pair], runs_per_cell=1)
    report.across.price = price_of_determinism(cells, infos)
    report.across.revisions = {"HEAD": {"sha": "5" * 40, "subject": "five", "date": "",
                                        "author": "Ada"}}
    assert report.across.price
    return report


def _bisect(tmp: Path) -> Report:
    """A bisect that found a commit: GOOD, BAD, the commits tested (one skipped, which says why),
    the step, op and module, the drift, runs and time."""
    report = _diff(tmp, "bisect")
    commit = BisectCommit("4" * 40, "four", "2026-12-01T10:00:00+00:00", "Ada")
    report.bisect = BisectPart(
        good=BisectCommit("1" * 40, "one", "2026-12-01T09:00:00+00:00", "Ada"),
        bad=BisectCommit("5" * 40, "five", "2026-12-01T11:00:00+00:00", "Ada"), candidates=4,
        first_bad=commit,
        tested=[JudgedCommit("2" * 40, "two", "", "Ada", verdict="skip", error="raised"),
                JudgedCommit("4" * 40, "four", "", "Ada", verdict="bad", step=1, signal="loss")],
        skipped=["2" * 40], step=1, signal="loss", op="aten::mul", module="Net",
        localization=Localization(1, found=True),
        drift=Drift(steps=2, max_abs=1.0, max_at=1, final_abs=0.5, first_at=1, differing_steps=2),
        runs=3, probe_runs=2, seconds=1.5, log_path=str(tmp / "bisect.log"))
    return report


def _resume(tmp: Path) -> Report:
    """A resume whose resumed run differs at step 5: the checkpoint, what it holds, the state
    not restored and each run's steps."""
    report = _check_like(tmp, "resume")
    report.resume = ResumePart(
        at=3, resume_args="--resume {checkpoint}", reference_reproducible=True,
        checkpoint=CheckpointInfo(step=4, path="out/ckpt.pt", copy="traces/checkpoint/ckpt.pt",
                                  kind="torch.save", keys=["model", "opt", "step"],
                                  kinds={"model": "model", "opt": "optimizer", "step": "other"},
                                  stopped_after=0.01),
        not_restored=[NotRestored("rng.torch", "save torch.get_rng_state().", "it differs")],
        steps={"reference": 6, "interrupted": 4, "resumed": 2})
    return report


# ---- the test --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def key_trees(diverging_check: Any, same_check: Any, golden: Golden, verify_other_seed: Any,
              tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    tmp = tmp_path_factory.mktemp("report-keys")
    with pytest.MonkeyPatch.context() as mp:
        built = {
            "check_diverging": diverging_check,
            "check_reproducible": same_check,
            "record": golden.report,
            "verify": verify_other_seed,
            "diff": _diff(tmp, "diff"),
            "diagnose": _diagnosis(tmp, mp),
            "distributed": _distributed(tmp, desync=False),
            "distributed_desync": _distributed(tmp, desync=True),
            "distributed_metric": _metric_distributed(tmp),
            "processes": _processes(tmp),
            "across": _across(tmp),
            "bisect": _bisect(tmp),
            "resume": _resume(tmp),
        }
    return {name: sorted(key_paths(json.loads(r.to_json()))) for name, r in built.items()}


def test_report_keys_are_the_recorded_ones(key_trees: dict[str, list[str]]) -> None:
    if os.environ.get("REPRO_CHECK_WRITE_KEYS"):
        KEYS_FILE.write_text(json.dumps(key_trees, indent=1, sort_keys=True) + "\n")
    recorded = json.loads(KEYS_FILE.read_text())
    assert sorted(recorded) == sorted(key_trees)
    for name, paths in key_trees.items():
        missing = sorted(set(recorded[name]) - set(paths))
        added = sorted(set(paths) - set(recorded[name]))
        assert (name, missing, added) == (name, [], [])
