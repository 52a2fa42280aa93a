"""Causes that come from how a script seeds itself, on ordinary training scripts of the zoo:
a seed from the clock, a model built before the script seeds, a seed drawn from an unseeded
stream under ``--no-seed``. One check per fixture (module-scoped) serves every assertion."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from repro_check.child.seeding import clock
from repro_check.report.model import Report
from repro_check.run import session
from repro_check.trace.format import load_trace

from ..conftest import FIXTURES, CliResult, run_plain
from ..recorded import BOTH, cli_result, live, replay, replayed_or_live

ZOO = FIXTURES / "zoo"


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("seeding-causes")


@pytest.fixture(scope="module", params=BOTH)
def clock_check(request: pytest.FixtureRequest, tmp: Path) -> Report:
    """The clock-seeded check, its two runs in parallel (they start within the same second):
    the verdict must not depend on that. Run 2's clock is shifted (``clock_shift_ns`` in its
    header), so the seeds differ whenever the runs start; the header's shift is asserted, so one
    check shows it (repeating the check only drew more start times)."""
    return replayed_or_live(request.param, "clock_seeded", tmp)


@pytest.fixture(scope="module")
def before_seeding_live(tmp: Path) -> Report:
    return live("model_before_seed", tmp / "model_before_seed-live")


@pytest.fixture(scope="module", params=BOTH)
def built_before_seeding(request: pytest.FixtureRequest, tmp: Path) -> Report:
    if request.param == "live":
        return request.getfixturevalue("before_seeding_live")
    return replay("model_before_seed", tmp / "model_before_seed-replayed")


@pytest.fixture(scope="module", params=BOTH)
def randint_unseeded(request: pytest.FixtureRequest, tmp: Path) -> CliResult:
    """The check as the command line shows it (exit status, JSON, terminal summary)."""
    return cli_result(replayed_or_live(request.param, "randint_seed", tmp))


def test_a_clock_seed_is_never_reproducible_and_the_clock_is_the_cause(
        clock_check: Report) -> None:
    where = f"{ZOO / 'clock_seeded.py'}:15"
    d = clock_check.to_dict()
    assert d["reproducible"] is False and d["exit_code"] == 1
    assert d["cause"] == "rng" and "seeded from the clock" in d["cause_detail"]
    assert where in d["cause_detail"]
    assert d["first_divergent_step"] == 1 and d["divergent_signal"] == "rng.torch"
    assert any("from the clock" in w and where in w for w in d["warnings"])
    assert "--seed 0" in (d["replay"] or "")
    headers = [load_trace(r["trace"]).header for r in d["run_results"]]
    assert [h["clock_shift_ns"] for h in headers] == [0, clock.SHIFT_NS]
    assert d["cause_location"]["line"] == 15  # the seeding call


@pytest.fixture(scope="module", params=[
    pytest.param((way, how), id=f"{way}-{how}", marks=[pytest.mark.slow] if how == "live" else [])
    for way in ("fork", "spawn") for how in ("replayed", "live")])
def worker_reseed(request: pytest.FixtureRequest, tmp: Path) -> Report:
    """Forked workers inherit the watch; spawned ones get it through their worker_init_fn (here
    without the ``dataloader`` component, whose wrapper of it is then absent)."""
    way, how = request.param
    return replayed_or_live(how, f"worker_reseed_{way}", tmp)


def test_a_reseed_in_dataloader_workers_is_seen_and_named(worker_reseed: Report) -> None:
    """np.random.seed() in a worker_init_fn: the watch sees it in the workers (forked or
    spawned), once a run, and the cause names its line, not only the DataLoader's."""
    d = worker_reseed.to_dict()
    lines = (ZOO / "worker_reseed.py").read_text().splitlines()
    line = lines.index("    np.random.seed()") + 1
    where = f"{ZOO / 'worker_reseed.py'}:{line}"
    assert d["reproducible"] is False and d["divergent_signal"] == "batch"
    assert d["cause"] == "rng" and d["cause_location"]["line"] == line
    assert "OS entropy in the DataLoader's workers" in d["cause_detail"] and where in \
        d["cause_detail"]
    assert "DataLoader made at" in d["cause_detail"]  # and where the batches come from
    seen = [w for w in d["warnings"] if "DataLoader worker" in w]
    assert len(seen) == 1 and where in seen[0] and "numpy.random.seed()" in seen[0]
    # torch's own seeding of each worker is not the target's
    assert all(where in w for w in d["warnings"] if "seed" in w), d["warnings"]
    for run in d["run_results"]:  # one record a run for all workers, in the run's own trace
        lines = Path(run["trace"]).read_text().splitlines()
        records = [json.loads(x) for x in lines if '"worker"' in x]
        assert [(r["where"], r["source"]) for r in records] == [(where, "entropy")], records


