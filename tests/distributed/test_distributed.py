"""Distributed checks: torchrun jobs with two gloo ranks on the CPU, compared across runs and ranks."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from repro_check.compare.steps import Policy
from repro_check.distributed.launch import DistOptions, RankResult
from repro_check.distributed.compare import RANK_DESYNC, RankComparison
from repro_check.run.runner import COMPILE_CACHE_VARS, fresh_compile_caches

from ..conftest import FIXTURES, CliResult, cli_env, run_cli, run_plain

DDP = ["--nproc-per-node", "2"]


def live_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that are still running (zombies count as gone)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def assert_no_rank_left(report: dict) -> None:
    groups = [rr["pgid"] for run in report["rank_results"] for rr in run["ranks"] if rr["pgid"]]
    assert groups, "the ranks' process groups were not recorded"
    deadline = time.monotonic() + 15
    left = [g for g in groups if live_members(g)]
    while left and time.monotonic() < deadline:  # SIGKILLed processes take a moment to go
        time.sleep(0.1)
        left = [g for g in groups if live_members(g)]
    assert not left, f"rank processes left behind in groups {left}"


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ddp")


@pytest.fixture(scope="module")
def clean(tmp: Path) -> CliResult:
    # two runs at once: each torchrun job must find its own rendezvous port
    return run_cli("ddp/train.py:main", *DDP, "--jobs", "2", tmp=tmp / "clean")


#: diagnose two_sources.py under torchrun (--no-localize: the check's own rng divergence is not
#: replayed op by op; the compute source is, as every source is)
DIAGNOSE = ["diagnose", "ddp/two_sources.py:main", *DDP, "--max-steps", "4", "--no-ablation",
            "--no-localize"]


@pytest.fixture(scope="module")
def diagnosed(tmp: Path) -> CliResult:
    # --max-sources 2: the check, the pair with source 1 pinned on rank 1 and the replay that
    # localizes source 2 on rank 0 (6 torchrun jobs); the last pair, with both pinned, is the
    # slow tier's (test_with_both_sources_pinned_on_their_ranks_the_torchrun_runs_agree)
    # six torchrun jobs in one command: more time than run_cli's default on a loaded machine
    return run_cli(*DIAGNOSE, "--max-sources", "2", tmp=tmp / "diagnose", timeout=900)


@pytest.fixture(scope="module")
def desynced(tmp: Path) -> CliResult:
    # stopped at step 4 by --max-steps: ranks stopped mid-training must still end cleanly
    return run_cli("ddp/desync.py:main", *DDP, "--max-steps", "4", tmp=tmp / "desync")


@pytest.fixture(scope="module")
def crashed(tmp: Path) -> CliResult:
    return run_cli("ddp/train.py:main", *DDP, "--", "--crash-rank", "1", tmp=tmp / "crash")


# ---- a reproducible DDP job ------------------------------------------------------------------

def test_ddp_job_reproduces_under_full_seeding(clean: CliResult) -> None:
    assert clean.code == 0, clean.stdout + clean.stderr
    r = clean.report
    assert r["reproducible"] is True and r["first_divergent_step"] is None
    assert r["first_divergent_rank"] is None and r["rank_desync"] is None
    assert r["steps"] == [6, 6]
    assert r["distributed"]["ranks"] == [0, 1] and r["distributed"]["nproc_per_node"] == 2
    assert r["distributed"]["cross_rank_steps"] == 6 and r["distributed"]["ddp_model_seen"]
    assert "parameters agree at all 6 steps" in clean.stdout
    assert "torchrun: 2 ranks a run" in clean.stdout


def test_one_trace_per_rank_with_params_fingerprints(clean: CliResult) -> None:
    from repro_check.trace.format import load_trace

    runs = clean.report["rank_results"]
    assert [[rr["rank"] for rr in run["ranks"]] for run in runs] == [[0, 1], [0, 1]]
    traces = {(run["run"], rr["rank"]): load_trace(rr["trace"]) for run in runs for rr in run["ranks"]}
    assert {Path(t.path).name for t in traces.values()} == {
        "run-1.rank-0.jsonl", "run-1.rank-1.jsonl", "run-2.rank-0.jsonl", "run-2.rank-1.jsonl"}
    for (run, rank), tr in traces.items():
        assert tr.header["distributed"]["rank"] == rank
        assert tr.header["distributed"]["world_size"] == 2
        assert tr.header["run"] == run and tr.end["status"] == "completed"
        assert [s.step for s in tr.steps] == [1, 2, 3, 4, 5, 6]
        assert all({"loss", "params"} <= set(s.signals) for s in tr.steps)
    r0, r1 = traces[(1, 0)], traces[(1, 1)]
    # each rank trains on its own shard (different losses) but holds the same parameters
    assert r0.steps[0].signals["loss"] != r1.steps[0].signals["loss"]
    assert [s.signals["params"] for s in r0.steps] == [s.signals["params"] for s in r1.steps]
    assert len({s.signals["params"] for s in r0.steps}) == 6
    folder = Path(clean.report["trace_dir"])
    assert not [p for p in folder.iterdir() if p.name.startswith(".")], "events folders left"
    assert_no_rank_left(clean.report)


# ---- divergence on one rank ------------------------------------------------------------------

@pytest.mark.slow
def test_an_entropy_seeded_generator_on_rank_1_names_rank_1_and_its_line(
        diagnosed: CliResult) -> None:
    """The check's part of the diagnosis: every rank's gradients differ after the all-reduce,
    but the difference entered on rank 1, from a generator no seeding reaches."""
    assert diagnosed.code == 1, diagnosed.stdout + diagnosed.stderr
    r = diagnosed.report
    assert r["first_divergent_step"] == 1 and r["divergent_signal"] == "loss"
    assert r["first_divergent_rank"] == 1 and r["divergence"]["rank"] == 1
    assert r["rank_desync"] is None  # the ranks of each run still agree with each other
    values = {row["rank"]: row for row in r["rank_values"]}
    assert values[0]["differs"] is False and values[0]["reference"] == values[0]["value"]
    assert values[1]["differs"] is True and values[1]["reference"] != values[1]["value"]
    assert r["cause"] == "rng" and "torch.Generator" in r["cause_detail"]
    assert "OS entropy" in r["cause_detail"]
    loc = r["cause_location"]
    assert Path(loc["file"]).name == "two_sources.py" and loc["line"] == 20
    assert loc["function"] == "two_sources"
    assert "First divergence: step 1, signal loss, run 2 vs run 1, rank 1" in diagnosed.stdout
    assert "--nproc-per-node 2" in r["replay"] and "--max-steps 1" in r["replay"]


def assert_each_source_on_its_rank(res: CliResult) -> None:
    r = res.report
    assert r is not None
    got = [(s["step"], s["signal"], s["cause"], s["rank"], Path(s["location"]["file"]).name,
            s["location"]["line"]) for s in r["sources"]]
    assert got == [(1, "loss", "rng", 1, "two_sources.py", 20),
                   (3, "loss", "rng", 0, "two_sources.py", 24)]
    assert r["sources"][1]["culprit_op"] is not None
    assert "1. rng · step 1 · loss · rank 1" in res.stdout
    assert "2. rng · step 3 · loss · rank 0" in res.stdout


@pytest.mark.slow
def test_diagnose_under_torchrun_finds_each_source_on_its_rank(diagnosed: CliResult) -> None:
    """Source 1 (rank 1's generator, step 1) hides source 2 (rank 0's urandom noise, step 3):
    a value from outside torch, named where it became a tensor (the ``frombuffer`` line) as an
    unseeded source (``rng``), not as a nondeterministic op. Found with source 1 pinned on
    rank 1 only, and localized by a replay of the torchrun job on rank 0."""
    assert diagnosed.code == 1, diagnosed.stdout + diagnosed.stderr
    assert_each_source_on_its_rank(diagnosed)
    r = diagnosed.report
    assert r["sources_cost"]["runs"] == 2  # one pinned pair (--max-sources 2 stops there)
    assert r["sources_note"] == "stopped at --max-sources 2: there may be more sources"


@pytest.mark.slow
def test_with_both_sources_pinned_on_their_ranks_the_torchrun_runs_agree(tmp: Path) -> None:
    """The whole search (8 torchrun jobs): a last pair with source 1 pinned on rank 1 and
    source 2's op outputs replayed on rank 0 agrees. The fast tier asserts the rest on
    --max-sources 2 (test_diagnose_under_torchrun_finds_each_source_on_its_rank) and the last
    pair's agreement without torchrun (tests/diagnose/test_sources.py::
    test_a_clock_shuffle_hides_an_unseeded_default_rng)."""
    res = run_cli(*DIAGNOSE, tmp=tmp / "diagnose-all", timeout=1200)
    assert res.code == 1, res.stdout + res.stderr
    assert_each_source_on_its_rank(res)
    r = res.report
    assert r["sources_cost"]["runs"] == 4
    assert r["sources_note"].startswith("with the 2 source(s) above pinned, the runs agree")


# ---- ranks out of sync -----------------------------------------------------------------------

@pytest.mark.slow
def test_rank_desync_fails_although_runs_agree(desynced: CliResult) -> None:
    assert desynced.code == 1, desynced.stdout + desynced.stderr
    r = desynced.report
    assert r["reproducible"] is False and r["error"] is None
    assert [run["status"] for run in r["run_results"]] == ["stopped", "stopped"]
    assert r["steps"] == [4, 4]
    assert r["divergent_signal"] == RANK_DESYNC and r["first_divergent_step"] == 3
    assert r["divergences"] == []  # run 2 agrees with run 1 at every step
    assert r["metrics"][0] == r["metrics"][1]
    d = r["rank_desync"]
    assert d["step"] == 3 and d["ranks"] == [1] and d["runs"] == [1, 2]
    assert d["fingerprints"]["0"] != d["fingerprints"]["1"]
    assert r["first_divergent_rank"] == 1
    assert "Rank desync: step 3" in desynced.stdout


# ---- a failing rank --------------------------------------------------------------------------

@pytest.mark.slow
def test_crashing_rank_is_exit_3_naming_the_rank(crashed: CliResult) -> None:
    assert crashed.code == 3, crashed.stdout + crashed.stderr
    r = crashed.report
    assert "rank 1 raised RuntimeError: planted failure on rank 1 at step 3" in r["error"]
    assert r["failed_rank"] == {"run": 1, "rank": 1}
    for run in r["rank_results"]:
        ranks = {rr["rank"]: rr for rr in run["ranks"]}
        assert ranks[1]["status"] == "failed" and ranks[1]["steps"] == 2
        assert ranks[0]["status"] in ("failed", "terminated")  # its collective lost the peer
    assert "planted failure on rank 1" in crashed.stdout  # rank 1's own traceback is shown
    assert_no_rank_left(r)


@pytest.mark.slow
def test_hung_rank_is_stopped_by_the_timeout_for_the_whole_job(tmp: Path) -> None:
    """A loaded machine may keep torchrun from starting its ranks within the limit: that job
    is timed out all the same (and checked as such), and is tried again with a limit three
    times as long, until the ranks had started (their process groups are in the report)."""
    limit = 10
    for attempt in range(1, 4):
        res = run_cli("ddp/train.py:main", *DDP, "--timeout", str(limit), "--jobs", "2", "--",
                      "--crash-rank", "1", "--crash-how", "hang", tmp=tmp / f"hang-{attempt}")
        assert res.code == 3, res.stdout + res.stderr
        assert [run["status"] for run in res.report["run_results"]] == ["timeout", "timeout"]
        assert "whole torchrun job was stopped" in res.report["error"]
        started = [rr for run in res.report["rank_results"] for rr in run["ranks"] if rr["pgid"]]
        if started:
            break
        limit *= 3
    assert_no_rank_left(res.report)


@pytest.mark.slow
def test_kill_9_of_repro_check_stops_the_whole_torchrun_job(tmp: Path) -> None:
    """torchrun's agent, the rank supervisors and the ranks: none survives a ``kill -9`` of
    repro-check (each rank records its pids, then hangs at step 2)."""
    from ..run.test_failures import kill_9_mid_run, pids, wait_none_alive

    pid_file = tmp / "kill9-pids.txt"
    # two runs one at a time: repro-check is killed while the first job hangs
    kill_9_mid_run(["ddp/hang.py:main", *DDP, "--runs", "2", "--jobs", "1", "--",
                    "--pid-file", str(pid_file)],
                   tmp / "kill9", pid_file, ready=2, cwd=FIXTURES)
    recorded = pids(pid_file)
    assert {kind: len(set(ps)) for kind, ps in recorded.items()} == {
        "rank": 2, "rank-parent": 2, "agent": 1, "agent-parent": 1}, recorded
    wait_none_alive(recorded)


# ---- several nodes, one rank each --------------------------------------------------------------

#: ddp/train.py behind a first argument: the file where each rank appends the compile cache
#: folders its torchrun job was given
NODE_TARGET = """
import json, os, sys

