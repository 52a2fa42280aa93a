"""``--across``: one target in several environments, each compared with the first.

The runs are few and short (a child that imports torch costs seconds here): each
module-scoped fixture makes one invocation, and every assertion about it reads its result. The
targets are fixtures/environments.py and fixtures/tiny.py with a plain optimizer instead of
torch.optim's (whose first construction imports torch._dynamo, seconds a run):
tests/run/across_light_targets.py. Everything that can be told without a run (axes, options,
scheduling, drift, rendering, the interpreter probe) is tested on its own, without one.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from repro_check import api
from repro_check.compare.drift import loss_drift
from repro_check.compare.tolerances import from_cli
from repro_check.run import pathentry
from repro_check.diagnose.localize import Localization, compare
from repro_check.errors import UsageError
from repro_check.report.contents import MetricPair
from repro_check.report.model import AcrossCell, AcrossPair, AcrossPart, Report
from repro_check.report.render import summary
from repro_check.report.terminal import make_console
from repro_check.run import axes as ax
from repro_check.commands.across import (
    AcrossFeed,
    Fits,
    Plan,
    cache_fillers,
    cache_notes,
    compile_caches,
    ACROSS_RANKS_SIGNALS,
    across_ranks,
    price_of_determinism,
)
from repro_check.distributed.launch import Distributed
from repro_check.trace.protocol import StepRecord
from repro_check.run.options import RunOptions
from repro_check.run.runner import RunSpec
from repro_check.trace.protocol import RunConfig
from repro_check.targets import parse
from repro_check.trace.values import Tolerance

from ..conftest import CliResult, run_cli, run_plain
from ..run.across_light_targets import light_fixture
from ..synthetic_traces import read_lines, steps_of, write_trace


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with environments.py and tiny.py, the fixtures with a plain optimizer: the runs
    of this module start there, as the fixtures' runs start in fixtures/."""
    folder = tmp_path_factory.mktemp("across-targets")
    light_fixture("environments.py", folder)
    light_fixture("tiny.py", folder)
    return folder


# ---- axes and options: every usage error, no run ------------------------------------------------
@pytest.mark.parametrize("text, says", [
    ("thread=1,2", "unknown axis 'thread' (did you mean 'threads'?)"),
    ("colour=a,b", "unknown axis 'colour'"),
    ("threads", "expected AXIS=A,B"),
    ("threads=1", "at least two values"),
    ("threads=1,,2", "an empty value"),
    ("threads=", "an empty value"),
    ("threads=1,x", "whole numbers from 1, got 'x'"),
    ("threads=0,1", "whole numbers from 1, got '0'"),
    ("device=cpu,gpu", "'gpu' is not one of cpu, cuda"),
    ("deterministic=yes,no", "'yes' is not one of on, off"),
    ("env:1X=a,b", "not an environment variable name"),
    ("env:=a,b", "not an environment variable name"),
    ("env:PYTHONPATH=a,b", "set by repro-check itself"),
    ("env:REPRO_CHECK_RUN=a,b", "set by repro-check itself"),
])
def test_malformed_axis_is_one_usage_error(text: str, says: str) -> None:
    with pytest.raises(UsageError, match=None) as e:
        ax.parse_axis(text)
    assert says in str(e.value)


def test_axes_parse_into_a_grid_first_values_first() -> None:
    axes = ax.parse_axes(["threads=1,2", "env:CUBLAS_WORKSPACE_CONFIG=:4096:8,:16:8"])
    cells = ax.grid(axes)
    assert [c.label for c in cells] == [
        "threads=1, env:CUBLAS_WORKSPACE_CONFIG=:4096:8",
        "threads=1, env:CUBLAS_WORKSPACE_CONFIG=:16:8",
        "threads=2, env:CUBLAS_WORKSPACE_CONFIG=:4096:8",
        "threads=2, env:CUBLAS_WORKSPACE_CONFIG=:16:8"]
    assert cells[3].threads == 2
    assert cells[3].environment() == {"CUBLAS_WORKSPACE_CONFIG": ":16:8"}
    with pytest.raises(UsageError, match="given twice"):
        ax.parse_axes(["threads=1,2", "threads=1,4"])


def test_cells_set_what_their_axis_says() -> None:
    device, det = ax.grid(ax.parse_axes(["device=cpu,cuda", "deterministic=on,off"]))[1:3]
    assert device.label == "device=cpu, deterministic=off"
    assert device.environment() == {"CUDA_VISIBLE_DEVICES": ""}  # the GPU hidden: CPU side
    assert not device.uses_gpu and det.uses_gpu and det.environment() == {}
    base = ["torch", "cudnn", "deterministic_algorithms", "threads"]
    assert device.components(base) == ["torch", "threads"]
    assert det.components(base) == base
    python = ax.grid(ax.parse_axes([f"python={sys.executable},{sys.executable}"]))[0]
    assert python.executable == os.path.abspath(sys.executable)


@pytest.mark.parametrize("given, says", [
    ({"threads": 2}, "--threads 2 and --across threads"),
    ({"no_seed": True}, "--no-seed"),
    ({"without": ("threads",)}, "--without threads"),
    ({"fail_fast": True}, "--fail-fast"),
])
def test_options_that_contradict_the_threads_axis(given: dict[str, Any], says: str) -> None:
    with pytest.raises(UsageError) as e:
        RunOptions("t.py:main", across=("threads=1,2",), **given)
    assert says in str(e.value)