@pytest.fixture(scope="module", params=BOTH)
def hour_check(request: pytest.FixtureRequest, tmp: Path) -> Report:
    return replayed_or_live(request.param, "clock_hour_seed", tmp)


def test_a_seed_from_the_hour_and_minute_is_the_clock(hour_check: Report) -> None:
    """Coarse fields of the clock (hour * 60 + minute) differ between runs too, and are named
    the clock; the constant seeds beside it (12, 2026) are not, whatever time it is."""
    d = hour_check.to_dict()
    assert d["reproducible"] is False and d["cause"] == "rng"
    assert d["divergent_signal"] == "rng.torch" and d["first_divergent_step"] == 1
    assert "torch is seeded from the clock" in d["cause_detail"]
    assert "the minute of the day of the time" in d["cause_detail"]
    assert d["cause_location"] == {"file": str(ZOO / "clock_hour_seed.py"), "line": 20,
                                   "function": None}
    clocked = [w for w in d["warnings"] if "from the clock" in w]
    assert clocked and all("torch.manual_seed" in w for w in clocked), d["warnings"]
    assert not any("random.seed" in w and "differently" in w for w in d["warnings"])


def test_a_model_built_before_the_script_seeds_is_init(built_before_seeding: Report) -> None:
    d = built_before_seeding.to_dict()
    assert d["cause"] == "init" and d["first_divergent_step"] == 1
    assert d["divergent_signal"] == "init"
    detail = d["cause_detail"]
    assert f"Net built at {ZOO / 'model_before_seed.py'}:54" in detail
    assert "before the script seeds torch (torch.manual_seed at" in detail
    # the watch stays on without seeding: the script's own seeds are reported
    assert any("seeds torch itself (torch.manual_seed(42)" in w for w in d["warnings"])


@pytest.mark.slow
def test_no_seed_runs_go_in_parallel_with_one_thread_count(before_seeding_live: Report) -> None:
    """(Live only: a replay's headers are what the recording's runs wrote.)"""
    cpus = len(os.sched_getaffinity(0))
    traces = [load_trace(r.trace_path) for r in before_seeding_live.results]
    envs = [t.header["environment"] for t in traces]
    assert envs[0]["threads"] == envs[1]["threads"]
    if cpus >= 2 and "OMP_NUM_THREADS" not in os.environ:
        assert envs[0]["OMP_NUM_THREADS"] == str(cpus // 2)
        first, second = sorted(traces, key=lambda t: t.header["started"])
        # the second did not wait: it started before the first one ended (the run's own start
        # and end events, however slowly a loaded machine starts either)
        first_ended = first.header["started"] + first.end["seconds"]
        assert second.header["started"] < first_ended


def test_shared_thread_counts() -> None:
    assert session.default_jobs(2, None) == 1  # record: one at a time, torch's default
    cpus = len(os.sched_getaffinity(0))
    assert session.default_jobs(2, None, shared=True) == min(2, cpus)
    if "OMP_NUM_THREADS" not in os.environ:
        assert session.shared_thread_env(1) == {}
        if cpus >= 2:
            env = session.shared_thread_env(2)
            assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == str(cpus // 2)


def test_no_seed_still_reports_a_seed_from_random_randint(randint_unseeded: CliResult) -> None:
    res = randint_unseeded
    assert res.code == 1, res.stdout + res.stderr
    r = res.report
    assert r is not None and r["cause"] == "rng"
    # Python's random is the first stream that differs: its seeding call is named
    assert r["divergent_signal"] == "rng.python"
    assert r["cause_detail"].startswith(
        "Python's random is seeded with a value drawn from it while it was unseeded (random.seed "
        f"at {ZOO / 'randint_seed.py'}:16; run 1: ")
    where = f"{ZOO / 'randint_seed.py'}:18"
    assert any(w.startswith(f"the target seeds torch itself (torch.manual_seed at {where})")
               and "Python's random had been drawn from without a seed" in w
               for w in r["warnings"]), r["warnings"]
    assert any(w.startswith("torch was reseeded differently in each run") for w in r["warnings"])
    assert "the target seeds torch itself" in " ".join(res.stdout.split())


def test_diagnose_has_no_no_seed_flag() -> None:
    res = run_plain("diagnose", "tiny:main", "--no-seed")
    assert res.code == 2 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "unrecognized arguments: --no-seed" in lines[0]
    assert "--no-seed" not in run_plain("diagnose", "--help").stdout
    assert "--no-seed" in run_plain("check", "--help").stdout