sys.path.insert(0, {ddp!r})
from train import train


def main():
    with open(sys.argv[1], "a") as fh:
        fh.write(json.dumps({{v: os.environ.get(v) for v in {names!r}}}) + "\\n")
    return train(sys.argv[2:])
"""


@dataclass
class Nodes:
    outputs: list[tuple[int, str]]  # each node's exit code and output
    reports: list[dict[str, Any] | None]
    caches: Path  # one line a torchrun job: its compile cache folders


@pytest.fixture(scope="module")
def nodes(tmp: Path) -> Nodes:
    """Two repro-check processes, node 0 and node 1 of a static rendezvous, one rank each."""
    import socket

    folder = tmp / "nodes"
    folder.mkdir()
    script = folder / "node_train.py"
    script.write_text(NODE_TARGET.format(ddp=str(FIXTURES / "ddp"), names=COMPILE_CACHE_VARS))
    caches = folder / "caches.jsonl"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    procs = []
    for node in (0, 1):
        argv = [sys.executable, "-m", "repro_check", f"{script}:main", "--nproc-per-node", "1",
                "--nnodes", "2", "--node-rank", str(node), "--master-addr", "127.0.0.1",
                "--master-port", port, "--json", str(folder / f"node-{node}.json"),
                "--trace-dir", str(folder / "traces"), "-q", "--", str(caches)]
        procs.append(subprocess.Popen(argv, cwd=FIXTURES, env=cli_env(), stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=600)[0] for p in procs]
    reports = []
    for node in (0, 1):
        path = folder / f"node-{node}.json"
        reports.append(json.loads(path.read_text()) if path.exists() else None)
    return Nodes([(p.returncode, out) for p, out in zip(procs, outs)], reports, caches)


@pytest.mark.slow
def test_two_nodes_meet_run_by_run_through_the_static_rendezvous(nodes: Nodes) -> None:
    for node, ((code, out), r) in enumerate(zip(nodes.outputs, nodes.reports)):
        assert code == 0, out
        assert r is not None and r["reproducible"] is True
        assert [[rr["rank"] for rr in run["ranks"]] for run in r["rank_results"]] == [[node], [node]]
        assert r["distributed"]["nnodes"] == "2"


@pytest.mark.slow
def test_every_torchrun_job_compiles_in_cache_folders_of_its_own_removed_after(
        nodes: Nodes) -> None:
    """Read off the two nodes' jobs (--nproc-per-node 1: one line a job): 2 runs of 2 nodes."""
    for code, out in nodes.outputs:
        assert code == 0, out
    jobs = [json.loads(line) for line in nodes.caches.read_text().splitlines()]
    assert len(jobs) == 4
    folders = [job[v] for job in jobs for v in COMPILE_CACHE_VARS]
    assert all(folders) and len(set(folders)) == 8  # none shared between jobs or tools
    assert not any(Path(f).exists() for f in folders)  # removed when the job ended