def test_options_that_contradict_other_axes() -> None:
    from repro_check.distributed.launch import DistOptions

    with pytest.raises(UsageError, match="--without cudnn"):
        RunOptions("t.py:main", across=("deterministic=on,off",), without=("cudnn",))
    with pytest.raises(UsageError, match="torchrun"):
        RunOptions("t.py:main", across=("env:A=1,2",), distributed=DistOptions(2))
    with pytest.raises(UsageError, match="list of strings"):
        RunOptions("t.py:main", across="threads=1,2")  # type: ignore[arg-type]
    assert RunOptions("t.py:main", across=("env:A=1,2",), runs=1).axes[0].variable == "A"


def test_more_threads_than_cores_is_refused() -> None:
    axes = ax.parse_axes(["threads=1,8"])
    with pytest.raises(UsageError, match="8 threads, but this machine has 2 usable core"):
        ax.check_cores(axes, cores=2)
    ax.check_cores(axes, cores=8)


# ---- what may run at once ------------------------------------------------------------------------
def _spec(index: int, threads: int | None) -> RunSpec:
    return RunSpec(RunConfig(run=index, target=parse("t.py:main"), threads=threads))


def test_runs_go_together_only_where_their_threads_and_the_gpu_fit() -> None:
    cells = ax.grid(ax.parse_axes(["threads=1,2", "device=cpu,cuda"]))
    by_run = {i: c for i, c in enumerate(cells, 1)}  # 1: t1 cpu, 2: t1 cuda, 3: t2 cpu, 4: t2 cuda
    fits = Fits(by_run, cores=4)
    one_cpu, one_gpu, two_cpu, two_gpu = (_spec(i, c.threads) for i, c in by_run.items())
    assert fits(one_gpu, [one_cpu]) and fits(two_cpu, [one_cpu])
    assert not fits(two_gpu, [one_gpu])  # one run at a time on the GPU
    assert not fits(two_cpu, [one_cpu, two_gpu])  # 1 + 2 + 2 threads > 4 cores
    assert not Fits(by_run, cores=2)(two_cpu, [one_cpu])
    assert Fits(by_run, cores=2).cost(_spec(1, None)) == 2  # thread count not fixed: all cores


def test_warm_runs_use_the_caches_the_first_cold_run_fills_and_wait_for_it(tmp_path: Path) -> None:
    cells = ax.grid(ax.parse_axes(["threads=1,2", "compile-cache=cold,warm"]))
    plan = Plan(cells, 2, tmp_path, caches=tmp_path / "caches")
    filled = {var: str(tmp_path / "caches" / "env-1" / sub)
              for var, sub in zip(ax.CACHE_VARIABLES, ("torchinductor", "triton"))}
    assert plan.cache_env(cells[0], 1) == filled  # the first cold run fills them
    assert plan.cache_env(cells[0], 2) == {}  # the second compiles in fresh caches, as any run
    assert plan.cache_env(cells[1], 1) == plan.cache_env(cells[1], 2) == filled
    assert plan.cache_env(cells[3], 2) == plan.cache_env(cells[2], 1) != filled
    assert plan.probe_env(cells[0], {**filled, "A": "1"}) == {"A": "1"}  # a cold probe: fresh
    assert plan.probe_env(cells[1], filled) == filled
    assert Plan(cells, 2, tmp_path).cache_env(cells[1], 1) == {}  # no compile-cache axis
    fillers = cache_fillers(plan)
    assert fillers == {3: 1, 4: 1, 7: 5, 8: 5}
    by_run = {plan.index(c.index, r): c for c in cells for r in (1, 2)}
    fits = Fits(by_run, cores=8, fillers=fillers)
    first, second, warm = _spec(1, 1), _spec(2, 1), _spec(3, 1)
    assert not fits(warm, [first]) and not fits(warm, [second, first])
    assert fits(warm, [second])  # the run that fills its caches has ended


def test_the_cache_folder_is_removed_and_what_a_warm_run_started_from_is_said(
        tmp_path: Path) -> None:
    axes = ax.parse_axes(["compile-cache=cold,warm"])
    cells = ax.grid(axes)
    with compile_caches(axes) as folder:
        assert folder is not None and folder.is_dir()
        plan = Plan(cells, 1, tmp_path, caches=folder)
        (empty,) = cache_notes(plan, {})
        assert "left its compile caches empty" in empty and "could not show" in empty
        kernels = plan.cache_folder(cells[0]) / "torchinductor"
        kernels.mkdir(parents=True)
        (kernels / "k.py").write_bytes(b"x" * 2**20)
        (filled,) = cache_notes(plan, {})
        assert filled == ("compile-cache: compile-cache=warm started from the compile caches "
                          "compile-cache=cold filled: 1 file(s), 1.0 MiB")
    assert not folder.exists()
    with compile_caches(ax.parse_axes(["threads=1,2"])) as none:
        assert none is None


@pytest.mark.parametrize("text, values, args", [
    ("args=|--checkpointing", ("", "--checkpointing"), [(), ("--checkpointing",)]),
    ("args=--lr=0.1, 0.2|--lr 0.5", ("--lr=0.1, 0.2", "--lr 0.5"),
     [("--lr=0.1,", "0.2"), ("--lr", "0.5")]),  # commas are arguments' own
    ("args=--name 'a|b'|--name \"c d\"|--name e\\|f", ("--name 'a|b'", '--name "c d"', "--name e\\|f"),
     [("--name", "a|b"), ("--name", "c d"), ("--name", "e|f")]),  # a quoted | is no separator
])
def test_argument_lists_split_at_unquoted_bars_and_as_a_shell_splits(
        text: str, values: tuple[str, ...], args: list[tuple[str, ...]]) -> None:
    axis = ax.parse_axis(text)
    assert axis.values == values and axis.flag() == text
    assert [c.args for c in ax.grid([axis])] == args


@pytest.mark.parametrize("text, says", [
    ("args=--x", "at least two argument lists"),
    ("args=--x|--x", "'--x' and '--x' are the same arguments"),
    ("args=--lr 1| --lr  1", "the same arguments"),
    ("args=|", "the same arguments"),
    ("args=--name 'a|--b", "cannot split it into arguments (No closing quotation)"),
])
def test_malformed_argument_lists_are_one_usage_error(text: str, says: str) -> None:
    with pytest.raises(UsageError) as e:
        ax.parse_axis(text)
    assert says in str(e.value)


def test_each_cell_appends_its_arguments_to_the_scripts_own(tmp_path: Path) -> None:
    cells = ax.grid(ax.parse_axes(["args=|--checkpointing", "threads=1,2"]))
    assert [c.label for c in cells] == [
        "args=(none), threads=1", "args=(none), threads=2",
        "args=--checkpointing, threads=1", "args=--checkpointing, threads=2"]
    assert all(c.overrides() == {} and c.environment() == {} for c in cells)
    plan = Plan(cells, 1, tmp_path)
    base = [RunSpec(RunConfig(run=i, target=parse("t.py:main"), args=("--steps", "3")))
            for i in range(1, 5)]
    assert [s.told.args for s in plan.specs(base)] == [
        ("--steps", "3"), ("--steps", "3"), ("--steps", "3", "--checkpointing"),
        ("--steps", "3", "--checkpointing")]


def test_each_run_of_an_nproc_cell_is_a_torchrun_job_of_that_many_ranks(tmp_path: Path) -> None:
    cells = ax.grid(ax.parse_axes(["nproc=1,2", "threads=1,2"]))
    assert [c.nproc for c in cells] == [1, 1, 2, 2]
    plan = Plan(cells, 1, tmp_path)
    base = [RunSpec(RunConfig(run=i, target=parse("t.py:main"))) for i in range(1, 5)]
    specs = plan.specs(base)
    launchers = [s.launcher for s in specs]
    assert all(isinstance(x, Distributed) for x in launchers)
    assert [x.local_ranks for x in launchers if isinstance(x, Distributed)] == [1, 1, 2, 2]
    assert plan.specs([RunSpec(RunConfig(run=1, target=parse("t.py:main")))])[0].launcher \
        is not None
    fits = Fits({s.index: plan.locate(s.index)[0] for s in specs}, cores=4)
    assert [fits.cost(s) for s in specs] == [1, 2, 2, 4]  # threads x ranks
    assert not fits(specs[3], [specs[0]]) and fits(specs[2], [specs[1]])
    plain = Plan(ax.grid(ax.parse_axes(["threads=1,2"])), 1, tmp_path)
    assert all(s.launcher is None for s in plain.specs(base[:2]))


def test_process_counts_are_compared_on_what_every_rank_holds_alike() -> None:
    policy = across_ranks(RunOptions("t.py:main").policy())
    assert all(policy.compares(s) for s in ("init", "grads", "params", "opt", "lr"))
    assert not any(policy.compares(s) for s in ("loss", "batch", "rng.torch", "rng.python"))


class _Cmp:
    def __init__(self) -> None:
        self.steps: list[tuple[int, int]] = []

    def add_step(self, run: int, step: int, signals: dict[str, Any], band: Any = None) -> None:
        self.steps.append((run, step))


def test_a_jobs_rank_0_stands_for_its_run() -> None:
    main, pair = _Cmp(), _Cmp()
    feed = AcrossFeed(main, {2: [(pair, 2)]})  # type: ignore[arg-type]
    for rank in (None, 0, 1, 2):
        raw: dict[str, Any] = {"step": 1, "signals": {"params": "x"}}
        if rank is not None:
            raw["rank"] = rank
        feed.event(2, StepRecord(raw, 1, {"params": "x"}))
    assert main.steps == [(2, 1), (2, 1)] and pair.steps == [(2, 1), (2, 1)]


# ---- the interpreter probe -----------------------------------------------------------------------
def _facts(**over: Any) -> dict[str, Any]:
    facts = {"python": "3.11.7", "torch": "2.14.1", "cuda": None, "cuda_available": False,
             "numpy": "2.4.6", "package": os.path.join(pathentry.PACKAGE_PARENT, "repro_check",
                                                       "__init__.py"),
             "fingerprints": ax.fingerprint.ALGORITHM}
    facts.update(over)
    return facts