# ---- seeding, comparison and options without a job -------------------------------------------

WORKER_SEEDS = """
import os, torch
from torch.utils.data import DataLoader, Dataset
from repro_check.child.seeding import components as seeding

class Probe(Dataset):
    def __len__(self): return 4
    def __getitem__(self, i): return torch.tensor([i, torch.initial_seed() % 2**31])

seeding.seed_dataloaders(11)
out = {}
for rank in ("0", "1", None):
    if rank is None:
        os.environ.pop(seeding.RANK_ENV, None)
    else:
        os.environ[seeding.RANK_ENV] = rank
    gen = torch.Generator().manual_seed(5)  # the same loader seed on every rank
    loader = DataLoader(Probe(), batch_size=2, shuffle=True, num_workers=1, generator=gen)
    out[str(rank)] = torch.cat(list(loader)).tolist()
print(out)
"""


def test_worker_seeds_are_rank_aware_but_shuffling_is_not() -> None:
    proc = subprocess.run([sys.executable, "-c", WORKER_SEEDS], env=cli_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = eval(proc.stdout)  # noqa: S307 - our own script's printed dict
    order = {rank: [row[0] for row in rows] for rank, rows in out.items()}
    seeds = {rank: {row[1] for row in rows} for rank, rows in out.items()}
    assert order["0"] == order["1"] == order["None"]  # samplers shuffle alike on every rank
    assert len({frozenset(s) for s in seeds.values()}) == 3  # workers are seeded per rank


def steps(cmp: RankComparison, run: int, rank: int, values: list[tuple[int, str]]) -> None:
    for i, (loss, params) in enumerate(values, 1):
        enc = {"dtype": "int64", "bits": f"{loss:016x}", "value": loss}
        cmp.add_step(run, rank, i, {"loss": enc, "params": params})


def test_loss_divergence_is_named_before_the_parameters_it_changed() -> None:
    cmp = RankComparison(2, Policy(), local_ranks=2)
    steps(cmp, 1, 0, [(1, "a"), (2, "b")])
    steps(cmp, 1, 1, [(5, "a"), (6, "b")])
    steps(cmp, 2, 0, [(1, "a"), (2, "x")])  # rank 0: only its parameters differ at step 2
    steps(cmp, 2, 1, [(5, "a"), (7, "x")])  # rank 1: its loss differs at step 2
    cmp.end(1, {0: 2, 1: 2})
    cmp.end(2, {0: 2, 1: 2})
    res = cmp.result()
    assert res.first_divergent_step == 2 and res.divergent_signal == "loss"
    assert res.divergence.rank == 1 and cmp.desync is None


def test_the_rank_named_is_the_one_whose_first_difference_comes_earliest_in_the_step() -> None:
    """At one step: RNG states, the parameters going in, the batch, the loss, the gradients,
    the updated parameters. A rank whose only difference is its gradients is not named."""
    def divergent_rank(a: dict[str, str], b: dict[str, str]) -> tuple[int, str]:
        cmp = RankComparison(2, Policy(), local_ranks=2)
        base = {"rng.torch": "r", "batch": "b", "grads": "g"}
        for run in (1, 2):
            for rank, changed in ((0, a), (1, b)):
                cmp.add_step(run, rank, 1, {**base, **(changed if run == 2 else {})})
            cmp.end(run, {0: 1, 1: 1})
        res = cmp.result()
        return res.divergence.rank, res.divergent_signal

    assert divergent_rank({"grads": "x"}, {"batch": "x", "grads": "x"}) == (1, "batch")
    assert divergent_rank({"batch": "x", "grads": "x"}, {"rng.torch": "x"}) == (1, "rng.torch")
    assert divergent_rank({"grads": "x"}, {"grads": "y"}) == (0, "grads")


def test_desync_groups_ranks_and_a_missing_rank_is_a_divergence() -> None:
    cmp = RankComparison(2, Policy(), local_ranks=3)
    for rank, fps in ((0, ["a", "b"]), (1, ["a", "c"]), (2, ["a", "b"])):
        steps(cmp, 1, rank, [(1, fps[0]), (2, fps[1])])
    cmp.end(1, {0: 2, 1: 2, 2: 2})
    steps(cmp, 2, 0, [(1, "a"), (2, "b")])
    cmp.end(2, {0: 2})  # ranks 1 and 2 never ran in run 2
    d = cmp.desync
    assert d is not None and d.step == 2 and d.run == 1
    assert d.ranks == [1] and d.groups == [[0, 2], [1]]
    res = cmp.result()
    assert res.divergent_signal == "steps" and res.first_divergent_step == 1
    assert res.divergence.rank == 1


def test_peer_failures_come_after_the_rank_that_failed_first() -> None:
    peer = RankResult(0, status="failed", error={
        "kind": "raised", "type": "RuntimeError", "time": 1.0,
        "message": "[pair.cc:561] Connection closed by peer [127.0.0.1]:8851"})
    killed = RankResult(1, status="crashed", exit_time=2.0)
    own = RankResult(2, status="failed", error={"kind": "raised", "type": "ValueError",
                                                "message": "bad batch", "time": 3.0})
    assert min([peer, killed, own], key=lambda r: r.failure_order) is killed
    assert min([peer, own], key=lambda r: r.failure_order) is own


def test_torchrun_options() -> None:
    own = DistOptions(nproc_per_node=2)
    assert own.torchrun_args(1)[:3] == ["--standalone", "--nnodes", "1"]
    shared = DistOptions(nproc_per_node=4, nnodes="2", rdzv_backend="c10d",
                         rdzv_endpoint="node0:29400", rdzv_id="job")
    args = shared.torchrun_args(2)
    assert "--standalone" not in args and shared.shared_rendezvous
    assert args[args.index("--rdzv-id") + 1] == "job-run-2"
    assert args[args.index("--rdzv-endpoint") + 1] == "node0:29400"
    assert "--rdzv-id" in shared.cli_args() and "job" in shared.cli_args()


@pytest.mark.parametrize("args, message", [
    (["--nproc-per-node", "0"], "--nproc-per-node must be at least 1"),
    (["--nproc-per-node", "2", "--nnodes", "2:1"], "--nnodes must be"),
    (["--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "2"], "--node-rank must be"),
])
def test_bad_distributed_options_are_usage_errors(args: list[str], message: str) -> None:
    res = run_plain("ddp/train.py:main", *args)
    assert res.code == 2 and message in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_two_nodes_with_a_static_rendezvous_meet_run_by_run() -> None:
    """The torchrun options behind the two-node job (slow tier): run K of each node gets the
    same rendezvous id, its node rank and the master's address and port, so runs go one at a
    time and meet their twin on the other node."""
    nodes = [DistOptions(nproc_per_node=1, nnodes="2", node_rank=n, master_addr="127.0.0.1",
                         master_port=29511) for n in (0, 1)]
    for n, opts in enumerate(nodes):
        opts.validate()
        assert opts.multi_node and opts.shared_rendezvous
        for run in (1, 2):
            args = opts.torchrun_args(run)
            assert "--standalone" not in args
            assert args[args.index("--nnodes") + 1] == "2"
            assert args[args.index("--node-rank") + 1] == str(n)
            assert args[args.index("--master-addr") + 1] == "127.0.0.1"
            assert args[args.index("--master-port") + 1] == "29511"
            assert args[args.index("--rdzv-id") + 1] == f"repro-check-run-{run}"
    assert nodes[1].cli_args()[-6:] == ["--node-rank", "1", "--master-addr", "127.0.0.1",
                                        "--master-port", "29511"]


def test_each_run_gets_compile_cache_folders_of_its_own(tmp_path: Path) -> None:
    """What every run and torchrun job gets (slow tier: asserted filled and removed on real
    jobs): fresh inductor and Triton cache folders, apart from the other runs'; caches the
    run's environment sets on purpose are kept."""
    envs: list[dict[str, str]] = [{}, {}]
    folders = [fresh_compile_caches(env, {}, under=tmp_path) for env in envs]
    assert folders[0] and folders[1] and folders[0] != folders[1]
    for env, folder in zip(envs, folders):
        assert sorted(env) == sorted(COMPILE_CACHE_VARS)
        assert all(Path(env[v]).parent == Path(folder or "") for v in COMPILE_CACHE_VARS)
    given = {COMPILE_CACHE_VARS[0]: "/mine"}
    env = dict(given)
    folder = fresh_compile_caches(env, given, under=tmp_path)
    assert env[COMPILE_CACHE_VARS[0]] == "/mine" and COMPILE_CACHE_VARS[1] in env
    assert folder is not None
    assert fresh_compile_caches({}, {v: "/x" for v in COMPILE_CACHE_VARS}) is None