def test_probe_problems_are_named() -> None:
    exe = "/x/bin/python"
    name = f"python={exe}"
    ok = ax.Probe(exe, _facts())
    assert ax.probe_problem(ok, False, name) is None
    assert "needs a GPU" in str(ax.probe_problem(ok, True, name))
    assert "built without CUDA" in str(ax.probe_problem(ok, True, name))
    missing = ax.Probe(exe, _facts(torch_error="ModuleNotFoundError: No module named 'torch'"))
    assert "cannot import torch" in str(ax.probe_problem(missing, False, name))
    broken = ax.Probe(exe, _facts(package_error="ModuleNotFoundError: xxhash"))
    assert "cannot import repro-check" in str(ax.probe_problem(broken, False, name))
    other = ax.Probe(exe, _facts(package="/elsewhere/repro_check/__init__.py"))
    assert "imports another repro-check" in str(ax.probe_problem(other, False, name))
    blake = ax.Probe(exe, _facts(fingerprints="blake2b_128"))
    assert "install xxhash" in str(ax.probe_problem(blake, False, name))
    assert ax.probe_problem(ax.Probe(exe, error="no such file"), False, name) == \
        f"{name}: no such file"


def test_a_venv_folder_names_its_interpreter(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("")
    assert ax.interpreter_path(str(tmp_path)) == str(tmp_path / "bin" / "python")


# ---- drift, price, localization of uninitialized memory ------------------------------------------
def test_drift_is_exact_and_says_where_it_exceeds(tmp_path: Path) -> None:
    a = write_trace(tmp_path / "a.jsonl", [1.0, 0.5, 0.25, 0.125])
    b = write_trace(tmp_path / "b.jsonl", [1.0, 0.5, 0.2505, 0.126])
    d = loss_drift(a, b, Tolerance(atol=1e-4))
    assert d.steps == 4 and d.max_at == 4 and d.exceeds_at == 3
    assert d.first_at == 3 and d.differing_steps == 2
    assert d.max_abs == pytest.approx(0.001, rel=1e-3)
    assert d.final_abs == d.max_abs
    assert d.series[0] == (1, 0.0)
    assert loss_drift(a, b).exceeds_at is None  # no tolerance given: nothing to exceed
    same = loss_drift(a, a, Tolerance(atol=1e-4))
    assert same.max_abs == 0.0 and same.exceeds_at is None
    nan = write_trace(tmp_path / "n.jsonl", [1.0, float("nan"), 0.25, 0.125])
    assert loss_drift(a, nan).nonfinite_at == 2
    assert loss_drift(a, nan).to_dict()["max_abs"] == 0.0


def _cell(index: int, label: str, settings: dict[str, str], loop: float) -> AcrossCell:
    return AcrossCell(index, label, settings, [index], steps=11, seconds=2.0, loop_seconds=loop)


def test_price_of_determinism_pairs_each_on_with_its_off() -> None:
    cells = ax.grid(ax.parse_axes(["threads=1,2", "deterministic=on,off"]))
    infos = [_cell(c.index, c.label, c.settings_dict(), loop) for c, loop in
             zip(cells, (1.5, 1.0, 3.0, 3.0))]
    price = price_of_determinism(cells, infos)
    assert [(p.on, p.off) for p in price] == [
        ("threads=1, deterministic=on", "threads=1, deterministic=off"),
        ("threads=2, deterministic=on", "threads=2, deterministic=off")]
    assert price[0].measure == "loop" and price[0].ratio == pytest.approx(1.5)
    assert price[0].on_seconds_per_step == pytest.approx(0.15)
    assert infos[0].per_step == pytest.approx(2.0 / 11)
    assert price[0].within_noise is None  # no step times: nothing claimed


def test_a_price_inside_the_spread_of_the_step_times_is_within_noise() -> None:
    """-44.5 % on a loaded machine: the step times scatter more than the difference, so the
    report says so instead of showing a bare percentage."""
    from repro_check.report.across import price_text

    cells = ax.grid(ax.parse_axes(["deterministic=on,off"]))
    noisy = [dataclasses.replace(_cell(c.index, c.label, c.settings_dict(), loop),
                                 step_spread=spread)
             for c, loop, spread in zip(cells, (1.0, 1.8), (0.12, 0.10))]
    row = price_of_determinism(cells, noisy)[0]
    assert row.ratio == pytest.approx(1 / 1.8) and row.within_noise is True
    text = price_text(row)
    assert "within noise (-44.4 %" in text and "± 120 ms" in text
    steady = [dataclasses.replace(c, step_spread=0.01) for c in noisy]
    row = price_of_determinism(cells, steady)[0]
    assert row.within_noise is False and "within noise" not in price_text(row)


def test_uninitialized_memory_is_no_culprit() -> None:
    def op(name: str, ins: list[str], out: list[str]) -> dict[str, Any]:
        return {"k": "op", "ph": "forward", "m": "lin", "op": name, "in": ins, "out": out}

    a = [op("aten::empty", [], ["g1"]), op("aten::mm.out", ["x", "g1"], ["y"]),
         op("aten::relu", ["y"], ["r1"])]
    b = [op("aten::empty", [], ["g2"]), op("aten::mm.out", ["x", "g2"], ["y"]),
         op("aten::relu", ["y"], ["r2"])]
    loc = compare(3, a, b)
    assert loc.op == "aten::relu" and loc.inputs_agree is True  # not aten::empty
    c = [op("aten::empty", [], ["g2"]), op("aten::mm.out", ["x", "g2"], ["z"])]
    loc = compare(3, a[:2], c)
    assert loc.op == "aten::mm.out" and loc.inputs_agree  # the garbage input does not count


def test_runs_across_devices_fingerprint_the_cpu_as_a_gpu_would(
        monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from repro_check.trace import fingerprint as fp

    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    host = fp.tensor(t)
    monkeypatch.setattr(fp, "_DIGEST_EVERYWHERE", True)  # what REPRO_CHECK_DEVICE_DIGEST=1 sets
    digest = fp.tensor(t)
    assert digest != host and digest == fp.tensor(t.clone()) and fp.tensor(t + 1) != digest
    # a GPU tensor hashes its header, a marker and the device digest of its words: the same
    h = fp.hasher()
    for part in (b"torch.float32(3, 4);", b"<device>", fp.device_digest(t).numpy().tobytes()):
        h.update(part)
    assert digest == h.hexdigest()


# ---- the report, as a model and on the terminal --------------------------------------------------
def synthetic_report(tmp_path: Path) -> Report:
    a = write_trace(tmp_path / "a.jsonl", [1.0, 0.5, 0.25, 0.125])
    b = write_trace(tmp_path / "b.jsonl", [1.0, 0.5, 0.2505, 0.126])
    cells = [_cell(1, "threads=1", {"threads": "1"}, 0.3),
             _cell(2, "threads=2", {"threads": "2"}, 0.2),
             _cell(3, "threads=3", {"threads": "3"}, 0.1)]
    pairs = [AcrossPair("threads=1", "threads=2", 2, identical=False, bit_identical=False,
                        first_divergent_step=3, signal="loss", culprit="encoder.0",
                        culprit_op="aten::addmm", drift=loss_drift(a, b),
                        localization=Localization(step=3, detail="aten::addmm gives other bits"),
                        metrics=[MetricPair("acc", a=0.5, b=0.25, abs_diff=0.25,
                                            identical=False)]),
             AcrossPair("threads=1", "threads=3", 3, identical=True, bit_identical=True,
                        metrics=[MetricPair("acc", a=0.5, b=0.5, abs_diff=0.0,
                                            identical=True)])]
    part = AcrossPart([("threads", ["1", "2", "3"])], cells, pairs)
    return Report("train.py:main", [], 0, ["torch", "threads"], 3, [], None, across=part)


def test_json_has_the_across_part_and_a_bit_identical_pair_has_no_drift(tmp_path: Path) -> None:
    data = synthetic_report(tmp_path).to_dict()
    across = data["across"]
    assert across["axis"] == "threads" and across["values"] == ["1", "2", "3"]
    differs, same = across["pairs"]
    assert differs["drift"]["exceeds_at"] is None and differs["drift"]["max_at"] == 4
    assert {"a", "b", "identical", "first_divergent_step", "signal", "culprit", "culprit_op",
            "drift", "metrics"} <= set(differs)
    assert same["bit_identical"] is True and same["drift"] is None
    assert (differs["verdict"], same["verdict"]) == ("differs", "bit-identical")
    assert AcrossPair("a", "b", 2, identical=True, bit_identical=False).verdict == "agrees"
    assert across["cells"][0]["loop_seconds_per_step"] == pytest.approx(0.03)
    assert "reproducible" in data and "first_divergent_step" in data  # the check's keys stay


def render(report: Report, width: int = 120) -> str:
    console = make_console(width=width, force_terminal=False)
    with console.capture() as cap:
        console.print(summary(report), crop=False)
    return cap.get()


def test_terminal_has_one_row_a_pair_with_its_drift(tmp_path: Path) -> None:
    text = render(synthetic_report(tmp_path))
    lines = text.splitlines()
    row = next(line for line in lines if line.startswith("threads=2 ") and "differs" in line)
    assert "3 loss" in row and "0.001" in row and "·" in row
    assert any(c in row for c in "▁▂▃▄▅▆▇█")
    same = next(line for line in lines if line.startswith("threads=3 ") and "bit-identical" in line)
    assert "0.001" not in same and "—" in same
    assert "the loss bits differ from step 3, at 2 of 4 steps" in text
    assert "aten::addmm gives other bits" in text
    assert "Each environment against threads=1" in text


# ---- runs: each fixture is one invocation ---------------------------------------------------------
@pytest.fixture(scope="module")
def grid(targets: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[CliResult, Path]:
    """threads=1,2 x deterministic=on,off on a matmul-heavy MLP: 4 runs and 3 probe runs."""
    tmp = tmp_path_factory.mktemp("across-grid")
    html = tmp / "report.html"
    res = run_cli("environments.py:main", "--across", "threads=1,2", "--across",
                  "deterministic=on,off", "--report", str(html), "--", "--steps", "4", tmp=tmp,
                  cwd=targets)
    return res, html


@pytest.mark.slow
def test_threads_change_the_bits_and_the_culprit_op_is_named(grid: tuple[CliResult, Path]) -> None:
    res, _ = grid
    assert res.code == 1, res.stderr
    report = res.report
    assert report is not None and report["reproducible"] is False
    pairs = {p["b"]: p for p in report["across"]["pairs"]}
    threads = pairs["threads=2, deterministic=on"]
    assert threads["identical"] is False and threads["first_divergent_step"] == 1
    assert threads["culprit_op"] and threads["culprit_op"].startswith("aten::")
    assert threads["localization"]["found"] is True
    assert threads["drift"] is not None and "threads: 1 vs 2" in threads["environment_differences"]
    assert report["threads"] is None  # each environment has its own


@pytest.mark.slow
def test_deterministic_flags_on_a_cpu_change_nothing(grid: tuple[CliResult, Path]) -> None:
    res, _ = grid
    assert res.report is not None
    pairs = {p["b"]: p for p in res.report["across"]["pairs"]}
    off = pairs["threads=1, deterministic=off"]
    assert off["identical"] is True and off["bit_identical"] is True and off["drift"] is None
    assert off["culprit"] is None
    price = res.report["across"]["price_of_determinism"]
    assert [p["on"] for p in price] == ["threads=1, deterministic=on", "threads=2, deterministic=on"]
    assert all(p["on_seconds_per_step"] > 0 and p["ratio"] > 0 for p in price)
    cells = res.report["across"]["cells"]
    assert [c["steps"] for c in cells] == [4, 4, 4, 4]
    assert all(c["seconds_per_step"] > 0 for c in cells)


@pytest.mark.slow
def test_grid_terminal_and_html(grid: tuple[CliResult, Path]) -> None:
    res, html = grid
    assert "bit-identical" in res.stdout and "Price of determinism" in res.stdout
    row = next(line for line in res.stdout.splitlines()
               if line.startswith("threads=2, deterministic=on ") and "differs" in line)
    assert "1 grads" in row
    assert "--across threads=1,2 --across deterministic=on,off" in res.stdout  # the replay
    page = html.read_text()
    assert 'id="loss-plot"' in page
    # the threads' gradients differ at step 1; whether the loss bits follow within 4 steps is
    # the CPU's (on some machines they stay equal): the drift plot shows exactly when they do
    drifts = [p["drift"] for p in res.report["across"]["pairs"] if p["drift"]]
    if any(d["differing_steps"] for d in drifts):
        assert 'id="drift-plot"' in page
    else:
        assert 'id="drift-plot"' not in page
        assert "The loss has the same bits in every environment at every step." in page
    assert "<h2>Price of determinism</h2>" in page
    assert "<th>threads=2, deterministic=off</th>" in page  # runs named by environment
    # the pair parts in its gradients at step 1 and its losses agree until step 3: rows whose
    # spread is 0 are not painted as divergent
    table = page.split("Steps around the first divergence")[1].split("</table>")[0]
    rows = re.findall(r'<tr(?: class="([a-z]+)")?><td>(\d+)</td>(.*?)</tr>', table)
    assert rows and rows[0][:2] == ("first", "1")
    assert "<th>differs in</th>" in table  # the rows name the signal that differs (grads)
    for cls, _, cells in rows[1:]:
        equal = re.findall(r"<td>([^<]*)</td>", cells)[-2] == "0"  # the spread of 4 environments
        assert (cls == "differs") != equal, (cls, cells)
    assert all("within_noise" in p for p in res.report["across"]["price_of_determinism"])


@pytest.fixture(scope="module")
def jitter(targets: Path, tmp_path_factory: pytest.TempPathFactory) -> Report:
    """env:ACROSS_JITTER=0,1e-3 through the Python API: the divergence is planted at step 3."""
    tmp = tmp_path_factory.mktemp("across-env")
    return api.across(f"{targets / 'environments.py'}:main", ["env:ACROSS_JITTER=0,1e-3"],
                      args=["--steps", "5", "--jitter-at", "3"],
                      tolerances=from_cli(["loss=1e-6"]), trace_dir=tmp)


@pytest.mark.slow
def test_an_environment_variable_gives_a_controlled_divergence(jitter: Report) -> None:
    assert jitter.exit_code == 1 and jitter.error is None
    part = jitter.across
    assert part is not None and [c.label for c in part.cells] == [
        "env:ACROSS_JITTER=0", "env:ACROSS_JITTER=1e-3"]
    pair = part.pairs[0]
    assert (pair.first_divergent_step, pair.signal) == (3, "loss")
    assert (pair.culprit, pair.culprit_op) == ("Net.jitter", "aten::mul")
    assert pair.localization is not None and pair.localization.inputs_agree is False
    assert pair.drift is not None and pair.drift.exceeds_at == 3 and pair.drift.max_abs > 1e-6
    assert pair.drift.series[:2] == [(1, 0.0), (2, 0.0)]
    assert pair.metrics[0].name == "loss" and (pair.metrics[0].abs_diff or 0) > 0
    assert jitter.first_divergent_step == 3


@pytest.fixture(scope="module")
def same_python(targets: Path, tmp_path_factory: pytest.TempPathFactory) -> CliResult:
    """The same interpreter twice, two runs each: everything agrees."""
    tmp = tmp_path_factory.mktemp("across-python")
    return run_cli("tiny.py:main", "--across", f"python={sys.executable},{sys.executable}",
                   "--runs", "2", "--", "--steps", "5", tmp=tmp, cwd=targets)


def test_one_interpreter_twice_is_bit_identical(same_python: CliResult) -> None:
    res = same_python
    assert res.code == 0, res.stdout + res.stderr
    assert res.report is not None and res.report["reproducible"] is True
    across = res.report["across"]
    assert across["runs_per_environment"] == 2 and res.report["runs"] == 4
    (pair,) = across["pairs"]
    assert pair["bit_identical"] is True and pair["drift"] is None
    assert all(c["reproducible"] is True for c in across["cells"])
    versions = [c["versions"] for c in across["cells"]]
    assert versions[0]["torch"] and versions[0] == versions[1]
    assert versions[0]["numpy"] and "cuda" in versions[0]
    assert "bit-identical" in res.stdout and "torch" in res.stdout


def test_device_runs_fingerprint_with_the_device_digest(same_python: CliResult, targets: Path,
                                                        tmp_path: Path) -> None:
    """device=cpu,cpu: both sides on the CPU, fingerprinted as on a GPU, still bit-identical."""
    res = run_cli("tiny.py:main", "--across", "device=cpu,cpu", "--", "--steps", "5",
                  tmp=tmp_path, cwd=targets)
    assert res.code == 0, res.stdout + res.stderr
    assert res.report is not None and res.report["across"]["pairs"][0]["bit_identical"]
    assert [c["settings"] for c in res.report["across"]["cells"]] == [{"device": "cpu"}] * 2
    assert same_python.report is not None

    def first_step(report: dict[str, Any]) -> dict[str, Any]:
        return steps_of(report["run_results"][0]["trace"])[0]["signals"]

    digest, plain = first_step(res.report), first_step(same_python.report)
    assert digest["loss"] == plain["loss"] and digest["params"] != plain["params"]
    env = read_lines(res.report["run_results"][0]["trace"])[0]["header"]["environment"]
    assert env["CUDA_VISIBLE_DEVICES"] == ""  # the GPU hidden on the CPU side


def test_cross_device_comparison_and_localization_leave_out_one_sided_things() -> None:
    from repro_check.compare.steps import Policy
    from repro_check.commands.across import cross_device, drop_transfers

    policy = cross_device(Policy())
    assert policy.compares("loss") and policy.compares("params") and not policy.compares("rng.cuda")
    assert cross_device(Policy(signals=frozenset({"loss"}))).signals == frozenset({"loss"})
    records = [{"k": "op", "op": "aten::_to_copy", "in": ["x"], "out": ["x"]},
               {"k": "op", "op": "aten::_to_copy", "in": ["x"], "out": ["half"]},
               {"k": "module", "m": "lin", "out": "y"}]
    assert drop_transfers(records) == records[1:]


def test_a_failing_environment_is_exit_3(targets: Path, tmp_path: Path) -> None:
    res = run_cli("tiny.py:main", "--across", "env:X=a,b", "--", "--steps", "3",
                  "--raise-at", "2", "--raise-in-run", "2", tmp=tmp_path, cwd=targets)
    assert res.code == 3, res.stdout + res.stderr
    assert res.report is not None and "raised RuntimeError" in res.report["error"]
    assert res.report["across"]["pairs"][0]["culprit"] is None  # nothing localized


# ---- usage errors through the command line (no run starts) ---------------------------------------
def _no_run(res: CliResult) -> None:
    assert res.code == 2, res.stdout + res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("repro-check: error: --"), res.stderr
    assert "started" not in res.stderr


@pytest.mark.parametrize("flags", [
    ["--across", "thread=1,2"],
    ["--across", "threads=1"],
    ["--across", f"threads=1,{ax.usable_cores() + 1}"],
    ["--across", "python=/no/such/python,/no/such/python"],
    ["--across", "threads=1,2", "--threads", "2"],
    ["--across", "env:X=1,2", "--no-seed"],
])
def test_usage_errors_are_one_line_before_any_run(flags: list[str], tmp_path: Path) -> None:
    _no_run(run_plain("tiny.py:main", *flags))


def _wrapper(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_an_interpreter_without_torch_is_refused(tmp_path: Path) -> None:
    no_site = _wrapper(tmp_path, "python-no-site", f'exec {sys.executable} -S "$@"')
    res = run_plain("tiny.py:main", "--across", f"python={sys.executable},{no_site}")
    _no_run(res)
    assert "cannot import torch" in res.stderr


def test_an_interpreter_without_this_package_is_refused(tmp_path: Path) -> None:
    # ``python -I`` ignores PYTHONPATH: it lacks this package unless the package is installed
    # into the interpreter itself (an editable install is), and then the case cannot be built
    installed = subprocess.run([sys.executable, "-I", "-c", "import repro_check.child"],
                               capture_output=True).returncode == 0
    if installed:
        pytest.skip("this package is installed into the interpreter: python -I still imports it")
    isolated = _wrapper(tmp_path, "python-isolated", f'exec {sys.executable} -I "$@"')
    res = run_plain("tiny.py:main", "--across", f"python={sys.executable},{isolated}")
    _no_run(res)
    assert "repro-check" in res.stderr.split("error:", 1)[1]


def test_cuda_without_a_gpu_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """device=cpu,cuda where the probe of this interpreter sees no GPU: one usage error, before
    any run. The probe's answer is given (the real probe imports torch, seconds; on a machine with
    a GPU scripts/gpu_check.py runs device=cpu,cuda); how such an error reaches the command line
    as one line is test_usage_errors_are_one_line_before_any_run's (python=/no/such/python)."""
    asked: list[dict[str, bool]] = []

    def probe_all(executables: dict[str, bool]) -> dict[str, ax.Probe]:
        asked.append(dict(executables))
        return {exe: ax.Probe(exe, _facts()) for exe in executables}

    monkeypatch.setattr(ax, "probe_all", probe_all)
    with pytest.raises(UsageError) as e:
        ax.check_interpreters(ax.grid(ax.parse_axes(["device=cpu,cuda"])))
    assert asked == [{sys.executable: True}]  # this interpreter, asked to see a GPU
    assert str(e.value).startswith("--across device=cuda needs a GPU, but this interpreter")
    assert "built without CUDA" in str(e.value)
    ax.check_interpreters(ax.grid(ax.parse_axes(["device=cpu,cpu"])))  # no GPU needed: fine
    assert asked[-1] == {sys.executable: False}


@pytest.mark.slow
def test_a_gpu_numerics_variable_is_named_as_the_environment_difference(targets: Path,
                                                                         tmp_path: Path) -> None:
    """The trace header records NCCL_*, NVTE_*, CUBLAS_*, CUDNN_* and torch's determinism
    variables, so an axis over one is named in the pair (on a CPU NCCL changes no bit)."""
    report = api.across(f"{targets / 'tiny.py'}:main", ["env:NCCL_ALGO=Ring,Tree"],
                        args=["--steps", "3"], trace_dir=tmp_path)
    assert report.exit_code == 0 and report.across is not None
    pair = report.across.pairs[0]
    assert pair.bit_identical and pair.environment_differences == ["NCCL_ALGO: Ring vs Tree"]


@pytest.mark.slow
def test_argument_lists_as_an_axis_name_the_flag_that_changes_the_bits(tmp_path: Path) -> None:
    """args=|--checkpointing|--approximate tanh: activation checkpointing recomputes the same
    bits, GELU's tanh approximation does not, and its first op is named as the arguments'
    doing (3 runs, 2 probe runs)."""
    res = run_cli("flags.py:main", "--across", "args=|--checkpointing|--approximate tanh",
                  "--", "--steps", "4", tmp=tmp_path)
    assert res.code == 1, res.stdout + res.stderr
    assert res.report is not None
    across = res.report["across"]
    assert [c["settings"] for c in across["cells"]] == [
        {"args": ""}, {"args": "--checkpointing"}, {"args": "--approximate tanh"}]
    checkpointing, approximate = across["pairs"]
    assert checkpointing["bit_identical"] and checkpointing["b"] == "args=--checkpointing"
    assert not approximate["identical"] and approximate["first_divergent_step"] == 1
    assert approximate["culprit"] == "Net.block.1" and approximate["culprit_op"] == "aten::gelu"
    detail = approximate["localization"]["detail"]
    assert "with args=--approximate tanh than with args=(none)" in detail
    out = " ".join(res.stdout.split())
    assert "across args=|--checkpointing|--approximate tanh" in out
    assert "--across 'args=|--checkpointing|--approximate tanh'" in out  # the replay line


@pytest.mark.slow
def test_process_counts_name_the_global_batch_and_the_initial_weights(tmp_path: Path) -> None:
    """nproc=1,2 on a DDP script (gloo, real torchrun jobs): per-rank batches of 16 double the
    global batch with two ranks; a fixed global batch of 16 is the same on both sides, from the
    same initial weights, and the pair is compared on what every rank holds alike."""
    grown = run_cli("ddp/train.py:main", "--across", "nproc=1,2", tmp=tmp_path / "grown")
    fixed = run_cli("ddp/train.py:main", "--across", "nproc=1,2", "--", "--global-batch", "16",
                    tmp=tmp_path / "fixed")
    for res in (grown, fixed):
        assert res.code == 1, res.stdout + res.stderr
        assert res.report is not None
    assert grown.report is not None and fixed.report is not None
    (pair,) = grown.report["across"]["pairs"]
    assert [c["global_batch"] for c in grown.report["across"]["cells"]] == [16, 32]
    assert pair["same_global_batch"] is False and pair["same_initial_weights"] is True
    assert "the global batch differs: 16 samples with nproc=1, 32 with nproc=2 (16 a rank)" \
        in pair["scaling_note"]
    (pair,) = fixed.report["across"]["pairs"]
    assert [c["global_batch"] for c in fixed.report["across"]["cells"]] == [16, 16]
    assert pair["same_global_batch"] is True and pair["same_initial_weights"] is True
    assert pair["first_divergent_step"] == 1 and pair["signal"] in ACROSS_RANKS_SIGNALS
    assert pair["drift"] is None and pair["localization"] is None  # rank 0's loss is its own
    assert "(8 a rank)" in " ".join(fixed.stdout.split())
    traces = list((tmp_path / "fixed" / "traces").glob("*/env-2-run-1.rank-*.jsonl"))
    assert len(traces) == 2  # both ranks of the job recorded
